// model/tokenizer.cpp — validation, indexes, special-token partition, decode.
#include "model/tokenizer.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/utf8.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

namespace kvasir {
namespace {

// Texts that end generation whatever the model's eos id says (the reference
// keeps the same list, by text). "</s>" too: llama.cpp 0.3.36 lists it, so
// Gemma 3's user-defined "</s>" (212) becomes a control token that ends
// generation and that text parsing without specials does not match.
// "<|return|>" and "<|call|>" are harmony's (gpt-oss).
constexpr const char* kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",   "<|endoftext|>",      "</s>",
    "<|eom_id|>", "<EOT>",      "_<EOT>",  "<|end_of_text|>", "<end_of_utterance>", "<|return|>",
    "<|call|>",
};

std::string decode_byte_alphabet(std::string_view text) {
  std::string out;
  std::vector<uint32_t> cps;
  unicode::decode_utf8(text, cps);
  for (uint32_t cp : cps) {
    const int b = unicode::byte_from_symbol(cp);
    if (b >= 0) {
      out.push_back(char(b));
    } else {  // not in the alphabet: the reference writes a marker
      std::string u;
      append_utf8(u, cp);
      out += "[UNK_BYTE_0x";
      for (unsigned char c : u) out += fmt::format("{:02x}", c);
      out += std::string(text) + "]";
    }
  }
  return out;
}

std::string spm_piece(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "\xE2\x96\x81") == 0) {  // U+2581 -> ' '
      out.push_back(' ');
      i += 3;
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

}  // namespace

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_data(TokenizerData data) {
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(data)));
}

Tokenizer::Tokenizer(TokenizerData data) : d_(std::move(data)), impl_(std::make_unique<Impl>()) {
  const size_t n = d_.tokens.size();
  const std::string who = d_.name.empty() ? std::string("tokenizer") : d_.name;
  KV_CHECK(n > 0 && n < (1u << 30), "{}: vocabulary size {} is not usable", who, n);
  if (d_.attrs.empty()) d_.attrs.assign(n, kAttrNormal);
  KV_CHECK(d_.attrs.size() == n, "{}: {} token types for {} tokens", who, d_.attrs.size(), n);
  KV_CHECK(d_.scores.empty() || d_.scores.size() == n, "{}: {} scores for {} tokens", who,
           d_.scores.size(), n);
  // The reference disables special ids out of range rather than trusting them.
  for (int32_t* id : {&d_.bos, &d_.eos, &d_.eot, &d_.eom, &d_.unk, &d_.pad})
    if (*id >= int32_t(n) || *id < -1) *id = -1;
  KV_CHECK(!d_.add_bos || d_.bos >= 0, "{}: add_bos is set but there is no bos token", who);
  KV_CHECK(!d_.add_eos || d_.eos >= 0, "{}: add_eos is set but there is no eos token", who);

  Impl& m = *impl_;
  m.token_to_id.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    if (d_.tokens[i].empty()) d_.tokens[i] = fmt::format("[EMPTY_{}]", i);
  }
  for (size_t i = 0; i < n; ++i) {
    auto [it, fresh] = m.token_to_id.emplace(d_.tokens[i], int32_t(i));
    KV_CHECK(fresh, "{}: token {} duplicates token {} ('{}')", who, i, it->second, d_.tokens[i]);
  }

  // End of generation, by id and by text, as the reference decides it.
  m.eog.assign(n, 0);
  for (int32_t id : {d_.eos, d_.eot, d_.eom})
    if (id >= 0) m.eog[id] = 1;
  for (int32_t id : d_.eog_ids)
    if (id >= 0 && size_t(id) < n) m.eog[id] = 1;
  for (const char* t : kEogTexts) {
    auto it = m.token_to_id.find(t);
    if (it == m.token_to_id.end()) continue;
    m.eog[it->second] = 1;
    d_.attrs[it->second] |= kAttrControl;  // the reference forces these to control
  }
  // Harmony (gpt-oss): <|end|> closes one message, <|return|> and <|call|>
  // end the answer. Where all three are present the reference takes <|end|>
  // out of the end-of-generation set, or a reply would stop after its
  // analysis channel. (It also makes <|end|>, <|start|>, <|channel|>,
  // <|message|> and <|constrain|> user-defined, matched even in text parsed
  // without specials; we keep them control tokens so that a message's
  // content cannot forge a harmony turn: docs/tokenizer.md.)
  {
    auto id_of = [&](const char* t) {
      auto it = m.token_to_id.find(t);
      return it == m.token_to_id.end() ? -1 : it->second;
    };
    const int32_t ret = id_of("<|return|>"), call = id_of("<|call|>"), end = id_of("<|end|>");
    if (ret >= 0 && call >= 0 && end >= 0 && m.eog[ret] && m.eog[call]) m.eog[end] = 0;
  }

  for (size_t i = 0; i < n; ++i)
    if (d_.attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown))
      m.specials.push_back(int32_t(i));
  std::stable_sort(m.specials.begin(), m.specials.end(),
                   [&](int32_t a, int32_t b) { return d_.tokens[a].size() > d_.tokens[b].size(); });

  if (d_.model == TokenizerData::Model::kBpe) m.index_merges(d_, who);

  std::fill(std::begin(m.byte_token), std::end(m.byte_token), -1);
  for (int b = 0; b < 256; ++b) {
    auto it = m.token_to_id.find(fmt::format("<0x{:02X}>", b));
    if (it != m.token_to_id.end()) m.byte_token[b] = it->second;
  }

  m.render_pieces(d_, who);
}

