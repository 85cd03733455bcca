// jinja/json.h — values to and from JSON.
//
// to_json is the `tojson` filter as transformers defines it for chat
// templates: Python's json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False) with those four arguments open to the
// template (not jinja2's own tojson, which escapes HTML characters).
//
// from_json turns a request's JSON (messages, tools, extra variables) into
// values; with data=true every string in it is marked as user data.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "jinja/str.h"
#include "jinja/value.h"

namespace kvasir::jinja {

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;             // none: one line
  std::optional<std::string> item_sep, key_sep;  // default: ", "/": " or ","/": " with indent
  bool sort_keys = false;
};

// Throws kvasir::Error for what json.dumps refuses (Undefined, namespaces,
// callables).
Str to_json(const Value& v, const JsonOptions& opt);

// Throws kvasir::Error when nested deeper than kMaxNesting or when an
// integer does not fit int64.
Value from_json(const nlohmann::ordered_json& j, bool data);
Value from_json(const nlohmann::json& j, bool data);

}  // namespace kvasir::jinja
