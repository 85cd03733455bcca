// jinja/text_format.cpp — Python's % formatting, str.format and
// format specs, for the forms templates use.
#include <cstdio>

#include "jinja/interpreter.h"
#include "jinja/text_ops.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;  // < > ^ = (0: by type)
  char sign = '-';
  bool alt = false;
  int width = -1, prec = -1;
  char type = 0;
};

bool digit(char c) {
  return c >= '0' && c <= '9';
}

int read_int(const std::string& s, size_t& i) {
  int v = 0;
  while (i < s.size() && digit(s[i])) {
    v = v * 10 + (s[i++] - '0');
    if (v > 100000) v = 100000;  // widths beyond any limit are capped (and fail on size)
  }
  return v;
}

Spec parse_spec(Interpreter& in, const std::string& s) {
  Spec sp;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  const size_t first = s.empty() ? 0 : utf8_next(s, 0);
  if (first < s.size() && is_align(s[first])) {
    sp.fill = s.substr(0, first), sp.align = s[first], i = first + 1;
  } else if (!s.empty() && is_align(s[0])) {
    sp.align = s[0], i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) sp.sign = s[i++];
  if (i < s.size() && s[i] == '#') sp.alt = true, ++i;
  if (i < s.size() && s[i] == '0') {
    if (!sp.align) sp.fill = "0", sp.align = '=';
    ++i;
  }
  if (i < s.size() && digit(s[i])) sp.width = read_int(s, i);
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i >= s.size() || !digit(s[i])) in.fail("format specifier missing precision");
    sp.prec = read_int(s, i);
  }
  if (i < s.size()) sp.type = s[i++];
  if (i != s.size()) in.fail(fmt::format("unsupported format specifier '{}'", s));
  return sp;
}

std::string number_body(Interpreter& in, const Value& v, const Spec& sp, bool& negative) {
  if (!v.is_number())
    in.fail(fmt::format("format code '{}' needs a number, not {}", sp.type, v.type_name()));
  const char t = sp.type;
  if (t == 'd' || t == 'x' || t == 'X' || t == 'o' || t == 'b') {
    if (v.is_float())
      in.fail(fmt::format("unknown format code '{}' for object of type 'float'", t));
    const int64_t x = v.integer();
    negative = x < 0;
    const uint64_t m = negative ? uint64_t(0) - uint64_t(x) : uint64_t(x);
    std::string body = t == 'd'   ? fmt::format("{}", m)
                       : t == 'x' ? fmt::format("{:x}", m)
                       : t == 'X' ? fmt::format("{:X}", m)
                       : t == 'o' ? fmt::format("{:o}", m)
                                  : fmt::format("{:b}", m);
    if (sp.alt && t != 'd') body = std::string("0") + (t == 'X' ? 'X' : t) + body;
    return body;
  }
  const double f = v.real();
  negative = std::signbit(f);
  const double a = std::fabs(f);
  if (t == 'f' || t == 'F' || t == '%') {
    const int prec = sp.prec < 0 ? 6 : sp.prec;
    std::string body = fmt::format("{:.{}f}", t == '%' ? a * 100 : a, prec);
    if (std::isinf(a)) body = t == 'F' ? "INF" : "inf";
    if (std::isnan(a)) body = t == 'F' ? "NAN" : "nan";
    return t == '%' ? body + "%" : body;
  }
  if (t == 'e' || t == 'E') {
    std::string body = fmt::format("{:.{}e}", a, sp.prec < 0 ? 6 : sp.prec);
    if (t == 'E')
      for (char& c : body) c = char(std::toupper(c));
    return body;
  }
  if (t == 0 && sp.prec < 0) {
    std::string r =
        v.is_float() ? float_repr(a) : std::to_string(uint64_t(std::llabs(v.integer())));
    return r;
  }
  in.fail(fmt::format("unsupported format code '{}'", t ? t : '?'));
}

