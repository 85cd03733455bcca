// model/unicode.cpp — codepoint classes from ICU, lenient UTF-8, GPT-2 bytes.
#include "model/unicode.h"

#include <unicode/uchar.h>

#include <array>
#include <memory>

#include "base/utf8.h"

namespace kvasir::unicode {
namespace {

constexpr uint32_t kMaxCp = 0x110000;

uint16_t category_flags(uint32_t cp) {
  switch (u_charType(UChar32(cp))) {
    case U_UNASSIGNED:
      return kUndefined;
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      return kMark;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return kSeparator;
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return kControl;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return kPunctuation;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
      return kSymbol;
    default:
      return kUndefined;
  }
}

// One table for the whole codespace (2.2 MB), built once: the splitters ask
// for every codepoint of every input, so a lookup must be an array index.
const std::vector<uint16_t>& table() {
  static const std::vector<uint16_t> t = [] {
    std::vector<uint16_t> v(kMaxCp);
    for (uint32_t cp = 0; cp < kMaxCp; ++cp) {
      uint16_t f = category_flags(cp);
      if (u_isUWhiteSpace(UChar32(cp))) f |= kWhitespace;
      v[cp] = f;
    }
    // Unicode 15.1 additions, for ICU builds older than that (Debian 12 has
    // ICU 72 = Unicode 15.0) so classes match the reference's 15.1 tables:
    // CJK Extension I (letters) and the new ideographic description characters.
    for (uint32_t cp = 0x2EBF0; cp <= 0x2EE5D; ++cp) v[cp] = kLetter;
    for (uint32_t cp : {0x2FFCu, 0x2FFDu, 0x2FFEu, 0x2FFFu, 0x31EFu}) v[cp] = kSymbol;
    return v;
  }();
  return t;
}

struct ByteMaps {
  std::array<std::string, 256> to_symbol;
  std::array<int16_t, 512> from_cp;  // the alphabet lives below U+0200
};

const ByteMaps& byte_maps() {
  static const ByteMaps m = [] {
    ByteMaps bm;
    bm.from_cp.fill(-1);
    std::array<int, 256> cp_of{};
    std::array<bool, 256> kept{};
    // Printable Latin-1 bytes map to themselves; the rest are shifted to
    // U+0100.. in byte order (GPT-2's bytes_to_unicode).
    for (int b = 0; b < 256; ++b)
      kept[b] = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int n = 0;
    for (int b = 0; b < 256; ++b) cp_of[b] = kept[b] ? b : 256 + n++;
    for (int b = 0; b < 256; ++b) {
      append_utf8(bm.to_symbol[b], uint32_t(cp_of[b]));
      bm.from_cp[cp_of[b]] = int16_t(b);
    }
    return bm;
  }();
  return m;
}

}  // namespace

uint16_t flags(uint32_t cp) {
  if (cp >= kMaxCp) return kUndefined;
  return table()[cp];
}

uint32_t to_lower(uint32_t cp) {
  if (cp >= kMaxCp) return cp;
  return uint32_t(u_tolower(UChar32(cp)));
}

void decode_utf8(std::string_view s, std::vector<uint32_t>& out) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  out.reserve(out.size() + n);
  auto cont = [&](size_t i) { return i < n && (p[i] & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      out.push_back(c);
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && (c & 0x40) && cont(i + 1)) {
      out.push_back(((c & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu));
      i += 2;
    } else if ((c & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      out.push_back(((c & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu));
      i += 3;
    } else if ((c & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      out.push_back(((c & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) |
                    (p[i + 3] & 0x3Fu));
      i += 4;
    } else {
      out.push_back(0xFFFD);  // one replacement per offending byte, as the reference
      i += 1;
    }
  }
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  decode_utf8(s, out);
  return out;
}

size_t utf8_complete_prefix(std::string_view bytes, size_t& invalid_at) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  invalid_at = std::string_view::npos;
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      invalid_at = i;
      return i;
    }
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= n) return i;  // incomplete: wait for more bytes
      const uint8_t b = p[i + k];
      const bool ok = k == 1 ? (b >= lo && b <= hi) : (b & 0xC0) == 0x80;
      if (!ok) {
        invalid_at = i;
        return i;
      }
    }
    i += len;
  }
  return n;
}

const std::string& byte_to_symbol(uint8_t b) {
  return byte_maps().to_symbol[b];
}

int byte_from_symbol(uint32_t cp) {
  return cp < 512 ? byte_maps().from_cp[cp] : -1;
}

}  // namespace kvasir::unicode
