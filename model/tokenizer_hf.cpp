// model/tokenizer_hf.cpp — a Tokenizer from a Hugging Face tokenizer.json.
//
// Supported: model.type "BPE" with a byte-level pre-tokenizer whose split
// pattern is one of the families we implement (GPT-2 ByteLevel regex,
// SmolLM2 Digits + ByteLevel, Llama 3 and Qwen2 Split + ByteLevel), and
// SentencePiece-style BPE (Metaspace, or a Replace " " → "▁" normalizer with
// or without Prepend "▁" — Gemma's has none and splits on " " — and
// byte_fallback). Anything else is refused with the part that is not
// supported. Added tokens: "special" ones become control tokens (matched
// only with parse_special), the others user-defined (always matched), with
// their lstrip/rstrip flags. BOS comes from a TemplateProcessing post-processor.
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "model/tokenizer.h"

namespace kvasir {
namespace {

using json = nlohmann::json;

const char* kGpt2Re =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char* kLlama3Re =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* kQwen2Re =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// o200k (gpt-oss's tokenizer.json), split as the reference splits it (see
// model/pretokenize.h).
const char* kGpt4oRe =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") ? j["type"].get<std::string>() : "";
}

// Flattens a Sequence into its parts.
std::vector<json> parts(const json& j, const char* key) {
  if (j.is_null()) return {};
  if (type_of(j) == "Sequence") return j.at(key).get<std::vector<json>>();
  return {j};
}

// A SentencePiece-style normalizer: Replace " " with "▁" (Gemma's), with a
// Prepend "▁" before it (Llama 2's, Mistral's: `prepend` set), and nothing
// else.
bool is_spm_normalizer(const json& n, bool* prepend = nullptr) {
  bool pre = false, replace = false;
  for (const auto& p : parts(n, "normalizers")) {
    const std::string t = type_of(p);
    if (t == "Prepend" && p.value("prepend", "") == "\xE2\x96\x81")
      pre = true;
    else if (t == "Replace" && p.contains("pattern") && p["pattern"].value("String", "") == " " &&
             p.value("content", "") == "\xE2\x96\x81")
      replace = true;
    else
      return false;
  }
  if (prepend) *prepend = pre;
  return replace;
}

// Gemma's pre-tokenizer, Split on " " merged with the previous piece: after
// the normalizer has replaced every space it finds none, so it splits
// nothing.
bool is_noop_space_split(const json& p, const json& normalizer) {
  return type_of(p) == "Split" && p.contains("pattern") &&
         p["pattern"].value("String", "") == " " && !p.contains("Regex") &&
         is_spm_normalizer(normalizer);
}

// The family, from the pre-tokenizer (byte-level) or the normalizer (SPM).
void read_family(const json& j, const json& model, const std::string& path, TokenizerData& d) {
  const json pre = j.value("pre_tokenizer", json());
  bool byte_level = false, digits = false;
  std::string regex;
  for (const auto& p : parts(pre, "pretokenizers")) {
    const std::string t = type_of(p);
    if (t == "ByteLevel") {
      byte_level = true;
      KV_CHECK(!p.value("add_prefix_space", false),
               "{}: ByteLevel add_prefix_space is not supported", path);
      if (p.value("use_regex", true)) regex = kGpt2Re;
    } else if (t == "Digits") {
      KV_CHECK(p.value("individual_digits", false),
               "{}: Digits without individual_digits is not supported", path);
      digits = true;
    } else if (t == "Split") {
      regex = p.at("pattern").value("Regex", "");
    } else {
      KV_FAIL("{}: pre-tokenizer '{}' is not supported", path, t);
    }
  }
  if (byte_level) {
    d.model = TokenizerData::Model::kBpe;
    if (regex == kGpt2Re)
      d.pre = digits ? PreTokenizer::kSmolLm : PreTokenizer::kGpt2;
    else if (regex == kLlama3Re && !digits)
      d.pre = PreTokenizer::kLlama3;
    else if (regex == kQwen2Re && !digits)
      d.pre = PreTokenizer::kQwen2;
    else if (regex == kGpt4oRe && !digits)
      d.pre = PreTokenizer::kGpt4o;
    else
      KV_FAIL("{}: split pattern '{}' is not one of the supported families", path, regex);
  } else {
    const json norm = j.value("normalizer", json());
    const bool metaspace = type_of(pre) == "Metaspace";
    bool prepend = false;
    const bool spm_norm = is_spm_normalizer(norm, &prepend);
    KV_CHECK(pre.is_null() || metaspace || is_noop_space_split(pre, norm),
             "{}: pre-tokenizer '{}' is not supported", path, type_of(pre));
    KV_CHECK(spm_norm || metaspace, "{}: neither byte-level nor SentencePiece-style; not supported",
             path);
    d.model = TokenizerData::Model::kSpm;
    // A space before the text: Metaspace's unless its scheme says never, the
    // normalizer's Prepend (Gemma's has none).
    d.add_space_prefix = metaspace ? pre.value("prepend_scheme", "always") != "never" : prepend;
    d.byte_fallback = model.value("byte_fallback", false);
  }
}

// The vocabulary (ids must be dense), then the added tokens. Returns its size.
size_t read_vocab(const json& j, const json& model, const std::string& path, TokenizerData& d) {
  const json& vocab = model.at("vocab");
  size_t n = vocab.size();
  // An added token's id, range-checked before any use (a negative id read
  // as size_t would wrap and index far outside the vocabulary).
  auto added_id = [&](const json& a) -> size_t {
    const json& id = a.at("id");
    KV_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (1 << 24),
             "{}: added token id {} is invalid", path, id.dump());
    return size_t(id.get<int64_t>());
  };
  for (const auto& a : j.value("added_tokens", json::array()))
    n = std::max<size_t>(n, added_id(a) + 1);
  KV_CHECK(n > 0 && n < (1u << 24), "{}: vocabulary size {} is not usable", path, n);
  d.tokens.assign(n, "");
  d.attrs.assign(n, kAttrNormal);
  std::vector<bool> seen(n, false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    KV_CHECK(id >= 0 && size_t(id) < n && !seen[id],
             "{}: vocabulary id {} of '{}' is invalid or repeated", path, id, it.key());
    d.tokens[id] = it.key();
    seen[id] = true;
  }
  for (const auto& a : j.value("added_tokens", json::array())) {
    const size_t id = added_id(a);
    d.tokens[id] = a.at("content").get<std::string>();
    seen[id] = true;
    uint16_t attr = a.value("special", false) ? kAttrControl : kAttrUserDefined;
    if (a.value("lstrip", false)) attr |= kAttrLStrip;
    if (a.value("rstrip", false)) attr |= kAttrRStrip;
    d.attrs[id] = attr;
  }
  for (size_t i = 0; i < n; ++i) KV_CHECK(seen[i], "{}: no token has id {}", path, i);

