// jinja/str.h — a template string: UTF-8 bytes plus the byte ranges
// that came from user data.
//
// Every string a template handles knows which of its bytes came from the
// conversation (message text, tool arguments and results, tool specs) and
// which from the template itself. Operations keep that knowledge: a
// concatenation keeps each side's ranges, a slice keeps the ranges inside
// it, a replacement made inside data stays data. The rendered prompt is then
// a list of runs, markup or data (see Segment in jinja.h), and the tokenizer
// can refuse to read control tokens out of the data runs.
//
// The rule is "sticky data": bytes derived from data are data, whatever the
// template did to them; only text the template wrote itself is markup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::jinja {

struct ByteRange {
  size_t begin = 0, end = 0;  // [begin, end)
};

class Str {
 public:
  Str() = default;
  Str(std::string bytes, bool data);
  static Str markup(std::string s) { return Str(std::move(s), false); }
  static Str data(std::string s) { return Str(std::move(s), true); }

  const std::string& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }
  // Sorted, disjoint and non-adjacent ranges of data bytes.
  const std::vector<ByteRange>& data_ranges() const { return data_; }
  bool has_data() const { return !data_.empty(); }
  // Whether any byte of [b, e) is data.
  bool data_in(size_t b, size_t e) const;

  void append(const Str& s);
  void append(std::string_view s, bool data);
  // Bytes [b, e) with their ranges.
  Str substr(size_t b, size_t e) const;

  friend bool operator==(const Str& a, const Str& b) { return a.bytes_ == b.bytes_; }

 private:
  void mark(size_t b, size_t e);
  std::string bytes_;
  std::vector<ByteRange> data_;
};

// UTF-8 helpers (templates and conversations are valid UTF-8: both are
// checked on entry).
// Offset of the codepoint after the one starting at byte i.
size_t utf8_next(std::string_view s, size_t i);
// Decodes the codepoint starting at byte i.
uint32_t utf8_at(std::string_view s, size_t i);
// Byte offsets of every codepoint start, plus s.size() at the end.
std::vector<size_t> utf8_offsets(std::string_view s);
size_t utf8_length(std::string_view s);
bool utf8_valid(std::string_view s);
// Python's str.isspace() for one codepoint (what .strip(), |trim and jinja2's
// whitespace control treat as space): ICU's bidi whitespace classes plus the
// separators U+001C..U+001F.
bool is_python_space(uint32_t cp);

}  // namespace kvasir::jinja
