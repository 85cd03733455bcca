// model/pretokenize.h — split text into words before BPE, per model family.
//
// Each family's split pattern is a regex in its tokenizer.json; the
// reference (llama.cpp) implements those patterns as scanners over codepoint
// classes rather than running the regex, and we follow the scanners so that
// the words — and therefore the tokens — are identical:
//
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   smollm: first isolate every \p{N} codepoint, then the gpt2 pattern
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  as llama3 but \p{N} (one digit per word)
//   gpt-4o: [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*
//           [\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|...)?|
//           [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+
//           [\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?|
//           \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//           (o200k, gpt-oss). The reference does not run this pattern: it
//           runs a rewrite of it over text where every non-ASCII codepoint
//           is collapsed to its category group, so "upper" means A-Z or any
//           non-ASCII letter, "lower" means a-z or any non-ASCII letter, and
//           marks (\p{M}) do not join words. Our scanner implements the
//           rewrite, not the original (docs/tokenizer.md lists the texts
//           where the two split differently).
//
// The scanners reproduce the reference's quirks on purpose (for instance, in
// llama3/qwen2 a lone space before punctuation tests the class of the space,
// not of what follows it).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvasir {

enum class PreTokenizer { kGpt2, kSmolLm, kLlama3, kQwen2, kGpt4o };

// Maps a GGUF `tokenizer.ggml.pre` name to a splitter; throws kvasir::Error
// naming the unsupported name.
PreTokenizer pretokenizer_from_name(const std::string& name);
const char* pretokenizer_name(PreTokenizer p);

// Splits `cps` into words: appends [begin, end) codepoint ranges to `words`.
void pretokenize(PreTokenizer p, const std::vector<uint32_t>& cps,
                 std::vector<std::pair<uint32_t, uint32_t>>& words);

}  // namespace kvasir