// BPE: every string the merges mention interned as a symbol, and each merge
// of two symbols (the first rank wins).
void Tokenizer::Impl::index_merges(const TokenizerData& d, const std::string& who) {
  const size_t n = d.tokens.size();
  sym_text.reserve(n + d.merges.size());
  for (size_t i = 0; i < n; ++i) sym_text.emplace_back(d.tokens[i]);
  sym_id = token_to_id;
  auto intern = [&](std::string s) -> int32_t {
    auto it = sym_id.find(s);
    if (it != sym_id.end()) return it->second;
    extra_syms.push_back(std::move(s));
    const int32_t id = int32_t(sym_text.size());
    sym_text.emplace_back(extra_syms.back());
    sym_id.emplace(extra_syms.back(), id);
    return id;
  };
  merges.reserve(d.merges.size() * 2);
  for (size_t r = 0; r < d.merges.size(); ++r) {
    const std::string& mg = d.merges[r];
    // Split at the first space after the first character (the reference's
    // rule, so a merge of " " with "x" can be written "  x").
    const size_t sp = mg.size() > 1 ? mg.find(' ', 1) : std::string::npos;
    KV_CHECK(sp != std::string::npos && sp + 1 < mg.size(),
             "{}: merge {} ('{}') is not 'left right'", who, r, mg);
    std::string left = mg.substr(0, sp), right = mg.substr(sp + 1);
    const int32_t l = intern(left), rr = intern(right), res = intern(left + right);
    merges.emplace(key(l, rr), Merge{int32_t(r), res});  // first rank wins
  }
}

// The piece decode() gives each id, specials rendered (skip_special is
// applied on top).
void Tokenizer::Impl::render_pieces(const TokenizerData& d, const std::string& who) {
  const size_t n = d.tokens.size();
  pieces.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t a = d.attrs[i];
    const std::string& t = d.tokens[i];
    if (d.model == TokenizerData::Model::kBpe) {
      if (a & (kAttrControl | kAttrUnknown | kAttrUserDefined))
        pieces[i] = t;
      else if (a & kAttrNormal)
        pieces[i] = decode_byte_alphabet(t);
      // byte/unused/undefined types render as nothing, like the reference
    } else {
      if (a & kAttrNormal)
        pieces[i] = spm_piece(t);
      else if (a & (kAttrControl | kAttrUnknown | kAttrUserDefined))
        pieces[i] = t;
      else if (a & kAttrByte) {
        unsigned v = 0;
        KV_CHECK(t.size() == 6 && std::sscanf(t.c_str(), "<0x%02X>", &v) == 1,
                 "{}: byte token {} is '{}'", who, i, t);
        pieces[i] = std::string(1, char(v));
      }
    }
  }
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->eog[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && (d_.attrs[id] & (kAttrControl | kAttrUnknown));
}

int32_t Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->token_to_id.find(text);
  return it == impl_->token_to_id.end() ? -1 : it->second;
}

const std::string& Tokenizer::piece(int32_t id, bool skip_special) const {
  static const std::string kEmpty;
  KV_CHECK(id >= 0 && id < vocab_size(), "token id {} is out of range [0, {})", id, vocab_size());
  if (skip_special && (d_.attrs[id] & (kAttrControl | kAttrUnknown))) return kEmpty;
  return impl_->pieces[id];
}

std::string Tokenizer::token_text(int32_t id) const {
  return piece(id, false);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) out += piece(id, skip_special);
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && d_.add_bos) out.push_back(d_.bos);

  // Fragments: a token id (>= 0) or a text range [off, off+len).
  struct Frag {
    int32_t id;
    size_t off, len;
  };
  std::vector<Frag> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  auto is_space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  for (int32_t sid : impl_->specials) {
    const uint16_t attr = d_.attrs[sid];
    if (!parse_special && (attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string& st = d_.tokens[sid];
    std::vector<Frag> next;
    next.reserve(frags.size());
    for (const Frag& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.off, len = f.len;
      while (true) {
        const size_t match = text.substr(0, off + len).find(st, off);
        if (match == std::string_view::npos) break;
        size_t left_len = match - off;
        if (attr & kAttrLStrip)
          while (left_len > 0 && is_space(text[off + left_len - 1])) --left_len;
        if (left_len > 0) next.push_back({-1, off, left_len});
        next.push_back({sid, 0, 0});
        size_t roff = match + st.size(), rlen = off + len - roff;
        if (attr & kAttrRStrip)
          while (rlen > 0 && is_space(text[roff])) ++roff, --rlen;
        off = roff, len = rlen;
        if (len == 0) break;
      }
      if (len > 0) next.push_back({-1, off, len});
    }
    frags.swap(next);
  }

  bool prev_special = true;
  for (const Frag& f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
      prev_special = true;
    } else {
      encode_text(text.substr(f.off, f.len), out, prev_special);
      prev_special = false;
    }
  }
  if (add_special && d_.add_eos) out.push_back(d_.eos);
  return out;
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out,
                            bool prev_special) const {
  if (d_.model == TokenizerData::Model::kBpe) {
    encode_bpe(text, out);
  } else {
    std::string s;
    if (d_.add_space_prefix && prev_special) s = " ";
    s.append(text);
    encode_spm(s, out);
  }
}

}  // namespace kvasir
