// model/tokenizer_gguf.cpp — a Tokenizer from `tokenizer.ggml.*` metadata.
//
// Defaults follow the reference loader (llama.cpp): BPE models add no BOS
// unless the file or the pre-tokenizer says so (llama3: yes); SentencePiece
// models add BOS and a space prefix. Special ids out of range are disabled,
// not trusted. Token types map to attributes as the reference maps them.
#include "base/check.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace kvasir {
namespace {

std::string get_str(const GgufFile& f, const std::string& key, const std::string& def = "") {
  const GgufValue* v = f.find(key);
  return v ? std::string(v->as_string(key)) : def;
}

uint16_t attr_from_type(int64_t t) {
  switch (t) {
    case 1:
      return kAttrNormal;
    case 2:
      return kAttrUnknown;
    case 3:
      return kAttrControl;
    case 4:
      return kAttrUserDefined;
    case 5:
      return kAttrUnused;
    case 6:
      return kAttrByte;
    default:
      return 0;  // undefined
  }
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) {
  TokenizerData d;
  d.name = get_str(f, "general.name", f.path());
  const std::string model = get_str(f, "tokenizer.ggml.model");
  const std::string pre = get_str(f, "tokenizer.ggml.pre");
  KV_CHECK(!model.empty(), "{}: no tokenizer in the file (tokenizer.ggml.model is missing)",
           f.path());

  if (model == "gpt2") {
    d.model = TokenizerData::Model::kBpe;
    d.pre = pretokenizer_from_name(pre);
    d.ignore_merges = d.pre == PreTokenizer::kLlama3;
    d.add_bos = d.pre == PreTokenizer::kLlama3;
    d.bos = d.eos = 11;  // the reference's defaults, kept only if in range
  } else if (model == "llama") {
    d.model = TokenizerData::Model::kSpm;
    d.add_bos = true;
    d.add_space_prefix = true;
    d.bos = 1, d.eos = 2, d.unk = 0;
  } else {
    KV_FAIL("{}: tokenizer model '{}' is not supported (supported: gpt2, llama)", f.path(), model);
  }

  const std::string kTokens = "tokenizer.ggml.tokens";
  const GgufArray& toks = f.get(kTokens).as_array(kTokens);
  KV_CHECK(toks.elem == GgufType::STRING, "{}: {} is not an array of strings", f.path(), kTokens);
  KV_CHECK(toks.strings.size() == toks.count, "{}: {} is incomplete", f.path(), kTokens);
  d.tokens.reserve(toks.count);
  // The reference reads token strings as C strings: a token stops at its
  // first NUL byte (and an empty one becomes "[EMPTY_i]" in from_data).
  for (auto s : toks.strings) d.tokens.emplace_back(s.substr(0, s.find('\0')));
  const size_t n = d.tokens.size();

  d.attrs.assign(n, kAttrNormal);
  const std::string kTypes = "tokenizer.ggml.token_type";
  if (const GgufValue* v = f.find(kTypes)) {
    const GgufArray& a = v->as_array(kTypes);
    KV_CHECK(a.count >= n, "{}: {} has {} entries for {} tokens", f.path(), kTypes, a.count, n);
    for (size_t i = 0; i < n; ++i) d.attrs[i] = attr_from_type(a.int_at(i, kTypes));
  }
  const std::string kScores = "tokenizer.ggml.scores";
  if (const GgufValue* v = f.find(kScores)) {
    const GgufArray& a = v->as_array(kScores);
    KV_CHECK(a.count >= n, "{}: {} has {} entries for {} tokens", f.path(), kScores, a.count, n);
    d.scores.resize(n);
    for (size_t i = 0; i < n; ++i) d.scores[i] = float(a.float_at(i, kScores));
  }
  const std::string kMerges = "tokenizer.ggml.merges";
  if (d.model == TokenizerData::Model::kBpe) {
    const GgufArray& a = f.get(kMerges).as_array(kMerges);
    KV_CHECK(a.elem == GgufType::STRING && a.strings.size() == a.count,
             "{}: {} is not an array of strings", f.path(), kMerges);
    d.merges.reserve(a.count);
    for (auto s : a.strings) d.merges.emplace_back(s);
  }

  auto read_id = [&](const char* key, int32_t& id) {
    if (const GgufValue* v = f.find(key)) {
      const uint64_t u = v->as_uint(key);
      if (u < n) id = int32_t(u);  // out of range: keep the default, as the reference
    }
  };
  read_id("tokenizer.ggml.bos_token_id", d.bos);
  read_id("tokenizer.ggml.eos_token_id", d.eos);
  read_id("tokenizer.ggml.eot_token_id", d.eot);
  read_id("tokenizer.ggml.eom_token_id", d.eom);
  read_id("tokenizer.ggml.unknown_token_id", d.unk);
  read_id("tokenizer.ggml.padding_token_id", d.pad);
  if (const GgufValue* v = f.find("tokenizer.ggml.add_bos_token"))
    d.add_bos = v->as_bool("add_bos_token");
  if (const GgufValue* v = f.find("tokenizer.ggml.add_eos_token"))
    d.add_eos = v->as_bool("add_eos_token");
  if (const GgufValue* v = f.find("tokenizer.ggml.add_space_prefix"))
    d.add_space_prefix = v->as_bool("add_space_prefix");
  return from_data(std::move(d));
}

}  // namespace kvasir
