// grammar/vocabulary.cpp — a Vocabulary: token bytes, stop ids and XGrammar's
// TokenizerInfo over them.
//
// The bytes are given to XGrammar already decoded (VocabType::RAW): the
// tokenizer's piece() is what the detokenizer emits, so the grammar sees
// exactly the text the client will read. A token whose bytes are "" is one
// XGrammar treats as special (never allowed); stop ids come first. Tokens
// that cannot be part of UTF-8 text are made "" too (utf8_possible).
#include <algorithm>

#include "base/check.h"
#include "grammar/xgrammar_bridge.h"
#include "model/tokenizer.h"

namespace kvasir::grammar {
namespace {

// FNV-1a, 64 bits, over lengths and bytes.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
};

// Whether the bytes can be part of UTF-8 text: no byte UTF-8 never uses
// (C0, C1, F5-FF) and no lead byte followed by a second byte out of its
// range. A sequence cut at the token's start is judged by the Matcher, with
// the byte before it.
bool utf8_possible(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = uint8_t(s[i]);
    if (b == 0xC0 || b == 0xC1 || b >= 0xF5) return false;
    if (i + 1 < s.size() && !utf8_second_byte_ok(b, uint8_t(s[i + 1]))) return false;
  }
  return true;
}

}  // namespace

Vocabulary::Vocabulary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Vocabulary::~Vocabulary() = default;

std::shared_ptr<const Vocabulary> Vocabulary::from_tokens(std::vector<std::string> tokens,
                                                          std::vector<int32_t> stop_ids,
                                                          int32_t size) {
  const auto n = int32_t(tokens.size());
  KV_CHECK(!tokens.empty() && tokens.size() < (1u << 30), "vocabulary of {} tokens is not usable",
           tokens.size());
  if (size == 0) size = n;
  KV_CHECK(size >= n, "vocabulary size {} is below its {} tokens", size, n);
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
  for (int32_t id : stop_ids) {
    KV_CHECK(id >= 0 && id < n, "stop token id {} is out of range [0, {})", id, n);
    tokens[id].clear();  // a stop token ends the output; it is never text
  }
  for (std::string& t : tokens)
    if (!utf8_possible(t)) t.clear();  // never part of UTF-8 text

  auto impl = std::make_unique<Impl>();
  Fnv f;
  f.u64(uint64_t(size));
  for (const std::string& t : tokens) {
    f.u64(t.size());
    f.bytes(t.data(), t.size());
  }
  for (int32_t id : stop_ids) f.u64(uint64_t(id));
  impl->fingerprint = f.h;
  impl->info = xgrammar::TokenizerInfo(tokens, xgrammar::VocabType::RAW, size, stop_ids, false);
  impl->tokens = std::move(tokens);
  impl->stop_ids = std::move(stop_ids);
  impl->size = size;
  return std::shared_ptr<const Vocabulary>(new Vocabulary(std::move(impl)));
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const Tokenizer& tok, int32_t size) {
  const int32_t n = tok.vocab_size();
  KV_CHECK(size == 0 || size >= n, "vocabulary size {} is below the tokenizer's {} tokens", size,
           n);
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> stops;
  for (int32_t id = 0; id < n; ++id) {
    if (tok.is_eog(id))
      stops.push_back(id);
    else if (!tok.is_special(id))
      tokens[id] = tok.piece(id);
  }
  return from_tokens(std::move(tokens), std::move(stops), size == 0 ? n : size);
}

int32_t Vocabulary::size() const {
  return impl_->size;
}

size_t Vocabulary::mask_words() const {
  return (size_t(impl_->size) + 31) / 32;
}

const std::string& Vocabulary::token_bytes(int32_t id) const {
  static const std::string kNone;
  KV_CHECK(id >= 0 && id < impl_->size, "token id {} is out of range [0, {})", id, impl_->size);
  return id < int32_t(impl_->tokens.size()) ? impl_->tokens[id] : kNone;
}

const std::vector<int32_t>& Vocabulary::stop_ids() const {
  return impl_->stop_ids;
}

uint64_t Vocabulary::fingerprint() const {
  return impl_->fingerprint;
}

}  // namespace kvasir::grammar
