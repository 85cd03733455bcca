// model/tokenizer.h — text <-> token ids, loaded from the model file itself.
//
// Two model families:
//   - byte-level BPE (GGUF `tokenizer.ggml.model = gpt2`, HF "ByteLevel"):
//     GPT-2, SmolLM2, Llama 3, Qwen2. Text is split into words by the
//     family's pre-tokenizer (model/pretokenize.h), each word's bytes are
//     mapped to the GPT-2 byte alphabet and merged by rank.
//   - SentencePiece-style BPE (GGUF `llama`, HF "Metaspace" + byte fallback):
//     Llama 2, TinyLlama, Mistral. Spaces become U+2581, a space is
//     prefixed, pieces merge by score, unknown bytes fall back to <0xNN>.
//
// Behaviour follows llama.cpp on the same GGUF file (the reference the tests
// compare against, token for token): special and added tokens are cut out of
// the text first (longest first), then the rest is tokenized. Invalid UTF-8
// is not an error: each bad byte is tokenized as U+FFFD, exactly as the
// reference does (so such text does not round-trip; docs/tokenizer.md).
//
// Thread safety: a Tokenizer is immutable after loading; encode/decode may be
// called from any number of threads (the word cache is internally locked).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/pretokenize.h"

namespace kvasir {

class GgufFile;

// Token attributes (bit set), as llama.cpp derives them from token types.
enum TokenAttr : uint16_t {
  kAttrNormal = 1 << 0,
  kAttrUnknown = 1 << 1,
  kAttrControl = 1 << 2,      // <|im_start|>, </s>...: matched only with parse_special
  kAttrUserDefined = 1 << 3,  // added tokens: always matched, rendered as text
  kAttrUnused = 1 << 4,
  kAttrByte = 1 << 5,    // SentencePiece <0xNN>
  kAttrLStrip = 1 << 6,  // eat whitespace left of the token when matched
  kAttrRStrip = 1 << 7,
};

// Everything a tokenizer is made of, independent of the file it came from.
// Loaders fill it; Tokenizer::from_data validates and indexes it.
struct TokenizerData {
  enum class Model { kBpe, kSpm };
  Model model = Model::kBpe;
  PreTokenizer pre = PreTokenizer::kGpt2;
  std::vector<std::string> tokens;  // raw token text (byte-alphabet for BPE)
  std::vector<uint16_t> attrs;      // TokenAttr bits, one per token
  std::vector<float> scores;        // SPM merge priority (may be empty for BPE)
  std::vector<std::string> merges;  // BPE: "left right", rank = index
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  // More ids that end a generation (a Hugging Face folder's
  // generation_config.json eos_token_id list); out-of-range ones are dropped.
  std::vector<int32_t> eog_ids;
  bool add_bos = false, add_eos = false;
  bool ignore_merges = false;     // llama3: a word that is a token is taken whole
  bool add_space_prefix = false;  // SPM: prepend ' ' to each text fragment
  bool byte_fallback = true;      // SPM: unknown bytes -> <0xNN>
  std::string name;               // for messages ("SmolLM2-135M-Instruct")
};

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile&);  // throws kvasir::Error
  static std::unique_ptr<Tokenizer> from_hf_json(const std::string& path);
  static std::unique_ptr<Tokenizer> from_data(TokenizerData data);
  ~Tokenizer();

  // add_special: prepend BOS (append EOS) if the model says so;
  // parse_special: match control tokens in text (added/user-defined tokens
  // are always matched, as in the reference).
  std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const;
  // Concatenated pieces; skip_special drops control/unknown tokens. Throws
  // kvasir::Error on an id out of range.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // The bytes one token stands for (specials rendered). Throws on a bad id.
  std::string token_text(int32_t id) const;
  // The piece decode() would produce for one token.
  const std::string& piece(int32_t id, bool skip_special = false) const;

  int32_t vocab_size() const { return int32_t(d_.tokens.size()); }
  int32_t bos_id() const { return d_.bos; }
  int32_t eos_id() const { return d_.eos; }
  bool add_bos() const { return d_.add_bos; }
  bool is_eog(int32_t id) const;                    // eos, eot, eom, <|im_end|>, <|eot_id|> ...
  bool is_special(int32_t id) const;                // control or unknown
  int32_t find_token(std::string_view text) const;  // exact raw token text, or -1
  const TokenizerData& data() const { return d_; }
  // Whether decoding a sequence should drop one leading space (SentencePiece
  // families add one when encoding).
  bool strips_leading_space() const {
    return d_.model == TokenizerData::Model::kSpm && d_.add_space_prefix;
  }

 private:
  struct Impl;
  explicit Tokenizer(TokenizerData data);
  void encode_text(std::string_view text, std::vector<int32_t>& out, bool prev_special) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;

  TokenizerData d_;
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer for streaming: push ids one at a time, get the
// text that is now complete. A multi-byte UTF-8 character split across
// tokens is held until its last byte arrives; bytes that can never become
// valid UTF-8 are emitted as U+FFFD, so the output is always valid UTF-8.
class StreamDecoder {
 public:
  // skip_special: drop control tokens (EOS...) from the text, as OpenAI-style
  // servers do. at_start: this stream begins a sequence (no prompt before
  // it); then the leading space SentencePiece adds is dropped once.
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true, bool at_start = false);
  std::string push(int32_t id);  // bytes now complete (throws on a bad id)
  std::string flush();           // the rest; an incomplete tail becomes U+FFFD

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool strip_space_;
  std::string pending_;
};

}  // namespace kvasir
