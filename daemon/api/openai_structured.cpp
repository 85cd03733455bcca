// daemon/api/openai_structured.cpp — what a request asks its output to
// match: OpenAI's response_format, vLLM's structured_outputs, and vLLM's
// older guided_json / guided_regex / guided_choice / guided_grammar (vLLM
// dropped them in 0.12; accepted here, documented in docs/api.md). At most
// one of them; shapes are checked here, compiling (api_generate.cpp, the
// grammar service) says whether the schema, regex or grammar is good.
#include <fmt/format.h>

#include "daemon/api/openai.h"
#include "daemon/api/openai_fields.h"

namespace kvasir {

using nlohmann::ordered_json;
using Kind = OutputConstraint::Kind;

namespace {

// A JSON Schema given as an object, or as a string holding one (vLLM takes
// both): its text, key order kept.
std::string schema_text(const ordered_json& v, const std::string& param) {
  if (v.is_object()) return v.dump();
  if (v.is_string()) {
    ordered_json parsed;
    try {
      parsed = ordered_json::parse(v.get<std::string>());
    } catch (const ordered_json::exception&) {
      bad_param(param, fmt::format("{} is a string that is not JSON", param));
    }
    if (!parsed.is_object())
      bad_param(param, fmt::format("{} must be a JSON Schema object", param));
    return parsed.dump();
  }
  bad_param(param, fmt::format("{} must be a JSON Schema object", param));
}

std::vector<std::string> choice_list(const ordered_json& v, const std::string& param) {
  if (!v.is_array() || v.empty())
    bad_param(param, fmt::format("{} must be a non-empty array of strings", param));
  std::vector<std::string> out;
  for (const auto& c : v) {
    if (!c.is_string()) bad_param(param, fmt::format("{} must hold strings only", param));
    out.push_back(c.get<std::string>());
  }
  return out;
}

std::string text_of(const ordered_json& v, const std::string& param) {
  if (!v.is_string() || v.get<std::string>().empty())
    bad_param(param, fmt::format("{} must be a non-empty string", param));
  return v.get<std::string>();
}

// {"type": "text"} (none), {"type": "json_object"}, or {"type":
// "json_schema", "json_schema": {"name", "schema", "strict", "description"}}.
std::optional<OutputConstraint> response_format(const ordered_json& rf) {
  if (!rf.is_object()) bad_param("response_format", "response_format must be an object");
  auto type = fields::get_string(rf, "type", "response_format.type");
  if (!type) bad_param("response_format.type", "response_format.type is required");
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") return OutputConstraint{Kind::kJsonObject, "", {}, "response_format"};
  if (*type != "json_schema")
    bad_param(
        "response_format.type",
        fmt::format("response_format.type '{}' is not text, json_object or json_schema", *type));
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object())
    bad_param("response_format.json_schema", "response_format.json_schema must be an object");
  auto name = fields::get_string(*js, "name", "response_format.json_schema.name");
  if (!name || name->empty())
    bad_param("response_format.json_schema.name", "response_format.json_schema.name is required");
  fields::get_bool(*js, "strict", "response_format.json_schema.strict");
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null())
    bad_param("response_format.json_schema.schema",
              "response_format.json_schema.schema is required");
  const std::string param = "response_format.json_schema.schema";
  return OutputConstraint{Kind::kJsonSchema, schema_text(*schema, param), {}, param};
}

// structured_outputs: exactly one of json, regex, choice, grammar,
// json_object, structural_tag; disable_any_whitespace and
// whitespace_pattern are refused (XGrammar's whitespace is bounded instead:
// docs/structured-outputs.md); disable_additional_properties and
// disable_fallback are accepted and change nothing (as with vLLM's xgrammar).
std::optional<OutputConstraint> structured_outputs(const ordered_json& so) {
  if (!so.is_object()) bad_param("structured_outputs", "structured_outputs must be an object");
  std::optional<OutputConstraint> out;
  for (const auto& [key, v] : so.items()) {
    const std::string p = "structured_outputs." + key;
    if (v.is_null()) continue;
    OutputConstraint c;
    c.param = p;
    if (key == "json") {
      c.kind = Kind::kJsonSchema, c.text = schema_text(v, p);
    } else if (key == "regex") {
      c.kind = Kind::kRegex, c.text = text_of(v, p);
    } else if (key == "choice") {
      c.kind = Kind::kChoice, c.choices = choice_list(v, p);
    } else if (key == "grammar") {
      c.kind = Kind::kEbnf, c.text = text_of(v, p);
    } else if (key == "structural_tag") {
      c.kind = Kind::kStructuralTag, c.text = v.is_string() ? v.get<std::string>() : v.dump();
    } else if (key == "json_object") {
      if (!v.is_boolean()) bad_param(p, fmt::format("{} must be a boolean", p));
      if (!v.get<bool>()) continue;
      c.kind = Kind::kJsonObject;
    } else if (key == "disable_additional_properties" || key == "disable_fallback") {
      if (!v.is_boolean()) bad_param(p, fmt::format("{} must be a boolean", p));
      continue;
    } else if (key == "disable_any_whitespace" && v.is_boolean() && !v.get<bool>()) {
      continue;
    } else {
      bad_param(p, fmt::format("{} is not supported by this server", p));
    }
    if (out)
      bad_param(p, fmt::format("structured_outputs takes one of json, regex, choice, grammar, "
                               "json_object, structural_tag (got {} and {})",
                               out->param.substr(19), key));
    out = std::move(c);
  }
  if (!out)
    bad_param("structured_outputs",
              "structured_outputs needs one of json, regex, choice, "
              "grammar, json_object, structural_tag");
  return out;
}

// vLLM's fields before structured_outputs.
std::optional<OutputConstraint> guided(const ordered_json& j) {
  std::optional<OutputConstraint> out;
  auto take = [&](const char* key, Kind kind) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (out) bad_param(key, fmt::format("{} and {} both constrain the output", out->param, key));
    OutputConstraint c{kind, "", {}, key};
    if (kind == Kind::kJsonSchema)
      c.text = schema_text(*it, key);
    else if (kind == Kind::kChoice)
      c.choices = choice_list(*it, key);
    else
      c.text = text_of(*it, key);
    out = std::move(c);
  };
  take("guided_json", Kind::kJsonSchema);
  take("guided_regex", Kind::kRegex);
  take("guided_choice", Kind::kChoice);
  take("guided_grammar", Kind::kEbnf);
  return out;
}

}  // namespace

std::optional<OutputConstraint> parse_constraint(const ordered_json& j, bool chat) {
  (void)chat;  // response_format is OpenAI's on both routes, as vLLM takes it
  std::optional<OutputConstraint> out;
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null())
    out = response_format(*it);
  std::optional<OutputConstraint> other;
  if (auto it = j.find("structured_outputs"); it != j.end() && !it->is_null())
    other = structured_outputs(*it);
  if (out && other)
    bad_param("structured_outputs",
              "response_format and structured_outputs both constrain the "
              "output; send one");
  if (!out) out = std::move(other);
  std::optional<OutputConstraint> old = guided(j);
  if (out && old)
    bad_param(old->param,
              fmt::format("{} and {} both constrain the output; send one", out->param, old->param));
  return out ? out : old;
}

}  // namespace kvasir