Str pad(Interpreter& in, Str body, const Spec& sp, char default_align, const std::string& sign) {
  const int64_t len = int64_t(utf8_length(body.bytes()) + utf8_length(sign));
  const int64_t n = sp.width > len ? sp.width - len : 0;
  in.check_size(body.size() + size_t(n) * sp.fill.size());
  auto fill = [&](int64_t k) {
    std::string f;
    for (int64_t i = 0; i < k; ++i) f += sp.fill;
    return f;
  };
  const char align = sp.align ? sp.align : default_align;
  Str out;
  if (align == '<') {
    out.append(sign, false), out.append(body), out.append(fill(n), false);
  } else if (align == '^') {
    out.append(fill(n / 2), false), out.append(sign, false), out.append(body),
        out.append(fill(n - n / 2), false);
  } else if (align == '=') {
    out.append(sign, false), out.append(fill(n), false), out.append(body);
  } else {
    out.append(fill(n), false), out.append(sign, false), out.append(body);
  }
  return out;
}

Str apply_spec(Interpreter& in, const Value& v, const Spec& sp) {
  if (sp.type == 's' || (sp.type == 0 && !v.is_number())) {
    if (v.is_number() && sp.type == 's') in.fail("unknown format code 's' for a number");
    Str s = py_str(v);
    if (sp.prec >= 0) {
      const auto cps = utf8_offsets(s.bytes());
      if (size_t(sp.prec) + 1 < cps.size()) s = s.substr(0, cps[size_t(sp.prec)]);
    }
    return pad(in, std::move(s), sp, '<', "");
  }
  bool negative = false;
  const std::string body = number_body(in, v, sp, negative);
  const std::string sign = negative ? "-" : sp.sign == '+' ? "+" : sp.sign == ' ' ? " " : "";
  return pad(in, Str::markup(body), sp, '>', sign);
}

// Markup % args: markupsafe escapes the string arguments.
Value escaped_args(const Value& args) {
  auto esc = [](const Value& x) { return x.is_string() ? to_html(x) : x; };
  if (args.is_tuple()) {
    std::vector<Value> e;
    for (const Value& x : args.items()) e.push_back(esc(x));
    return Value::list(std::move(e), true);
  }
  if (args.is_dict()) {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, x] : args.dict().items()) d->set(k, esc(x));
    return Value::dict(std::move(d));
  }
  return esc(args);
}

}  // namespace

Str format_spec(Interpreter& in, const Value& v, const std::string& spec) {
  return apply_spec(in, v, parse_spec(in, spec));
}

Value percent_format(Interpreter& in, const Value& fmt_value, const Value& raw_args) {
  const Str& fmt_str = fmt_value.str();
  const std::string& f = fmt_str.bytes();
  const Value args = fmt_value.is_html() ? escaped_args(raw_args) : raw_args;
  std::vector<Value> pos = args.is_tuple() ? args.items() : std::vector<Value>{args};
  size_t next = 0;
  bool named = false;
  Str out;
  size_t i = 0, lit = 0;
  while ((i = f.find('%', lit)) != std::string::npos) {
    out.append(fmt_str.substr(lit, i));
    ++i;
    if (i < f.size() && f[i] == '%') {
      out.append("%", fmt_str.data_in(i, i + 1));
      lit = i + 1;
      continue;
    }
    const Value* arg = nullptr;
    if (i < f.size() && f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos || !args.is_dict()) in.fail("format requires a mapping");
      arg = args.dict().find(f.substr(i + 1, close - i - 1));
      if (!arg) in.fail(fmt::format("KeyError: '{}'", f.substr(i + 1, close - i - 1)));
      named = true;
      i = close + 1;
    }
    Spec sp;
    for (; i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos; ++i) {
      if (f[i] == '-') sp.align = '<';
      if (f[i] == '+' || f[i] == ' ') sp.sign = f[i];
      if (f[i] == '#') sp.alt = true;
      if (f[i] == '0' && sp.align != '<') sp.fill = "0", sp.align = '=';
    }
    if (i < f.size() && digit(f[i])) sp.width = read_int(f, i);
    if (i < f.size() && f[i] == '.') ++i, sp.prec = read_int(f, i);
    if (i >= f.size()) in.fail("incomplete format");
    char t = f[i++];
    if (!arg) {
      if (next >= pos.size()) in.fail("not enough arguments for format string");
      arg = &pos[next++];
    }
    if (t == 'i' || t == 'u') t = 'd';
    if (t == 'r') {
      Str r;
      py_repr(*arg, r);
      sp.type = 's';
      out.append(apply_spec(in, Value(std::move(r)), sp));
    } else if (t == 'd' && arg->is_float()) {
      sp.type = 'd';
      out.append(apply_spec(in, Value(int64_t(arg->real())), sp));
    } else if (t == 's' || t == 'd' || t == 'f' || t == 'F' || t == 'x' || t == 'X' || t == 'o' ||
               t == 'e' || t == 'E') {
      sp.type = t;
      if (t == 's' && arg->is_number()) sp.type = 0, sp.prec = -1;
      if (t == 's' && sp.align == 0) sp.align = '>';
      out.append(t == 's' ? pad(in, py_str(*arg), sp, '>', "") : apply_spec(in, *arg, sp));
    } else {
      in.fail(fmt::format("unsupported format character '{}'", t));
    }
    lit = i;
  }
  out.append(fmt_str.substr(lit, f.size()));
  if (!named && !args.is_dict() && next < pos.size())
    in.fail("not all arguments converted during string formatting");
  in.check_size(out.size());
  return fmt_value.is_html() ? Value::html(std::move(out)) : Value(std::move(out));
}

