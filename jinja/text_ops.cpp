// jinja/text_ops.cpp — case mapping, strip, split, replace, find.
#include "jinja/text_ops.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "jinja/interpreter.h"

namespace kvasir::jinja {
namespace {

// Python's str.isspace() for the character at byte i (ASCII without ICU).
bool is_space(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F);
  return is_python_space(utf8_at(s, i));
}

// The start of the character before byte i (> 0).
size_t prev_char(std::string_view s, size_t i) {
  do {
    --i;
  } while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return i;
}

enum class Case { kUpper, kLower, kTitleChar };

std::string map_case(std::string_view s, Case c) {
  icu::UnicodeString u =
      icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), int32_t(s.size())));
  switch (c) {
    case Case::kUpper:
      u.toUpper(icu::Locale::getRoot());
      break;
    case Case::kLower:
      u.toLower(icu::Locale::getRoot());
      break;
    case Case::kTitleChar: {  // one codepoint: its simple titlecase mapping
      icu::UnicodeString t;
      t.append(u_totitle(u.char32At(0)));
      u = t;
      break;
    }
  }
  std::string out;
  u.toUTF8String(out);
  return out;
}

// Appends f(bytes) for s[b, e), run by run of equal data-ness.
void append_mapped(Str& out, const Str& s, size_t b, size_t e, Case c) {
  size_t i = b;
  while (i < e) {
    const bool data = s.data_in(i, i + 1);
    size_t j = i;
    while (j < e && s.data_in(j, j + 1) == data) ++j;
    out.append(map_case(std::string_view(s.bytes()).substr(i, j - i), c), data);
    i = j;
  }
}

bool in_chars(const std::optional<std::string>& chars, std::string_view s, size_t i) {
  if (!chars) return is_space(s, i);
  const std::string_view cp = s.substr(i, utf8_next(s, i) - i);
  for (size_t k = 0; k < chars->size(); k = utf8_next(*chars, k))
    if (std::string_view(*chars).substr(k, utf8_next(*chars, k) - k) == cp) return true;
  return false;
}

