// jinja/json.cpp — json.dumps as transformers' tojson, and JSON input.
#include "jinja/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "jinja/operators.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

void dump_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size(); i = utf8_next(s, i)) {
    const uint32_t cp = utf8_at(s, i);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20) {
      out += fmt::format("\\u{:04x}", cp);
    } else if (ensure_ascii && cp >= 0x80) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
    } else {
      out.append(s, i, utf8_next(s, i) - i);
    }
  }
  out += '"';
}

struct Dumper {
  const JsonOptions& opt;
  std::string item_sep, key_sep;
  Str out;

  void newline(int level) {
    if (!opt.indent) return;
    std::string s = "\n";
    for (int i = 0; i < level; ++i) s += *opt.indent;
    out.append(s, false);
  }

  void string(const Str& s) {
    std::string lit;
    dump_string(s.bytes(), opt.ensure_ascii, lit);
    out.append(lit, s.has_data());
  }

  // json.dumps converts int, float, bool and None keys to strings.
  void key(const Value& k) {
    if (k.is_string()) return string(k.str());
    std::string s;
    if (k.is_bool()) {
      s = k.boolean() ? "true" : "false";
    } else if (k.is_int()) {
      s = std::to_string(k.integer());
    } else if (k.is_float()) {
      const double f = k.real();
      s = std::isnan(f)   ? "NaN"
          : std::isinf(f) ? (f < 0 ? "-Infinity" : "Infinity")
                          : float_repr(f);
    } else if (k.is_none()) {
      s = "null";
    } else {
      KV_FAIL("keys must be str, int, float, bool or None, not {}", k.type_name());
    }
    out.append("\"" + s + "\"", false);
  }

  void number(const Value& v) {
    if (v.is_bool()) return out.append(v.boolean() ? "true" : "false", false);
    if (v.is_int()) return out.append(std::to_string(v.integer()), false);
    const double f = v.real();
    if (std::isnan(f)) return out.append("NaN", false);
    if (std::isinf(f)) return out.append(f < 0 ? "-Infinity" : "Infinity", false);
    out.append(float_repr(f), false);
  }

  void list(const std::vector<Value>& items, int level) {
    if (items.empty()) return out.append("[]", false);
    out.append("[", false);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out.append(item_sep, false);
      newline(level + 1);
      value(items[i], level + 1);
    }
    newline(level);
    out.append("]", false);
  }

  void dict(const Dict& d, int level) {
    if (d.empty()) return out.append("{}", false);
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& kv : d.items()) items.push_back(&kv);
    if (opt.sort_keys)
      std::stable_sort(items.begin(), items.end(),
                       [](auto* a, auto* b) { return compare(a->first, b->first) < 0; });
    out.append("{", false);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out.append(item_sep, false);
      newline(level + 1);
      key(items[i]->first);
      out.append(key_sep, false);
      value(items[i]->second, level + 1);
    }
    newline(level);
    out.append("}", false);
  }

  void value(const Value& v, int level) {
    KV_CHECK(level < kMaxNesting, "tojson: value nested deeper than {} levels", kMaxNesting);
    switch (v.kind()) {
      case Value::Kind::kNone:
        return out.append("null", false);
      case Value::Kind::kBool:
      case Value::Kind::kInt:
      case Value::Kind::kFloat:
        return number(v);
      case Value::Kind::kString:
        return string(v.str());
      case Value::Kind::kList:
        if (!v.is_plain_list()) break;
        return list(v.items(), level);
      case Value::Kind::kDict:
        return dict(v.dict(), level);
      default:
        break;
    }
    KV_FAIL("Object of type {} is not JSON serializable", v.type_name());
  }
};

template <class J>
Value convert(const J& j, bool data, int depth) {
  KV_CHECK(depth < kMaxNesting, "JSON nested deeper than {} levels", kMaxNesting);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      KV_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()), "integer {} out of range", u);
      return Value(int64_t(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string: {
      const auto& s = j.template get_ref<const std::string&>();
      KV_CHECK(utf8_valid(s), "a string is not valid UTF-8");
      return Value(Str(s, data));
    }
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert(e, data, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it)
        d->set(Str(it.key(), data), convert(it.value(), data, depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      KV_FAIL("unsupported JSON value (binary)");
  }
}

}  // namespace

Str to_json(const Value& v, const JsonOptions& opt) {
  Dumper d{opt, {}, {}, {}};
  d.item_sep = opt.item_sep.value_or(opt.indent ? "," : ", ");
  d.key_sep = opt.key_sep.value_or(": ");
  d.value(v, 0);
  return std::move(d.out);
}

Value from_json(const nlohmann::ordered_json& j, bool data) {
  return convert(j, data, 0);
}
Value from_json(const nlohmann::json& j, bool data) {
  return convert(j, data, 0);
}

}  // namespace kvasir::jinja
