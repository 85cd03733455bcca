// jinja/lexer.cpp — jinja2's lexer rules, for the default delimiters.
#include "jinja/lexer.h"

#include <cerrno>
#include <cstdlib>

#include "base/check.h"
#include "base/utf8.h"
#include "jinja/str.h"

namespace kvasir::jinja {
namespace {

// Python's whitespace (str.isspace / re's \s on str).
bool ws_at(std::string_view s, size_t i) {
  return is_python_space(utf8_at(s, i));
}

std::string rstrip_ws(std::string_view s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size(); i = utf8_next(s, i))
    if (!ws_at(s, i)) end = utf8_next(s, i);
  return std::string(s.substr(0, end));
}

bool all_ws(std::string_view s) {
  for (size_t i = 0; i < s.size(); i = utf8_next(s, i))
    if (!ws_at(s, i)) return false;
  return true;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// \r\n and \r become \n; one trailing newline is dropped.
std::string normalize(std::string_view src) {
  std::string s;
  s.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      s += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      s += src[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : s_(normalize(src)) {}
  std::vector<Token> run();

 private:
  [[noreturn]] void fail(const std::string& msg) {
    KV_FAIL_CODE(ErrorCode::kModelFormat, "chat template, line {}: {}", line_at(pos_), msg);
  }
  int line_at(size_t off) {
    for (; line_pos_ < off && line_pos_ < s_.size(); ++line_pos_)
      if (s_[line_pos_] == '\n') ++line_;
    return line_;
  }
  void emit(TokKind k, std::string text = {}, size_t at = std::string::npos) {
    Token t;
    t.kind = k;
    t.text = std::move(text);
    t.line = line_at(at == std::string::npos ? pos_ : at);
    out_.push_back(std::move(t));
  }
  void text(std::string_view t, char sign, bool lstrip, size_t at);
  size_t raw_begin(size_t open) const;
  void raw_body();
  void comment();
  void tag(bool block);
  bool tag_end(bool block);
  void token();
  size_t digits(size_t p) const;  // end of \d+(_\d+)* at p, or p
  bool number();
  void string_literal();
  void escape(std::string& v, size_t& p);

  std::string s_;
  size_t pos_ = 0, line_pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<std::string> brackets_;
  std::vector<Token> out_;
};

// Template text before a tag, with the tag's whitespace control applied.
void Lexer::text(std::string_view t, char sign, bool lstrip, size_t at) {
  std::string s(t);
  if (sign == '-') {
    s = rstrip_ws(s);
  } else if (sign != '+' && lstrip) {
    const size_t l_pos = s.rfind('\n') + 1;  // npos + 1 == 0
    if ((l_pos > 0 || line_starting_) && l_pos < s.size() &&
        all_ws(std::string_view(s).substr(l_pos)))
      s.resize(l_pos);
  }
  if (!s.empty()) emit(TokKind::kText, std::move(s), at);
}

std::vector<Token> Lexer::run() {
  const size_t n = s_.size();
  while (pos_ < n) {
    size_t open = pos_;
    while ((open = s_.find('{', open)) != std::string::npos) {
      if (open + 1 < n && (s_[open + 1] == '{' || s_[open + 1] == '%' || s_[open + 1] == '#'))
        break;
      ++open;
    }
    if (open == std::string::npos) {
      emit(TokKind::kText, s_.substr(pos_));
      pos_ = n;
      break;
    }
    const char type = s_[open + 1];
    const char sign =
        open + 2 < n && (s_[open + 2] == '-' || s_[open + 2] == '+') ? s_[open + 2] : 0;
    const size_t text_at = pos_;
    const std::string_view before = std::string_view(s_).substr(pos_, open - pos_);
    if (type == '%') {
      if (const size_t end = raw_begin(open); end != std::string::npos) {
        text(before, sign, true, text_at);
        line_starting_ = s_[end - 1] == '\n';
        pos_ = end;
        raw_body();
        continue;
      }
    }
    text(before, sign, type != '{', text_at);
    pos_ = open + 2 + (sign ? 1 : 0);
    if (type == '#') {
      comment();
    } else {
      emit(type == '%' ? TokKind::kBlockBegin : TokKind::kVarBegin, {}, open);
      tag(type == '%');
    }
  }
  emit(TokKind::kEof);
  return std::move(out_);
}

// The end of {%[-+]? raw -?%} at `open`, or npos.
size_t Lexer::raw_begin(size_t open) const {
  size_t p = open + 2;
  if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
  while (p < s_.size() && ws_at(s_, p)) p = utf8_next(s_, p);
  if (s_.compare(p, 3, "raw") != 0) return std::string::npos;
  p += 3;
  while (p < s_.size() && ws_at(s_, p)) p = utf8_next(s_, p);
  if (s_.compare(p, 3, "-%}") == 0) {
    p += 3;
    while (p < s_.size() && ws_at(s_, p)) p = utf8_next(s_, p);
    return p;
  }
  return s_.compare(p, 2, "%}") == 0 ? p + 2 : std::string::npos;
}

// Text up to {% endraw %}, taken literally.
void Lexer::raw_body() {
  size_t p = pos_;
  while ((p = s_.find("{%", p)) != std::string::npos) {
    size_t q = p + 2;
    const char sign = q < s_.size() && (s_[q] == '-' || s_[q] == '+') ? s_[q] : 0;
    if (sign) ++q;
    while (q < s_.size() && ws_at(s_, q)) q = utf8_next(s_, q);
    if (s_.compare(q, 6, "endraw") != 0) {
      p += 2;
      continue;
    }
    q += 6;
    while (q < s_.size() && ws_at(s_, q)) q = utf8_next(s_, q);
    size_t end;
    if (s_.compare(q, 3, "+%}") == 0) {
      end = q + 3;
    } else if (s_.compare(q, 3, "-%}") == 0) {
      end = q + 3;
      while (end < s_.size() && ws_at(s_, end)) end = utf8_next(s_, end);
    } else if (s_.compare(q, 2, "%}") == 0) {
      end = q + 2;
      if (end < s_.size() && s_[end] == '\n') ++end;
    } else {
      p += 2;
      continue;
    }
    text(std::string_view(s_).substr(pos_, p - pos_), sign, true, pos_);
    line_starting_ = s_[end - 1] == '\n';
    pos_ = end;
    return;
  }
  fail("missing {% endraw %}");
}

void Lexer::comment() {
  const size_t q = s_.find("#}", pos_);
  if (q == std::string::npos) fail("missing end of comment tag");
  const char sign = q > pos_ && (s_[q - 1] == '-' || s_[q - 1] == '+') ? s_[q - 1] : 0;
  size_t end = q + 2;
  if (sign == '-') {
    while (end < s_.size() && ws_at(s_, end)) end = utf8_next(s_, end);
  } else if (!sign && end < s_.size() && s_[end] == '\n') {
    ++end;
  }
  line_starting_ = s_[end - 1] == '\n';
  pos_ = end;
}

// At pos_: the end of a block (%}) or variable (}}) tag; consumes it.
bool Lexer::tag_end(bool block) {
  const char* close = block ? "%}" : "}}";
  size_t end;
  if (block && s_.compare(pos_, 3, "+%}") == 0) {
    end = pos_ + 3;
  } else if (s_.compare(pos_, 1, "-") == 0 && s_.compare(pos_ + 1, 2, close) == 0) {
    end = pos_ + 3;
    while (end < s_.size() && ws_at(s_, end)) end = utf8_next(s_, end);
  } else if (s_.compare(pos_, 2, close) == 0) {
    end = pos_ + 2;
    if (block && end < s_.size() && s_[end] == '\n') ++end;
  } else {
    return false;
  }
  emit(block ? TokKind::kBlockEnd : TokKind::kVarEnd);
  line_starting_ = s_[end - 1] == '\n';
  pos_ = end;
  return true;
}

void Lexer::tag(bool block) {
  while (true) {
    if (pos_ >= s_.size()) fail("unexpected end of template inside a tag");
    if (brackets_.empty() && tag_end(block)) return;
    if (ws_at(s_, pos_)) {
      pos_ = utf8_next(s_, pos_);
      continue;
    }
    token();
  }
}

size_t Lexer::digits(size_t p) const {
  size_t q = p;
  while (q < s_.size() && is_digit(s_[q])) {
    ++q;
    if (q + 1 < s_.size() && s_[q] == '_' && is_digit(s_[q + 1])) ++q;
  }
  return q;
}

bool Lexer::number() {
  const size_t start = pos_;
  if (!is_digit(s_[start])) return false;
  // Float: digits ('.' digits)? exponent | digits '.' digits; never right after a '.'.
  if (start == 0 || s_[start - 1] != '.') {
    size_t p = digits(start), frac = p;
    if (p + 1 < s_.size() && s_[p] == '.' && is_digit(s_[p + 1])) frac = digits(p + 1);
    size_t exp = frac;
    if (exp < s_.size() && (s_[exp] == 'e' || s_[exp] == 'E')) {
      size_t q = exp + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && is_digit(s_[q])) exp = digits(q);
    }
    if (exp > p) {
      std::string t;
      for (size_t i = start; i < exp; ++i)
        if (s_[i] != '_') t += s_[i];
      emit(TokKind::kFloat, t);
      out_.back().fval = std::strtod(t.c_str(), nullptr);
      pos_ = exp;
      return true;
    }
  }
  // Integer: 0x/0o/0b prefixes, decimal zero, or decimal; '_' between digits.
  int base = 10;
  size_t p = start;
  std::string t;
  if (s_[p] == '0' && p + 1 < s_.size() &&
      std::string_view("xXoObB").find(s_[p + 1]) != std::string_view::npos) {
    const char b = char(s_[p + 1] | 0x20);
    base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
    p += 2;
    auto ok = [&](size_t i) {
      return i < s_.size() && hex_value(s_[i]) >= 0 && hex_value(s_[i]) < base;
    };
    while (ok(p) || (s_[p] == '_' && ok(p + 1))) {
      if (s_[p] != '_') t += s_[p];
      ++p;
    }
    if (t.empty()) fail("malformed number");
  } else if (s_[p] == '0') {
    t = "0";
    ++p;
    while (p < s_.size() &&
           (s_[p] == '0' || (s_[p] == '_' && p + 1 < s_.size() && s_[p + 1] == '0')))
      ++p;
  } else {
    const size_t e = digits(p);
    for (; p < e; ++p)
      if (s_[p] != '_') t += s_[p];
  }
  errno = 0;
  const long long v = std::strtoll(t.c_str(), nullptr, base);
  if (errno == ERANGE) fail("integer literal out of range");
  emit(TokKind::kInt, t);
  out_.back().ival = v;
  pos_ = p;
  return true;
}

// One escape after a backslash in a string literal, appended to v; p is at
// the character after the backslash and moves past the escape. Python's
// unicode-escape rules: unknown escapes stay as written.
void Lexer::escape(std::string& v, size_t& p) {
  auto hex = [&](int n) {
    uint32_t cp = 0;
    for (int k = 0; k < n; ++k, ++p) {
      if (p >= s_.size() || hex_value(s_[p]) < 0) fail("truncated escape in a string literal");
      cp = cp * 16 + uint32_t(hex_value(s_[p]));
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("bad escape in a string literal");
    append_utf8(v, cp);
  };
  const char e = s_[p++];
  switch (e) {
    case '\n':
      return;  // line continuation
    case '\\':
    case '\'':
    case '"':
      v += e;
      return;
    case 'a':
      v += '\a';
      return;
    case 'b':
      v += '\b';
      return;
    case 'f':
      v += '\f';
      return;
    case 'n':
      v += '\n';
      return;
    case 'r':
      v += '\r';
      return;
    case 't':
      v += '\t';
      return;
    case 'v':
      v += '\v';
      return;
    case 'x':
      return hex(2);
    case 'u':
      return hex(4);
    case 'U':
      return hex(8);
    case 'N':
      fail("\\N{...} escapes are not supported");
    default:
      break;
  }
  if (e >= '0' && e <= '7') {
    uint32_t cp = uint32_t(e - '0');
    for (int k = 0; k < 2 && p < s_.size() && s_[p] >= '0' && s_[p] <= '7'; ++k, ++p)
      cp = cp * 8 + uint32_t(s_[p] - '0');
    append_utf8(v, cp);
  } else {
    v += '\\';
    v += e;
  }
}

void Lexer::string_literal() {
  const char q = s_[pos_];
  std::string v;
  size_t p = pos_ + 1;
  while (true) {
    if (p >= s_.size()) fail("unterminated string literal");
    const char c = s_[p];
    if (c == q) break;
    if (c != '\\') {
      v += c, ++p;
      continue;
    }
    if (++p >= s_.size()) fail("unterminated string literal");
    escape(v, p);
  }
  emit(TokKind::kString, std::move(v));
  pos_ = p + 1;
}

void Lexer::token() {
  const char c = s_[pos_];
  if (number()) return;
  if (is_name_start(c)) {
    size_t p = pos_;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    emit(TokKind::kName, s_.substr(pos_, p - pos_));
    pos_ = p;
    return;
  }
  if (c == '\'' || c == '"') return string_literal();
  static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                               "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                               ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
  for (const char* op : kOps) {
    const std::string_view o(op);
    if (s_.compare(pos_, o.size(), o) != 0) continue;
    if (o == "(" || o == "[" || o == "{") {
      brackets_.push_back(o == "(" ? ")" : o == "[" ? "]" : "}");
    } else if (o == ")" || o == "]" || o == "}") {
      if (brackets_.empty()) fail(fmt::format("unexpected '{}'", o));
      if (brackets_.back() != o)
        fail(fmt::format("unexpected '{}', expected '{}'", o, brackets_.back()));
      brackets_.pop_back();
    }
    emit(TokKind::kOp, std::string(o));
    pos_ += o.size();
    return;
  }
  fail(fmt::format("unexpected character '{}'", std::string(s_, pos_, utf8_next(s_, pos_) - pos_)));
}

}  // namespace

std::vector<Token> lex(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace kvasir::jinja