// Whitespace split, left to right or right to left, at most maxsplit cuts.
std::vector<Str> split_ws(const Str& s, int64_t maxsplit, bool from_right) {
  const std::string& b = s.bytes();
  const std::vector<size_t> cps = utf8_offsets(b);
  const size_t n = cps.size() - 1;
  std::vector<std::pair<size_t, size_t>> parts;  // codepoint index ranges
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && is_space(b, cps[i])) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
        parts.emplace_back(i, n);  // the rest, trailing whitespace kept
        break;
      }
      size_t j = i;
      while (j < n && !is_space(b, cps[j])) ++j;
      parts.emplace_back(i, j);
      i = j;
    }
  } else {
    size_t i = n;
    while (true) {
      while (i > 0 && is_space(b, cps[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
        parts.emplace_back(0, i);
        break;
      }
      size_t j = i;
      while (j > 0 && !is_space(b, cps[j - 1])) --j;
      parts.emplace_back(j, i);
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<Str> out;
  for (auto [x, y] : parts) out.push_back(s.substr(cps[x], cps[y]));
  return out;
}

}  // namespace

Str py_upper(const Str& s) {
  Str out;
  append_mapped(out, s, 0, s.size(), Case::kUpper);
  return out;
}

Str py_lower(const Str& s) {
  Str out;
  append_mapped(out, s, 0, s.size(), Case::kLower);
  return out;
}

Str py_capitalize(const Str& s) {
  Str out;
  if (s.empty()) return out;
  const size_t first = utf8_next(s.bytes(), 0);
  append_mapped(out, s, 0, first, Case::kTitleChar);
  append_mapped(out, s, first, s.size(), Case::kLower);
  return out;
}

// Python: a cased character after a cased one is lowered, any other is
// titled.
Str py_title(const Str& s) {
  Str out;
  const std::string& b = s.bytes();
  size_t i = 0;
  while (i < b.size()) {
    const size_t next = utf8_next(b, i);
    append_mapped(out, s, i, next, Case::kTitleChar);
    size_t j = next;
    bool prev_cased = u_hasBinaryProperty(UChar32(utf8_at(b, i)), UCHAR_CASED);
    while (j < b.size() && prev_cased) {
      prev_cased = u_hasBinaryProperty(UChar32(utf8_at(b, j)), UCHAR_CASED);
      j = utf8_next(b, j);
    }
    append_mapped(out, s, next, j, Case::kLower);
    i = j;
  }
  return out;
}

// jinja2: split on runs of [-\s({\[<]; each piece: first character upper,
// the rest lower.
Str jinja_title(const Str& s) {
  const std::string& b = s.bytes();
  auto is_sep = [&](size_t i) {
    const char c = b[i];
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(b, i);
  };
  Str out;
  size_t i = 0;
  while (i < b.size()) {
    size_t j = i;
    const bool sep = is_sep(i);
    while (j < b.size() && is_sep(j) == sep) j = utf8_next(b, j);
    const size_t first = utf8_next(b, i);
    append_mapped(out, s, i, first, Case::kUpper);
    append_mapped(out, s, first, j, Case::kLower);
    i = j;
  }
  return out;
}

Str py_strip(const Str& s, Side side, const std::optional<std::string>& chars) {
  const std::string& b = s.bytes();
  size_t begin = 0, end = b.size();
  if (side != Side::kRight)
    while (begin < end && in_chars(chars, b, begin)) begin = utf8_next(b, begin);
  if (side != Side::kLeft)
    while (end > begin && in_chars(chars, b, prev_char(b, end))) end = prev_char(b, end);
  return s.substr(begin, end);
}

std::vector<Str> py_split(Interpreter& in, const Str& s, const std::optional<std::string>& sep,
                          int64_t maxsplit, bool from_right) {
  if (!sep) return split_ws(s, maxsplit, from_right);
  if (sep->empty()) in.fail("empty separator");
  const std::string& b = s.bytes();
  std::vector<Str> out;
  if (!from_right) {
    size_t i = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      const size_t p = b.find(*sep, i);
      if (p == std::string::npos) break;
      out.push_back(s.substr(i, p));
      i = p + sep->size();
    }
    out.push_back(s.substr(i, b.size()));
    return out;
  }
  size_t end = b.size();
  while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t p = b.rfind(*sep, end - sep->size());
    if (p == std::string::npos) break;
    out.push_back(s.substr(p + sep->size(), end));
    end = p;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<Str> py_splitlines(const Str& s, bool keepends) {
  const std::string& b = s.bytes();
  std::vector<Str> out;
  size_t start = 0, i = 0;
  while (i < b.size()) {
    const uint32_t cp = utf8_at(b, i);
    size_t next = utf8_next(b, i);
    const bool nl = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                    cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!nl) {
      i = next;
      continue;
    }
    if (cp == '\r' && next < b.size() && b[next] == '\n') ++next;
    out.push_back(s.substr(start, keepends ? next : i));
    start = i = next;
  }
  if (start < b.size()) out.push_back(s.substr(start, b.size()));
  return out;
}

Str py_replace(Interpreter& in, const Str& s, const Str& old, const Str& repl, int64_t count) {
  const std::string& b = s.bytes();
  const std::string& o = old.bytes();
  Str out;
  auto put_repl = [&](size_t at, size_t len) {
    in.check_size(out.size() + repl.size());
    if (repl.has_data() || !s.data_in(at, at + len))
      out.append(repl);
    else
      out.append(repl.bytes(), true);  // replacing data: the result stays data
  };
  int64_t done = 0;
  if (o.empty()) {  // Python inserts repl before every character and at the end
    const Str r = repl.has_data() || !s.has_data() ? repl : Str(repl.bytes(), true);
    for (size_t i = 0;; i = utf8_next(b, i)) {
      if (count < 0 || done < count) {
        in.check_size(out.size() + r.size());
        out.append(r);
        ++done;
      }
      if (i >= b.size()) break;
      out.append(s.substr(i, utf8_next(b, i)));
    }
    return out;
  }
  size_t i = 0;
  while (count < 0 || done < count) {
    const size_t p = b.find(o, i);
    if (p == std::string::npos) break;
    out.append(s.substr(i, p));
    put_repl(p, o.size());
    i = p + o.size();
    ++done;
  }
  out.append(s.substr(i, b.size()));
  in.check_size(out.size());
  in.step(out.size() / 256);
  return out;
}

int64_t py_find(const Str& s, const std::string& sub, bool from_right) {
  const size_t p = from_right ? s.bytes().rfind(sub) : s.bytes().find(sub);
  if (p == std::string::npos) return -1;
  return int64_t(utf8_length(std::string_view(s.bytes()).substr(0, p)));
}

int64_t py_count(const Str& s, const std::string& sub) {
  const std::string& b = s.bytes();
  if (sub.empty()) return int64_t(utf8_length(b)) + 1;
  int64_t n = 0;
  for (size_t p = b.find(sub); p != std::string::npos; p = b.find(sub, p + sub.size())) ++n;
  return n;
}

}  // namespace kvasir::jinja
