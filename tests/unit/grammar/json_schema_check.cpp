// tests/unit/grammar/json_schema_check.cpp — check_json: a small JSON Schema
// validator for the keywords the grammar tests' schemas use (an unknown
// keyword throws, so no schema is half-checked).
#include <regex>
#include <set>
#include <stdexcept>

#include "grammar_test_util.h"

namespace kvasir::grammar::testing {
namespace {

using nlohmann::json;

const std::set<std::string> kKnown = {"type",
                                      "properties",
                                      "required",
                                      "additionalProperties",
                                      "items",
                                      "minItems",
                                      "maxItems",
                                      "prefixItems",
                                      "enum",
                                      "const",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum",
                                      "minLength",
                                      "maxLength",
                                      "pattern",
                                      "anyOf",
                                      "$ref",
                                      "$defs",
                                      "title",
                                      "description"};

struct Checker {
  const json& root;
  bool strict;

  static bool has_type(const json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer();
    throw std::logic_error("unknown type " + t);
  }

  // Code points of a UTF-8 string (for minLength/maxLength).
  static size_t length(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }

  const json& resolve(const std::string& ref) const {
    const std::string prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) != 0) throw std::logic_error("unsupported $ref " + ref);
    return root.at("$defs").at(ref.substr(prefix.size()));
  }

  std::string object(const json& s, const json& v, const std::string& at) const {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return at + ": missing " + r.dump();
    const json props = s.value("properties", json::object());
    const bool extra_ok =
        s.contains("additionalProperties") ? s["additionalProperties"] != json(false) : !strict;
    for (const auto& [k, val] : v.items()) {
      if (props.contains(k)) {
        if (auto e = check(props[k], val, at + "/" + k); !e.empty()) return e;
      } else if (!extra_ok) {
        return at + ": property " + k + " is not in the schema";
      } else if (s.contains("additionalProperties") && s["additionalProperties"].is_object()) {
        if (auto e = check(s["additionalProperties"], val, at + "/" + k); !e.empty()) return e;
      }
    }
    return "";
  }

  std::string array(const json& s, const json& v, const std::string& at) const {
    if (v.size() < s.value("minItems", size_t(0))) return at + ": too few items";
    if (v.size() > s.value("maxItems", size_t(-1))) return at + ": too many items";
    const size_t fixed = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string where = at + "/" + std::to_string(i);
      std::string e;
      if (i < fixed)
        e = check(s["prefixItems"][i], v[i], where);
      else if (s.contains("items"))
        e = check(s["items"], v[i], where);
      else if (strict && fixed > 0)
        e = where + ": item beyond prefixItems";
      if (!e.empty()) return e;
    }
    return "";
  }

  std::string scalar(const json& s, const json& v, const std::string& at) const {
    if (v.is_number()) {
      const double x = v.get<double>();
      if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": below minimum";
      if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": above maximum";
      if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>())
        return at + ": not above exclusiveMinimum";
      if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>())
        return at + ": not below exclusiveMaximum";
    }
    if (v.is_string()) {
      const std::string& t = v.get_ref<const std::string&>();
      if (length(t) < s.value("minLength", size_t(0))) return at + ": shorter than minLength";
      if (length(t) > s.value("maxLength", size_t(-1))) return at + ": longer than maxLength";
      if (s.contains("pattern") &&
          !std::regex_search(t, std::regex(s["pattern"].get<std::string>())))
        return at + ": " + v.dump() + " does not match " + s["pattern"].dump();
    }
    return "";
  }

  std::string check(const json& s, const json& v, const std::string& at) const {
    for (const auto& [k, _] : s.items())
      if (!kKnown.count(k)) throw std::logic_error("check_json: keyword " + k + " is not handled");
    if (s.contains("$ref")) return check(resolve(s["$ref"]), v, at);
    if (s.contains("anyOf")) {
      for (const auto& alt : s["anyOf"])
        if (check(alt, v, at).empty()) return "";
      return at + ": " + v.dump() + " matches no anyOf alternative";
    }
    if (s.contains("const") && v != s["const"]) return at + ": not the const " + s["const"].dump();
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& e : s["enum"]) found = found || e == v;
      if (!found) return at + ": " + v.dump() + " is not in the enum";
    }
    if (s.contains("type")) {
      const json types = s["type"].is_array() ? s["type"] : json::array({s["type"]});
      bool ok = false;
      for (const auto& t : types) ok = ok || has_type(v, t.get<std::string>());
      if (!ok) return at + ": " + v.dump() + " is not of type " + s["type"].dump();
    }
    if (v.is_object()) return object(s, v, at);
    if (v.is_array()) return array(s, v, at);
    return scalar(s, v, at);
  }
};

}  // namespace

std::string check_json(const json& schema, const json& value, bool strict) {
  return Checker{schema, strict}.check(schema, value, "");
}

}  // namespace kvasir::grammar::testing
