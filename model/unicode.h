// model/unicode.h — the Unicode facts the tokenizers need, and nothing more.
//
// Why not a regex engine: the pre-tokenizer patterns of the supported
// families (GPT-2/SmolLM2, Llama 3, Qwen2) use \p{L}, \p{N} and \s, and the
// reference (llama.cpp) runs them as hand-written scanners over codepoint
// classes. We do the same, with the classes taken from ICU (u_charType and
// the White_Space property), so that our splits match the reference exactly,
// including its edge cases.
//
// UTF-8 decoding here is deliberately *lenient*, like the reference: each
// byte that does not start a well-formed sequence becomes U+FFFD on its own;
// overlong forms and surrogates are accepted as the codepoint they spell.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::unicode {

// Category of a codepoint, one bit per general-category group (\p{N}, \p{L},
// ...) plus the White_Space property. Unassigned codepoints are kUndefined;
// codepoints beyond U+10FFFF also read as kUndefined.
enum CpFlags : uint16_t {
  kUndefined = 0x0001,
  kNumber = 0x0002,       // Nd Nl No
  kLetter = 0x0004,       // Lu Ll Lt Lm Lo
  kSeparator = 0x0008,    // Zs Zl Zp
  kMark = 0x0010,         // Mn Mc Me
  kPunctuation = 0x0020,  // Pc Pd Ps Pe Pi Pf Po
  kSymbol = 0x0040,       // Sm Sc Sk So
  kControl = 0x0080,      // Cc Cf Co Cs
  kWhitespace = 0x0100,   // White_Space property
};

// Flags of one codepoint (table lookup after a one-time build from ICU).
uint16_t flags(uint32_t cp);
inline bool is_letter(uint32_t cp) {
  return flags(cp) & kLetter;
}
inline bool is_number(uint32_t cp) {
  return flags(cp) & kNumber;
}
inline bool is_space(uint32_t cp) {
  return flags(cp) & kWhitespace;
}

// Simple (1:1) lowercase mapping.
uint32_t to_lower(uint32_t cp);

// Lenient decode (see above). Appends to `out`.
void decode_utf8(std::string_view text, std::vector<uint32_t>& out);
std::vector<uint32_t> decode_utf8(std::string_view text);

// Length of the sequence a lead byte announces (1 for ASCII and for stray
// continuation bytes), as the reference's BPE symbol splitter reads it.
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Length of the longest prefix of `bytes` that is complete, *strictly* valid
// UTF-8 up to an incomplete (but still possibly valid) trailing sequence.
// Sets `invalid_at` to the offset of the first invalid byte, or npos.
size_t utf8_complete_prefix(std::string_view bytes, size_t& invalid_at);

// GPT-2 byte-level alphabet: every byte maps to one printable codepoint, so
// arbitrary bytes become a string of vocabulary symbols.
const std::string& byte_to_symbol(uint8_t b);  // UTF-8 of the mapped codepoint
int byte_from_symbol(uint32_t cp);             // inverse, -1 if not in the alphabet

}  // namespace kvasir::unicode
