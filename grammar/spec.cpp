// grammar/spec.cpp — GrammarSpec's constructors and check_spec: the limits
// and the checks that need no compiling.
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "base/check.h"
#include "grammar/grammar.h"
#include "model/unicode.h"

namespace kvasir::grammar {
namespace {

Status refuse(GrammarKind kind, const std::string& why) {
  return error_status(ErrorCode::kInvalidArgument, "{}: {}", kind_name(kind), why);
}

// What the text of a JSON kind is called in messages.
const char* what_of(GrammarKind kind) {
  return kind == GrammarKind::kStructuralTag ? "structural tag" : "schema";
}

Status check_text(const GrammarSpec& spec, const char* what, const GrammarLimits& lim) {
  if (spec.text.empty()) return refuse(spec.kind, fmt::format("the {} is empty", what));
  if (spec.text.size() > lim.max_text_bytes)
    return refuse(spec.kind, fmt::format("the {} is {} bytes, over the limit of {}", what,
                                         spec.text.size(), lim.max_text_bytes));
  return {};
}

// Walks the schema document without recursion: its depth, and the
// "properties" and "enum" entries summed over every level. A structural
// tag's schemas are inside its document, so the same walk bounds them.
Status check_schema_shape(const nlohmann::json& schema, GrammarKind kind,
                          const GrammarLimits& lim) {
  size_t properties = 0, enums = 0;
  std::vector<std::pair<const nlohmann::json*, int>> todo{{&schema, 1}};
  while (!todo.empty()) {
    auto [node, depth] = todo.back();
    todo.pop_back();
    if (depth > lim.max_nesting_depth)
      return refuse(kind, fmt::format("the {} nests deeper than the limit of {} levels",
                                      what_of(kind), lim.max_nesting_depth));
    if (node->is_object()) {
      auto p = node->find("properties");
      if (p != node->end() && p->is_object()) properties += p->size();
      auto e = node->find("enum");
      if (e != node->end() && e->is_array()) enums += e->size();
    }
    if (node->is_structured())
      for (const auto& child : *node) todo.emplace_back(&child, depth + 1);
  }
  if (properties > lim.max_properties)
    return refuse(kind, fmt::format("the {} has {} properties, over the limit of {}", what_of(kind),
                                    properties, lim.max_properties));
  if (enums > lim.max_enum_values)
    return refuse(kind, fmt::format("the {} has {} enum values, over the limit of {}",
                                    what_of(kind), enums, lim.max_enum_values));
  return {};
}

Status check_schema(const GrammarSpec& spec, const GrammarLimits& lim) {
  const char* what = what_of(spec.kind);
  KV_RETURN_IF_ERROR(check_text(spec, what, lim));
  nlohmann::json schema;
  try {
    schema = nlohmann::json::parse(spec.text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string why = e.what();  // "[json.exception.parse_error.101] parse error at ..."
    if (const size_t p = why.find("] "); why.rfind("[json.exception", 0) == 0 && p != why.npos)
      why.erase(0, p + 2);
    return refuse(spec.kind, fmt::format("the {} is not valid JSON: {}", what, why));
  }
  if (!schema.is_object())
    return refuse(spec.kind,
                  fmt::format("the {} must be a JSON object, not {}", what, schema.type_name()));
  return check_schema_shape(schema, spec.kind, lim);
}

// The nesting of ( ) groups in a regex or an EBNF grammar, skipping escapes,
// character classes and (EBNF) quoted strings: XGrammar's parsers recurse on
// groups, so this bounds their stack.
Status check_groups(const GrammarSpec& spec, const GrammarLimits& lim) {
  const std::string& t = spec.text;
  const bool quotes = spec.kind == GrammarKind::kEbnf;
  int depth = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[' || (quotes && (c == '"' || c == '\''))) {
      const char close = c == '[' ? ']' : c;
      for (++i; i < t.size() && t[i] != close; ++i)
        if (t[i] == '\\') ++i;
    } else if (c == '(' && ++depth > lim.max_nesting_depth) {
      return refuse(spec.kind, fmt::format("groups nest deeper than the limit of {} levels",
                                           lim.max_nesting_depth));
    } else if (c == ')' && depth > 0) {
      --depth;
    }
  }
  return {};
}

Status check_choices(const GrammarSpec& spec, const GrammarLimits& lim) {
  if (spec.choices.empty()) return refuse(spec.kind, "the list of choices is empty");
  if (spec.choices.size() > lim.max_enum_values)
    return refuse(spec.kind, fmt::format("{} choices, over the limit of {}", spec.choices.size(),
                                         lim.max_enum_values));
  size_t bytes = 0;
  for (size_t i = 0; i < spec.choices.size(); ++i) {
    size_t bad;
    const std::string& c = spec.choices[i];
    if (unicode::utf8_complete_prefix(c, bad) != c.size() || bad != std::string::npos)
      return refuse(spec.kind, fmt::format("choice {} is not valid UTF-8", i));
    bytes += c.size();
  }
  if (bytes > lim.max_text_bytes)
    return refuse(spec.kind, fmt::format("the choices are {} bytes, over the limit of {}", bytes,
                                         lim.max_text_bytes));
  return {};
}

}  // namespace

const char* kind_name(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kJsonObject:
      return "json_object";
    case GrammarKind::kJsonSchema:
      return "json_schema";
    case GrammarKind::kRegex:
      return "regex";
    case GrammarKind::kChoice:
      return "choice";
    case GrammarKind::kEbnf:
      return "ebnf";
    case GrammarKind::kStructuralTag:
      return "structural_tag";
  }
  return "unknown";
}

GrammarSpec GrammarSpec::json_object() {
  return GrammarSpec{};
}

GrammarSpec GrammarSpec::json_schema(std::string schema, bool strict) {
  GrammarSpec s;
  s.kind = GrammarKind::kJsonSchema;
  s.text = std::move(schema);
  s.strict = strict;
  return s;
}

GrammarSpec GrammarSpec::regex(std::string pattern) {
  GrammarSpec s;
  s.kind = GrammarKind::kRegex;
  s.text = std::move(pattern);
  return s;
}

GrammarSpec GrammarSpec::choice(std::vector<std::string> choices) {
  GrammarSpec s;
  s.kind = GrammarKind::kChoice;
  s.choices = std::move(choices);
  return s;
}

GrammarSpec GrammarSpec::ebnf(std::string grammar) {
  GrammarSpec s;
  s.kind = GrammarKind::kEbnf;
  s.text = std::move(grammar);
  return s;
}

GrammarSpec GrammarSpec::structural_tag(std::string tag) {
  GrammarSpec s;
  s.kind = GrammarKind::kStructuralTag;
  s.text = std::move(tag);
  return s;
}

Status check_spec(const GrammarSpec& spec, const GrammarLimits& limits) {
  switch (spec.kind) {
    case GrammarKind::kJsonObject:
      return {};
    case GrammarKind::kJsonSchema:
    case GrammarKind::kStructuralTag:
      return check_schema(spec, limits);
    case GrammarKind::kRegex:
      KV_RETURN_IF_ERROR(check_text(spec, "regex", limits));
      return check_groups(spec, limits);
    case GrammarKind::kEbnf:
      KV_RETURN_IF_ERROR(check_text(spec, "grammar", limits));
      return check_groups(spec, limits);
    case GrammarKind::kChoice:
      return check_choices(spec, limits);
  }
  return error_status(ErrorCode::kInvalidArgument, "unknown grammar kind {}", int(spec.kind));
}

}  // namespace kvasir::grammar
