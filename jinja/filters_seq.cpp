// jinja/filters_seq.cpp — filters over sequences and numbers: length,
// first, join, map, select..., sort, unique, int, float, round...
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/operators.h"
#include "jinja/text_ops.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

// jinja2's make_attrgetter: "a.b.0" is getitem(getitem(getitem(x, 'a'), 'b'), 0).
Value attr_path(Interpreter& in, const Value& item, const std::string& path) {
  Value v = item;
  size_t i = 0;
  while (true) {
    const size_t dot = path.find('.', i);
    const std::string part = path.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
    const bool num =
        !part.empty() && part.size() <= 18 &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = in.getitem(v, num ? Value(int64_t(std::stoll(part))) : Value::string(part));
    if (dot == std::string::npos) return v;
    i = dot + 1;
  }
}

// What jinja2's generator filters return.
Value generator(std::vector<Value> items) {
  return Value::seq(std::move(items), Value::Seq::kGenerator);
}

// The key sorting and unique compare by: lowercased strings unless case_sensitive.
Value fold(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py_lower(v.str())) : v;
}

Value f_length(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "length", {});
  switch (v.kind()) {
    case Value::Kind::kString:
      return Value(int64_t(utf8_length(v.str().bytes())));
    case Value::Kind::kList:
      if (v.is_iterator()) break;
      return Value(int64_t(v.items().size()));
    case Value::Kind::kDict:
      return Value(int64_t(v.dict().size()));
    case Value::Kind::kUndefined:
      return Value(int64_t(0));
    default:
      break;
  }
  in.fail(fmt::format("object of type '{}' has no len()", v.type_name()));
}

Value f_first(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "first", {});
  const auto items = iterate(in, v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "last", {});
  if (v.is_iterator()) in.fail(fmt::format("'{}' object is not reversible", v.type_name()));
  const auto items = iterate(in, v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_list(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "list", {});
  return Value::list(iterate(in, v));
}

Value f_join(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "join", {"d", "attribute"});
  const Str sep = r.has(0) ? py_str(*r.get(0)) : Str();
  const std::optional<std::string> attr =
      r.has(1) ? std::optional(py_str(*r.get(1)).bytes()) : std::nullopt;
  Str out;
  bool first = true;
  for (const Value& item : iterate(in, v)) {
    if (!first) out.append(sep);
    first = false;
    out.append(py_str(attr ? attr_path(in, item, *attr) : item));
    in.check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_default(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "default", {"default_value", "boolean"});
  if (v.is_undefined() || (r.boolean(1, false) && !v.truthy()))
    return r.get_or(0, Value::string(""));
  return v;
}

Value f_items(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "items", {});
  if (v.is_undefined()) return Value::seq({}, Value::Seq::kGenerator);
  if (!v.is_dict()) in.fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict().items()) out.push_back(Value::list({k, x}, true));
  return Value::seq(std::move(out), Value::Seq::kGenerator);
}

