// jinja/methods.cpp — the str, dict and list methods templates call
// ("x".strip(), message.get('content'), d.items()...), with Python's
// arguments and results.
#include <unicode/uchar.h>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/operators.h"
#include "jinja/text_ops.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

constexpr std::string_view kStrMethods[] = {
    "strip",      "lstrip",   "rstrip",       "split",        "rsplit",  "splitlines",
    "startswith", "endswith", "replace",      "upper",        "lower",   "title",
    "capitalize", "format",   "join",         "find",         "rfind",   "index",
    "rindex",     "count",    "isdigit",      "isalpha",      "isalnum", "isspace",
    "isupper",    "islower",  "removeprefix", "removesuffix", "center"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};
constexpr std::string_view kListMethods[] = {"index", "count"};

template <size_t N>
bool listed(const std::string_view (&names)[N], std::string_view n) {
  for (auto x : names)
    if (x == n) return true;
  return false;
}

std::vector<Value> to_values(std::vector<Str> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (Str& p : parts) out.emplace_back(std::move(p));
  return out;
}

std::optional<std::string> opt_string(Interpreter& in, const Value* v, const char* fn) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string())
    in.fail(fmt::format("{}() argument must be str or None, not {}", fn, v->type_name()));
  return v->str().bytes();
}

const std::string& string_arg(Interpreter& in, const Value* v, const char* fn) {
  if (!v || !v->is_string())
    in.fail(fmt::format("{}() argument must be str, not {}", fn, v ? v->type_name() : "nothing"));
  return v->str().bytes();
}

// startswith/endswith: a string or a tuple of strings.
bool affix(Interpreter& in, const Str& s, const Value& what, bool start, const char* fn) {
  std::vector<Value> options = what.is_tuple() ? what.items() : std::vector<Value>{what};
  for (const Value& o : options) {
    const std::string& a = string_arg(in, &o, fn);
    const std::string& b = s.bytes();
    if (a.size() <= b.size() &&
        (start ? b.compare(0, a.size(), a) == 0 : b.compare(b.size() - a.size(), a.size(), a) == 0))
      return true;
  }
  return false;
}

// isdigit/isalpha/isalnum/isspace: every character matches, and there is one.
bool all_chars(const Str& s, std::string_view kind) {
  const std::string& b = s.bytes();
  if (b.empty()) return false;
  for (size_t i = 0; i < b.size(); i = utf8_next(b, i)) {
    const UChar32 c = UChar32(utf8_at(b, i));
    const bool digit = u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) == U_NT_DIGIT ||
                       u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) == U_NT_DECIMAL;
    const bool alpha = u_isalpha(c);
    bool ok = kind == "isdigit"   ? digit
              : kind == "isalpha" ? alpha
              : kind == "isspace"
                  ? is_python_space(uint32_t(c))
                  : alpha || digit || u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
    if (!ok) return false;
  }
  return true;
}

Value str_join(Interpreter& in, const Str& sep, const Value& seq) {
  Str out;
  bool first = true;
  for (const Value& v : iterate(in, seq)) {
    if (!v.is_string())
      in.fail(fmt::format("sequence item: expected str instance, {} found", v.type_name()));
    if (!first) out.append(sep);
    first = false;
    out.append(v.str());
    in.check_size(out.size());
  }
  return Value(std::move(out));
}

Value str_method(Interpreter& in, const Str& s, std::string_view m, Args& args) {
  const std::string name(m);
  if (m == "format") return Value(str_format(in, s, args));
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    ArgReader r(in, args, name, {"chars"});
    const Side side = m == "strip" ? Side::kBoth : m == "lstrip" ? Side::kLeft : Side::kRight;
    return Value(py_strip(s, side, opt_string(in, r.get(0), name.c_str())));
  }
  if (m == "split" || m == "rsplit") {
    ArgReader r(in, args, name, {"sep", "maxsplit"});
    return Value::list(to_values(
        py_split(in, s, opt_string(in, r.get(0), name.c_str()), r.integer(1, -1), m == "rsplit")));
  }
  if (m == "splitlines") {
    ArgReader r(in, args, name, {"keepends"});
    return Value::list(to_values(py_splitlines(s, r.boolean(0, false))));
  }
  if (m == "startswith" || m == "endswith") {
    ArgReader r(in, args, name, {"prefix"});
    if (!r.has(0)) in.fail(fmt::format("{}() takes one argument", name));
    return Value(affix(in, s, *r.get(0), m == "startswith", name.c_str()));
  }
  if (m == "replace") {
    ArgReader r(in, args, name, {"old", "new", "count"});
    string_arg(in, r.get(0), "replace"), string_arg(in, r.get(1), "replace");
    return Value(py_replace(in, s, r.get(0)->str(), r.get(1)->str(), r.integer(2, -1)));
  }
  if (m == "upper" || m == "lower" || m == "title" || m == "capitalize") {
    ArgReader(in, args, name, {});
    return Value(m == "upper"   ? py_upper(s)
                 : m == "lower" ? py_lower(s)
                 : m == "title" ? py_title(s)
                                : py_capitalize(s));
  }
  if (m == "join") {
    ArgReader r(in, args, name, {"iterable"});
    if (!r.has(0)) in.fail("join() takes exactly one argument");
    return str_join(in, s, *r.get(0));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    ArgReader r(in, args, name, {"sub"});
    const std::string& sub = string_arg(in, r.get(0), name.c_str());
    if (m == "count") return Value(py_count(s, sub));
    const int64_t i = py_find(s, sub, m[0] == 'r');
    if (i < 0 && (m == "index" || m == "rindex")) in.fail("substring not found");
    return Value(i);
  }
  if (m == "removeprefix" || m == "removesuffix") {
    ArgReader r(in, args, name, {"affix"});
    const std::string& a = string_arg(in, r.get(0), name.c_str());
    const std::string& b = s.bytes();
    if (m == "removeprefix" && b.compare(0, a.size(), a) == 0)
      return Value(s.substr(a.size(), b.size()));
    if (m == "removesuffix" && !a.empty() && a.size() <= b.size() &&
        b.compare(b.size() - a.size(), a.size(), a) == 0)
      return Value(s.substr(0, b.size() - a.size()));
    return Value(s);
  }
  if (m == "center") {
    ArgReader r(in, args, name, {"width"});
    const int64_t w = r.integer(0, 0);
    in.check_size(size_t(std::max<int64_t>(w, 0)));
    return Value(py_center(s, w));
  }
  ArgReader(in, args, name, {});
  if (m == "isupper" || m == "islower") {
    const bool cased = py_lower(s).bytes() != py_upper(s).bytes();
    return Value(cased && (m == "isupper" ? py_upper(s) == s : py_lower(s) == s));
  }
  return Value(all_chars(s, m));
}