Str str_format(Interpreter& in, const Str& fmt_str, const Args& args) {
  const std::string& f = fmt_str.bytes();
  Str out;
  size_t auto_index = 0, i = 0;
  while (i < f.size()) {
    const char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out.append(fmt_str.substr(i, i + 1));
      i += 2;
      continue;
    }
    if (c == '}') in.fail("Single '}' encountered in format string");
    if (c != '{') {
      const size_t next = f.find_first_of("{}", i);
      const size_t end = next == std::string::npos ? f.size() : next;
      out.append(fmt_str.substr(i, end));
      i = end;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) in.fail("Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1), spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos)
      spec = field.substr(colon + 1), field.resize(colon);
    char conv = 0;
    if (const size_t bang = field.find('!'); bang != std::string::npos)
      conv = bang + 1 < field.size() ? field[bang + 1] : 0, field.resize(bang);
    const Value* arg = nullptr;
    if (field.empty() || digit(field[0])) {
      size_t k = 0;
      const size_t idx = field.empty() ? auto_index++ : size_t(read_int(field, k));
      if (idx >= args.pos.size())
        in.fail("Replacement index out of range for positional args tuple");
      arg = &args.pos[idx];
    } else {
      for (const auto& kv : args.kw)
        if (kv.first == field) arg = &kv.second;
      if (!arg) in.fail(fmt::format("KeyError: '{}'", field));
    }
    Value v = *arg;
    if (conv == 'r') {
      Str r;
      py_repr(v, r);
      v = Value(std::move(r));
    } else if (conv && conv != 's') {
      in.fail(fmt::format("unknown conversion '{}'", conv));
    }
    out.append(spec.empty() ? py_str(v) : format_spec(in, v, spec));
    in.check_size(out.size());
    i = close + 1;
  }
  return out;
}

Str html_escape(const Str& s) {
  Str out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s.bytes()[i];
    const char* rep = c == '&'    ? "&amp;"
                      : c == '<'  ? "&lt;"
                      : c == '>'  ? "&gt;"
                      : c == '"'  ? "&#34;"
                      : c == '\'' ? "&#39;"
                                  : nullptr;
    if (rep)
      out.append(rep, s.data_in(i, i + 1));
    else
      out.append(s.substr(i, i + 1));
  }
  return out;
}

Value to_html(const Value& s) {
  return s.is_html() ? s : Value::html(html_escape(py_str(s)));
}

Str py_center(const Str& s, int64_t width) {
  const int64_t len = int64_t(utf8_length(s.bytes()));
  if (width <= len) return s;
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  Str out;
  out.append(std::string(size_t(left), ' '), false);
  out.append(s);
  out.append(std::string(size_t(marg - left), ' '), false);
  return out;
}

}  // namespace kvasir::jinja
