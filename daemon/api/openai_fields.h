// daemon/api/openai_fields.h — typed access to a request's JSON fields, each
// wrong type or range a 400 naming the field (errors.h, bad_param). Shared
// by the parsers of openai.cpp, openai_chat.cpp and openai_structured.cpp;
// not a public header. Templates over nlohmann's json and ordered_json.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "daemon/api/errors.h"

namespace kvasir::fields {

// Absent or null → nullopt; wrong type → 400 naming `name` (the field's
// full path, e.g. "response_format.json_schema.strict").
template <class J>
std::optional<bool> get_bool(const J& j, const char* key, const std::string& name = "") {
  const std::string& n = name.empty() ? std::string(key) : name;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    bad_param(n, fmt::format("{} must be a boolean (got {})", n, it->type_name()));
  return it->template get<bool>();
}

template <class J>
std::optional<double> get_number(const J& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number())
    bad_param(key, fmt::format("{} must be a number (got {})", key, it->type_name()));
  double v = it->template get<double>();
  if (!std::isfinite(v)) bad_param(key, fmt::format("{} must be finite", key));
  return v;
}

// An integer in [lo, hi]. Floats with an integral value (2.0) are accepted.
template <class J>
std::optional<int64_t> get_int(const J& j, const char* key, int64_t lo, int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  int64_t v = 0;
  if (it->is_number_integer()) {
    if (it->is_number_unsigned() &&
        it->template get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad_param(key, fmt::format("{} is out of range (got {})", key, it->dump()));
    v = it->template get<int64_t>();
  } else if (it->is_number_float()) {
    double d = it->template get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18)
      bad_param(key, fmt::format("{} must be an integer (got {})", key, it->dump()));
    v = int64_t(d);
  } else {
    bad_param(key, fmt::format("{} must be an integer (got {})", key, it->type_name()));
  }
  if (v < lo || v > hi)
    bad_param(key, fmt::format("{} must be between {} and {} (got {})", key, lo, hi, v));
  return v;
}

template <class J>
std::optional<std::string> get_string(const J& j, const char* key, const std::string& name = "") {
  const std::string& n = name.empty() ? std::string(key) : name;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string())
    bad_param(n, fmt::format("{} must be a string (got {})", n, it->type_name()));
  return it->template get<std::string>();
}

// Present and not null.
template <class J>
bool has(const J& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

}  // namespace kvasir::fields
