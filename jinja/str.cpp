// jinja/str.cpp — strings with data ranges; UTF-8 helpers.
#include "jinja/str.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cstring>

namespace kvasir::jinja {

Str::Str(std::string bytes, bool data) : bytes_(std::move(bytes)) {
  if (data) mark(0, bytes_.size());
}

void Str::mark(size_t b, size_t e) {
  if (b >= e) return;
  if (!data_.empty() && data_.back().end >= b) {
    data_.back().end = std::max(data_.back().end, e);
    return;
  }
  data_.push_back({b, e});
}

bool Str::data_in(size_t b, size_t e) const {
  if (b >= e) return false;
  // First range ending after b.
  auto it = std::upper_bound(data_.begin(), data_.end(), b,
                             [](size_t pos, const ByteRange& r) { return pos < r.end; });
  return it != data_.end() && it->begin < e;
}

void Str::append(const Str& s) {
  const size_t base = bytes_.size();
  bytes_ += s.bytes_;
  for (const ByteRange& r : s.data_) mark(base + r.begin, base + r.end);
}

void Str::append(std::string_view s, bool data) {
  const size_t base = bytes_.size();
  bytes_.append(s);
  if (data) mark(base, bytes_.size());
}

Str Str::substr(size_t b, size_t e) const {
  e = std::min(e, bytes_.size());
  Str out;
  if (b >= e) return out;
  out.bytes_ = bytes_.substr(b, e - b);
  for (const ByteRange& r : data_) {
    if (r.end <= b) continue;
    if (r.begin >= e) break;
    out.mark(std::max(r.begin, b) - b, std::min(r.end, e) - b);
  }
  return out;
}

size_t utf8_next(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  return std::min(s.size(), i + n);
}

uint32_t utf8_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = utf8_next(s, i) - i;
  if (n == 1) return c;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i = utf8_next(s, i)) out.push_back(i);
  out.push_back(s.size());
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i = utf8_next(s, i)) ++n;
  return n;
}

bool utf8_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII runs eight bytes at a time.
    uint64_t w;
    if (i + 8 <= s.size() && (std::memcpy(&w, s.data() + i, 8), (w & 0x8080808080808080ull) == 0)) {
      i += 8;
      continue;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t min;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 6) {
      n = 2, min = 0x80;
    } else if ((c >> 4) == 14) {
      n = 3, min = 0x800;
    } else if ((c >> 3) == 30) {
      n = 4, min = 0x10000;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    const uint32_t cp = utf8_at(s, i);
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

bool is_python_space(uint32_t cp) {
  if (cp >= 0x110000) return false;
  if (cp >= 0x1C && cp <= 0x1F) return true;
  const auto dir = u_charDirection(UChar32(cp));
  return dir == U_WHITE_SPACE_NEUTRAL || dir == U_BLOCK_SEPARATOR || dir == U_SEGMENT_SEPARATOR ||
         u_charType(UChar32(cp)) == U_SPACE_SEPARATOR;
}

}  // namespace kvasir::jinja
