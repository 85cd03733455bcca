// tests/unit/grammar/grammar_test_util.h — what the grammar tests share: the
// tokenizers they run on, a seeded random walk through a grammar, and a small
// JSON Schema validator for the keywords the tests' schemas use.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "model/tokenizer.h"

namespace kvasir::grammar::testing {

// A tokenizer and its Vocabulary, loaded once per process.
struct TestVocab {
  std::string name;  // "smollm2", "tiny_llama3", ...
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const Vocabulary> vocab;
};

// The default model's tokenizer (models/SmolLM2-135M-Instruct.Q4_1.gguf), or
// nullptr when the model file is absent (the caller skips, saying so).
const TestVocab* default_vocab();
// The tiny tokenizers of tests/data/tokenizer/ (llama3 and qwen2 byte-level
// BPE, SentencePiece with byte fallback): always present.
const std::vector<const TestVocab*>& tiny_vocabs();
std::string model_path();

struct Walk {
  std::string text;          // the bytes of the accepted tokens, stop token excluded
  std::vector<int32_t> ids;  // every accepted id, stop token included
  bool terminated = false;   // a stop token was accepted
  std::string error;         // a mask/accept disagreement, "" if none
};

// Drives `m` from where it stands with a seeded RNG: at each step fills the
// mask and picks an allowed id (a stop token with probability 0.7 when one is
// allowed; else, half the time, one whose bytes hold JSON punctuation, which
// moves strings, numbers and containers towards their end; else any), until
// a stop token is accepted or `cap` tokens were taken. Every pick must be
// accepted, and a random id the mask forbids must be refused.
Walk random_walk(Matcher& m, const Vocabulary& v, uint64_t seed, size_t cap);

// KVASIR_GRAMMAR_WALKS=N multiplies the number of walks (a longer soak by
// hand); 1 without it.
int walk_scale();

// The allowed ids of a mask.
std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& mask, int32_t vocab_size);

// Validates `value` against `schema` for the keywords the tests use (type,
// properties, required, additionalProperties, items, prefixItems,
// minItems, maxItems, enum, const, minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, minLength, maxLength, pattern, anyOf, $ref to #/$defs/).
// strict: no property the schema does not name, as GrammarSpec::strict.
// Returns "" or the first violation ("/a/0: 12 > maximum 10"). Throws
// std::logic_error on any other keyword, so that no schema is half-checked.
std::string check_json(const nlohmann::json& schema, const nlohmann::json& value, bool strict);

}  // namespace kvasir::grammar::testing