Value f_dictsort(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "dictsort", {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) in.fail("dictsort(): expected a mapping");
  const bool cs = r.boolean(0, false), rev = r.boolean(2, false);
  const std::string by = r.string(1, "key");
  if (by != "key" && by != "value") in.fail("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items;
  for (const auto& [k, x] : v.dict().items()) items.push_back(Value::list({k, x}, true));
  const size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const int c = compare(fold(x.items()[pos], cs), fold(y.items()[pos], cs));
    return rev ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}

// map(attribute='x', default=...) or map('filter', args...).
Value f_map(Interpreter& in, const Value& v, Args& a) {
  std::vector<Value> out;
  const auto items = v.truthy() ? iterate(in, v) : std::vector<Value>{};
  if (a.pos.empty()) {
    ArgReader r(in, a, "map", {"attribute", "default"});
    if (!r.has(0)) in.fail("map() needs a filter name or attribute=");
    const std::string attr = py_str(*r.get(0)).bytes();
    for (const Value& item : items) {
      Value x = attr_path(in, item, attr);
      out.push_back(x.is_undefined() && r.has(1) ? *r.get(1) : x);
    }
    return generator(std::move(out));
  }
  if (!a.pos[0].is_string()) in.fail("map(): the filter name must be a string");
  const std::string name = a.pos[0].str().bytes();
  if (!has_filter(name)) in.fail(fmt::format("no filter named '{}'", name));
  Args rest{std::vector<Value>(a.pos.begin() + 1, a.pos.end()), a.kw};
  for (const Value& item : items) {
    Args copy = rest;
    out.push_back(in.filter(name, item, copy));
  }
  return generator(std::move(out));
}

// select/reject/selectattr/rejectattr.
Value select_impl(Interpreter& in, const Value& v, Args& a, bool by_attr, bool keep) {
  size_t i = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty()) in.fail("selectattr()/rejectattr() need an attribute name");
    attr = py_str(a.pos[i++]).bytes();
  }
  std::string test;
  if (i < a.pos.size()) {
    if (!a.pos[i].is_string()) in.fail("the test name must be a string");
    test = a.pos[i++].str().bytes();
    if (!has_test(test)) in.fail(fmt::format("no test named '{}'", test));
  }
  Args rest{std::vector<Value>(a.pos.begin() + long(i), a.pos.end()), a.kw};
  std::vector<Value> out;
  for (const Value& item : v.truthy() ? iterate(in, v) : std::vector<Value>{}) {
    const Value x = by_attr ? attr_path(in, item, attr) : item;
    bool ok;
    if (test.empty()) {
      ok = x.truthy();
    } else {
      Args copy = rest;
      ok = in.test(test, x, copy);
    }
    if (ok == keep) out.push_back(item);
  }
  return generator(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, Args& a) {
  return select_impl(in, v, a, false, true);
}
Value f_reject(Interpreter& in, const Value& v, Args& a) {
  return select_impl(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, Args& a) {
  return select_impl(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) {
  return select_impl(in, v, a, true, false);
}

Value f_unique(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "unique", {"case_sensitive", "attribute"});
  const bool cs = r.boolean(0, false);
  const std::optional<std::string> attr =
      r.has(1) ? std::optional(py_str(*r.get(1)).bytes()) : std::nullopt;
  std::vector<Value> out, seen;
  for (const Value& item : iterate(in, v)) {
    const Value key = fold(attr ? attr_path(in, item, *attr) : item, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); }))
      continue;
    in.step(seen.size());
    seen.push_back(key);
    out.push_back(item);
  }
  return generator(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool rev = r.boolean(0, false), cs = r.boolean(1, false);
  const std::optional<std::string> attr =
      r.has(2) ? std::optional(py_str(*r.get(2)).bytes()) : std::nullopt;
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(in, v))
    keyed.emplace_back(fold(attr ? attr_path(in, item, *attr) : item, cs), item);
  in.step(keyed.size() * 8);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return rev ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_reverse(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "reverse", {});
  if (v.is_string()) {
    Str out;
    const auto cps = utf8_offsets(v.str().bytes());
    for (size_t i = cps.size() - 1; i > 0; --i) out.append(v.str().substr(cps[i - 1], cps[i]));
    return v.is_html() ? Value::html(std::move(out)) : Value(std::move(out));
  }
  // reversed(value), or a reversed list where Python cannot reverse it.
  const bool reversible = !v.is_iterator();
  auto items = iterate(in, v);
  std::reverse(items.begin(), items.end());
  return reversible ? Value::seq(std::move(items), Value::Seq::kReverseIter)
                    : Value::list(std::move(items));
}

Value f_sum(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "sum", {"attribute", "start"});
  const std::optional<std::string> attr =
      r.has(0) ? std::optional(py_str(*r.get(0)).bytes()) : std::nullopt;
  Value total = r.get_or(1, Value(int64_t(0)));
  for (const Value& item : iterate(in, v))
    total = binary_op(in, "+", total, attr ? attr_path(in, item, *attr) : item);
  return total;
}