Value dict_method(Interpreter& in, const Value& self, std::string_view m, Args& args) {
  const Dict& d = self.dict();
  if (m == "get") {
    ArgReader r(in, args, "get", {"key", "default"});
    if (!r.has(0)) in.fail("get() takes at least one argument");
    if (const Value* v = d.find(*r.get(0))) return *v;
    return r.get_or(1, Value::none());
  }
  ArgReader(in, args, std::string(m), {});
  std::vector<Value> out;
  for (const auto& [k, v] : d.items()) {
    if (m == "keys")
      out.push_back(k);
    else if (m == "values")
      out.push_back(v);
    else
      out.push_back(Value::list({k, v}, true));
  }
  return Value::seq(std::move(out), m == "keys"     ? Value::Seq::kDictKeys
                                    : m == "values" ? Value::Seq::kDictValues
                                                    : Value::Seq::kDictItems);
}

Value list_method(Interpreter& in, const Value& self, std::string_view m, Args& args) {
  ArgReader r(in, args, std::string(m), {"value"});
  if (!r.has(0)) in.fail(fmt::format("{}() takes exactly one argument", m));
  const auto& items = self.items();
  int64_t n = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!equals(items[i], *r.get(0))) continue;
    if (m == "index") return Value(int64_t(i));
    ++n;
  }
  if (m == "index") in.fail(fmt::format("{} is not in list", py_str(*r.get(0)).bytes()));
  return Value(n);
}

// markupsafe's Markup methods (3.x): string results are Markup (split's
// items too); replace escapes the replacement, center its fill, format its
// arguments, join the items it joins.
Value html_method(Interpreter& in, const Value& self, std::string_view m, Args& args) {
  static constexpr std::string_view kMarkup[] = {
      "strip",   "lstrip", "rstrip",       "upper",        "lower",  "title", "capitalize",
      "replace", "center", "removeprefix", "removesuffix", "format", "join"};
  auto esc = [](Value& v) {
    if (v.is_string()) v = to_html(v);
  };
  if (m == "format") {
    for (Value& v : args.pos) esc(v);
    for (auto& kv : args.kw) esc(kv.second);
  } else if ((m == "replace" || m == "center") && args.pos.size() >= 2) {
    esc(args.pos[1]);
  } else if (m == "join" && !args.pos.empty()) {
    std::vector<Value> items = iterate(in, args.pos[0]);
    for (Value& v : items) esc(v);
    args.pos[0] = Value::list(std::move(items));
  }
  Value r = str_method(in, self.str(), m, args);
  if (listed(kMarkup, m)) return Value::html(r.str());
  if (m == "split" || m == "rsplit" || m == "splitlines") {
    std::vector<Value> parts;
    for (const Value& p : r.items()) parts.push_back(Value::html(p.str()));
    return Value::list(std::move(parts));
  }
  return r;
}

}  // namespace

bool has_method(const Value& self, std::string_view name) {
  if (self.is_string()) return listed(kStrMethods, name);
  if (self.is_dict()) return listed(kDictMethods, name);
  if (self.is_plain_list()) return listed(kListMethods, name);
  return false;
}

Value call_method(Interpreter& in, const Value& self, std::string_view name, Args& args) {
  if (self.is_html()) return html_method(in, self, name, args);
  if (self.is_string()) return str_method(in, self.str(), name, args);
  if (self.is_dict()) return dict_method(in, self, name, args);
  return list_method(in, self, name, args);
}

}  // namespace kvasir::jinja