  return n;
}

// The merges; for SentencePiece BPE, scores by merge rank instead, byte
// tokens and the unknown token.
void read_merges(const json& model, size_t n, TokenizerData& d) {
  for (const auto& m : model.at("merges")) {
    if (m.is_string())
      d.merges.push_back(m.get<std::string>());
    else
      d.merges.push_back(m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  }
  if (d.model == TokenizerData::Model::kSpm) {
    // SentencePiece BPE merges by score; a merge list gives the order, so
    // the token a merge produces scores by its rank.
    d.scores.assign(n, -1e9f);
    std::unordered_map<std::string, int32_t> ids;
    for (size_t i = 0; i < n; ++i) ids.emplace(d.tokens[i], int32_t(i));
    for (size_t r = 0; r < d.merges.size(); ++r) {
      const std::string& mg = d.merges[r];
      const size_t sp = mg.find(' ', 1);
      if (sp == std::string::npos) continue;
      auto it = ids.find(mg.substr(0, sp) + mg.substr(sp + 1));
      if (it != ids.end() && d.scores[it->second] == -1e9f) d.scores[it->second] = -float(r);
    }
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = d.tokens[i];
      if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>') d.attrs[i] = kAttrByte;
    }
    d.merges.clear();
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      auto it = ids.find(model["unk_token"].get<std::string>());
      if (it != ids.end()) d.unk = it->second, d.attrs[it->second] = kAttrUnknown;
    }
  }
}

// BOS/EOS: the post-processor's template, else well-known texts.
void read_bos_eos(const json& j, size_t n, TokenizerData& d) {
  const json post = j.value("post_processor", json());
  for (const auto& p : parts(post, "processors")) {
    if (type_of(p) != "TemplateProcessing") continue;
    const auto& single = p.at("single");
    if (!single.empty() && single.front().contains("SpecialToken")) {
      const std::string bos = single.front()["SpecialToken"].at("id").get<std::string>();
      for (size_t i = 0; i < n; ++i)
        if (d.tokens[i] == bos) d.bos = int32_t(i), d.add_bos = true;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = d.tokens[i];
    if (d.bos < 0 && (t == "<s>" || t == "<|begin_of_text|>")) d.bos = int32_t(i);
    if (d.eos < 0 && (t == "</s>" || t == "<|endoftext|>" || t == "<|end_of_text|>"))
      d.eos = int32_t(i);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KV_CHECK(in.good(), "cannot open tokenizer file '{}'", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    KV_FAIL("{}: not valid JSON ({})", path, e.what());
  }
  try {
    TokenizerData d;
    d.name = path;
    const json& model = j.at("model");
    KV_CHECK(type_of(model) == "BPE", "{}: model type '{}' is not supported (only BPE)", path,
             type_of(model));

    read_family(j, model, path, d);
    d.ignore_merges = model.value("ignore_merges", false);

    const size_t n = read_vocab(j, model, path, d);
    read_merges(model, n, d);
    read_bos_eos(j, n, d);
    return from_data(std::move(d));
  } catch (const json::exception& e) {
    KV_FAIL("{}: malformed tokenizer.json ({})", path, e.what());
  }
}

}  // namespace kvasir
