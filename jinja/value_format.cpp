// jinja/value_format.cpp — Python str()/repr() of values.
#include "jinja/value_format.h"

#include <fmt/format.h>
#include <unicode/uchar.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/check.h"

namespace kvasir::jinja {
namespace {

// Python's str.isprintable() for one codepoint: everything except the
// categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs, the space excepted.
bool printable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

void repr_list(const Value& v, Str& out, int depth) {
  if (v.is_iterator()) return out.append("<" + v.type_name() + " object>", false);
  if (!v.is_plain_list()) {  // dict_items([...])
    out.append(v.type_name() + "(", false);
    repr_list(Value::list(v.items()), out, depth);
    return out.append(")", false);
  }
  const bool tuple = v.is_tuple();
  out.append(tuple ? "(" : "[", false);
  const auto& items = v.items();
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out.append(", ", false);
    py_repr(items[i], out, depth + 1);
  }
  if (tuple && items.size() == 1) out.append(",", false);
  out.append(tuple ? ")" : "]", false);
}

void repr_dict(const Dict& d, Str& out, int depth) {
  out.append("{", false);
  bool first = true;
  for (const auto& [k, val] : d.items()) {
    if (!first) out.append(", ", false);
    first = false;
    py_repr(k, out, depth + 1);
    out.append(": ", false);
    py_repr(val, out, depth + 1);
  }
  out.append("}", false);
}

}  // namespace

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-1.2345e+03": shortest round-trip digits
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string sign;
  if (mant[0] == '-') sign = "-", mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  if (exp < -4 || exp >= 16) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    return fmt::format("{}{}e{}{:02d}", sign, m, exp < 0 ? '-' : '+', std::abs(exp));
  }
  std::string out;
  if (exp < 0) {
    out = "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else if (size_t(exp) + 1 >= digits.size()) {
    out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
  }
  return sign + out;
}

std::string string_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size(); i = utf8_next(s, i)) {
    const uint32_t cp = utf8_at(s, i);
    if (cp == uint32_t(q) || cp == '\\') {
      out += '\\';
      out += char(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x80 ? (cp < 0x20 || cp == 0x7F) : !printable(cp)) {
      if (cp < 0x100)
        out += fmt::format("\\x{:02x}", cp);
      else if (cp < 0x10000)
        out += fmt::format("\\u{:04x}", cp);
      else
        out += fmt::format("\\U{:08x}", cp);
    } else {
      out.append(s, i, utf8_next(s, i) - i);
    }
  }
  out += q;
  return out;
}

void py_repr(const Value& v, Str& out, int depth) {
  KV_CHECK(depth < kMaxNesting, "value nested deeper than {} levels", kMaxNesting);
  switch (v.kind()) {
    case Value::Kind::kString:
      if (v.is_html()) out.append("Markup(", false);
      out.append(string_repr(v.str().bytes()), v.str().has_data());
      if (v.is_html()) out.append(")", false);
      return;
    case Value::Kind::kUndefined:
      out.append("Undefined", false);
      return;
    case Value::Kind::kList:
      repr_list(v, out, depth);
      return;
    case Value::Kind::kDict:
      repr_dict(v.dict(), out, depth);
      return;
    case Value::Kind::kNamespace:
      out.append("<Namespace ", false);
      repr_dict(v.dict(), out, depth);
      out.append(">", false);
      return;
    default:
      out.append(py_str(v));
  }
}

Str py_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return v.str();
    case Value::Kind::kUndefined:
      return Str();
    case Value::Kind::kNone:
      return Str::markup("None");
    case Value::Kind::kBool:
      return Str::markup(v.boolean() ? "True" : "False");
    case Value::Kind::kInt:
      return Str::markup(std::to_string(v.integer()));
    case Value::Kind::kFloat:
      return Str::markup(float_repr(v.real()));
    case Value::Kind::kCallable:
      return Str::markup(v.fn().macro ? "<Macro " + string_repr(v.fn().name) + ">"
                                      : "<built-in function " + v.fn().name + ">");
    default: {
      Str out;
      py_repr(v, out, 0);
      return out;
    }
  }
}

}  // namespace kvasir::jinja