Value minmax(Interpreter& in, const Value& v, Args& a, bool max) {
  ArgReader r(in, a, max ? "max" : "min", {"case_sensitive", "attribute"});
  const bool cs = r.boolean(0, false);
  const std::optional<std::string> attr =
      r.has(1) ? std::optional(py_str(*r.get(1)).bytes()) : std::nullopt;
  const auto items = iterate(in, v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t i) { return fold(attr ? attr_path(in, items[i], *attr) : items[i], cs); };
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = compare(key(i), key(best));
    if (max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value f_max(Interpreter& in, const Value& v, Args& a) {
  return minmax(in, v, a, true);
}
Value f_min(Interpreter& in, const Value& v, Args& a) {
  return minmax(in, v, a, false);
}

// Python's float(str): surrounding whitespace, '_' between digits, inf/nan.
std::optional<double> parse_float(const std::string& raw) {
  std::string s;
  const Str t = py_strip(Str::markup(raw), Side::kBoth);
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t.bytes()[i];
    if (c == '_' && i > 0 && i + 1 < t.size() && std::isdigit(uint8_t(t.bytes()[i - 1])) &&
        std::isdigit(uint8_t(t.bytes()[i + 1])))
      continue;
    s += c;
  }
  if (s.empty() || s.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

// Python's int(str, base).
std::optional<int64_t> parse_int(const std::string& raw, int base) {
  const Str t = py_strip(Str::markup(raw), Side::kBoth);
  std::string s;
  for (char c : t.bytes())
    if (c != '_') s += c;
  if (s.empty() || s.find_first_of(" .eE") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, base);
  if (errno == ERANGE || end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

Value f_int(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "int", {"default", "base"});
  const Value def = r.get_or(0, Value(int64_t(0)));
  if (v.is_int() || v.is_bool()) return Value(v.integer());
  if (v.is_float()) {
    if (!std::isfinite(v.real()) || std::fabs(v.real()) >= 9.2e18) return def;
    return Value(int64_t(v.real()));
  }
  if (!v.is_string()) return def;
  if (auto i = parse_int(v.str().bytes(), int(r.integer(1, 10)))) return Value(*i);
  if (auto f = parse_float(v.str().bytes()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
    return Value(int64_t(*f));
  return def;
}

Value f_float(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "float", {"default"});
  if (v.is_number()) return Value(v.real());
  if (v.is_string())
    if (auto f = parse_float(v.str().bytes())) return Value(*f);
  return r.get_or(0, Value(0.0));
}

Value f_abs(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "abs", {});
  if (!v.is_number()) in.fail(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
  if (v.is_float()) return Value(std::fabs(v.real()));
  return v.integer() < 0 ? negate(in, Value(v.integer()), true) : Value(v.integer());
}

// round(value, precision) for 'common' (Python's: ties to even on the exact
// binary value), math.ceil/floor otherwise.
Value f_round(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "round", {"precision", "method"});
  const int64_t prec = r.integer(0, 0);
  const std::string method = r.string(1, "common");
  if (method != "common" && method != "ceil" && method != "floor")
    in.fail("method must be common, ceil or floor");
  if (!v.is_number()) in.fail(fmt::format("round(): expected a number, not {}", v.type_name()));
  if (method == "common" && !v.is_float() && prec >= 0) return Value(v.integer());
  const double x = v.real();
  if (prec < -300 || prec > 300) in.fail("round(): precision out of range");
  if (method != "common") {
    const double p = std::pow(10.0, double(prec));
    return Value((method == "ceil" ? std::ceil(x * p) : std::floor(x * p)) / p);
  }
  if (!std::isfinite(x) || prec < 0)
    return Value(std::nearbyint(x * std::pow(10.0, double(prec))) / std::pow(10.0, double(prec)));
  std::string buf(size_t(prec) + 400, '\0');
  const int n = std::snprintf(buf.data(), buf.size(), "%.*f", int(prec), x);
  buf.resize(size_t(std::max(n, 0)));
  return Value(std::strtod(buf.c_str(), nullptr));
}

Value f_attr(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "attr", {"name"});
  return in.getattr(v, r.string(0, ""));
}

}  // namespace

void seq_filters(FilterTable& t) {
  t.insert(t.end(), {
                        {"length", f_length},
                        {"count", f_length},
                        {"first", f_first},
                        {"last", f_last},
                        {"list", f_list},
                        {"join", f_join},
                        {"default", f_default},
                        {"d", f_default},
                        {"items", f_items},
                        {"dictsort", f_dictsort},
                        {"map", f_map},
                        {"select", f_select},
                        {"reject", f_reject},
                        {"selectattr", f_selectattr},
                        {"rejectattr", f_rejectattr},
                        {"unique", f_unique},
                        {"sort", f_sort},
                        {"reverse", f_reverse},
                        {"sum", f_sum},
                        {"max", f_max},
                        {"min", f_min},
                        {"int", f_int},
                        {"float", f_float},
                        {"abs", f_abs},
                        {"round", f_round},
                        {"attr", f_attr},
                    });
}

}  // namespace kvasir::jinja
