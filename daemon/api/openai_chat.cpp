// daemon/api/openai_chat.cpp — the chat fields of a request: messages,
// tools, tool_choice, parallel_tool_calls, chat_template_kwargs,
// add_generation_prompt. Shapes are checked here (400 naming the field);
// what a template makes of them is the template's business (chat_turns.cpp
// adapts them to templates that lack a feature; the template itself may
// still refuse a conversation: raise_exception).
#include <fmt/format.h>

#include "daemon/api/openai.h"
#include "daemon/api/openai_fields.h"

namespace kvasir {

using nlohmann::ordered_json;

namespace {

bool known_role(const std::string& r) {
  return r == "system" || r == "user" || r == "assistant" || r == "tool" || r == "developer";
}

// content: a string, null, or an array of {"type": "text", "text": ...}.
void check_content(const ordered_json& c, const std::string& param) {
  if (c.is_null() || c.is_string()) return;
  if (!c.is_array())
    bad_param(param, fmt::format("{} must be a string or an array of parts", param));
  for (const auto& part : c) {
    if (!part.is_object()) bad_param(param, fmt::format("{} parts must be objects", param));
    auto type = fields::get_string(part, "type", param + "[].type");
    if (type && *type != "text")
      bad_param(param, fmt::format("{}: content part type '{}' is not supported (only 'text')",
                                   param, *type));
    auto text = part.find("text");
    if (text == part.end() || !text->is_string())
      bad_param(param, fmt::format("{}: a text part needs a string 'text'", param));
  }
}

// An assistant turn's tool_calls: [{"id", "type": "function", "function":
// {"name", "arguments"}}]. Arguments as a JSON string (OpenAI) or an object.
void check_tool_calls(const ordered_json& calls, const std::string& param) {
  if (!calls.is_array()) bad_param(param, fmt::format("{} must be an array", param));
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string p = fmt::format("{}[{}]", param, k);
    const ordered_json& c = calls[k];
    if (!c.is_object()) bad_param(p, fmt::format("{} must be an object", p));
    fields::get_string(c, "id", p + ".id");
    if (auto t = fields::get_string(c, "type", p + ".type"); t && *t != "function")
      bad_param(p + ".type", fmt::format("{}.type must be 'function'", p));
    auto f = c.find("function");
    if (f == c.end() || !f->is_object())
      bad_param(p + ".function", fmt::format("{}.function must be an object", p));
    if (!fields::get_string(*f, "name", p + ".function.name"))
      bad_param(p + ".function.name", fmt::format("{}.function.name is required", p));
    auto a = f->find("arguments");
    if (a != f->end() && !a->is_null() && !a->is_string() && !a->is_object())
      bad_param(p + ".function.arguments",
                fmt::format("{}.function.arguments must be a JSON string", p));
  }
}

void check_message(const ordered_json& m, size_t i) {
  const std::string at = fmt::format("messages[{}]", i);
  if (!m.is_object()) bad_param(at, "each message must be an object");
  auto role = m.find("role");
  if (role == m.end() || !role->is_string())
    bad_param(at + ".role", "each message needs a string role");
  const std::string r = role->get<std::string>();
  if (!known_role(r))
    bad_param(at + ".role",
              fmt::format("unknown role '{}' (system, user, assistant, tool, developer)", r));
  if (auto c = m.find("content"); c != m.end()) check_content(*c, at + ".content");
  fields::get_string(m, "name", at + ".name");
  if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
    if (r != "assistant") bad_param(at + ".tool_calls", "only assistant messages carry tool_calls");
    check_tool_calls(*tc, at + ".tool_calls");
  }
  if (r == "tool" && !fields::get_string(m, "tool_call_id", at + ".tool_call_id"))
    bad_param(at + ".tool_call_id", "a tool message needs the tool_call_id it answers");
}

// What the model is told about a function: the OpenAI function-tool shape.
void check_tool(const ordered_json& t, size_t i) {
  const std::string at = fmt::format("tools[{}]", i);
  if (!t.is_object()) bad_param(at, fmt::format("{} must be an object", at));
  auto type = fields::get_string(t, "type", at + ".type");
  if (!type || *type != "function")
    bad_param(at + ".type", fmt::format("{}.type must be 'function'", at));
  auto f = t.find("function");
  if (f == t.end() || !f->is_object())
    bad_param(at + ".function", fmt::format("{}.function must be an object", at));
  auto name = fields::get_string(*f, "name", at + ".function.name");
  if (!name || name->empty())
    bad_param(at + ".function.name", fmt::format("{}.function.name is required", at));
  for (unsigned char ch : *name)
    if (!(std::isalnum(ch) || ch == '_' || ch == '-' || ch == '.') || name->size() > 64)
      bad_param(at + ".function.name",
                fmt::format("{}.function.name must be 1 to 64 of a-z, A-Z, 0-9, _, - and .", at));
  fields::get_string(*f, "description", at + ".function.description");
  if (auto p = f->find("parameters"); p != f->end() && !p->is_null() && !p->is_object())
    bad_param(at + ".function.parameters",
              fmt::format("{}.function.parameters must be a JSON Schema object", at));
  fields::get_bool(*f, "strict", at + ".function.strict");
}

ordered_json parse_tools(const ordered_json& j, const ParseLimits& lim) {
  auto it = j.find("tools");
  if (it == j.end() || it->is_null()) return nullptr;
  if (!it->is_array()) bad_param("tools", "tools must be an array of function tools");
  if (it->size() > lim.max_tools)
    bad_param("tools", fmt::format("too many tools ({}; at most {})", it->size(), lim.max_tools));
  for (size_t i = 0; i < it->size(); ++i) check_tool((*it)[i], i);
  std::vector<std::string> names;
  for (size_t i = 0; i < it->size(); ++i) {
    std::string n = (*it)[i]["function"]["name"].get<std::string>();
    if (std::find(names.begin(), names.end(), n) != names.end())
      bad_param(fmt::format("tools[{}].function.name", i),
                fmt::format("two tools are named '{}'", n));
    names.push_back(std::move(n));
  }
  return *it;
}

// tool_choice: "none", "auto", "required", or {"type": "function",
// "function": {"name": ...}} naming one of the tools.
void parse_tool_choice(const ordered_json& j, CompletionRequest& r) {
  const bool tools = !r.chat_turns.tools.is_null() && !r.chat_turns.tools.empty();
  r.tool_choice = tools ? ToolChoice::kAuto : ToolChoice::kNone;
  auto it = j.find("tool_choice");
  if (it == j.end() || it->is_null()) return;
  if (it->is_string()) {
    const std::string v = it->get<std::string>();
    if (v == "none") return void(r.tool_choice = ToolChoice::kNone);
    if (v != "auto" && v != "required")
      bad_param("tool_choice", fmt::format("tool_choice '{}' is not none, auto or required", v));
    if (!tools) bad_param("tool_choice", fmt::format("tool_choice '{}' needs tools", v));
    r.tool_choice = v == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
    return;
  }
  // Every member is checked for its type before it is read: nlohmann's
  // value("type", "") throws on a null or a number, which became a 500.
  const auto f = it->is_object() ? it->find("function") : it->end();
  const auto type = it->is_object() ? it->find("type") : it->end();
  if (!it->is_object() || type == it->end() || !type->is_string() || *type != "function" ||
      f == it->end() ||
      !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
    bad_param("tool_choice",
              "tool_choice must be none, auto, required or {\"type\": \"function\", "
              "\"function\": {\"name\": ...}}");
  r.tool_name = (*f)["name"].get<std::string>();
  for (const auto& t : tools ? r.chat_turns.tools : ordered_json::array())
    if (t["function"]["name"] == r.tool_name) return void(r.tool_choice = ToolChoice::kNamed);
  bad_param("tool_choice",
            fmt::format("tool_choice names '{}', which is not in tools", r.tool_name));
}

}  // namespace

ChatTurns parse_chat_turns(const ordered_json& j, const ParseLimits& lim) {
  ChatTurns t;
  auto it = j.find("messages");
  if (it == j.end() || it->is_null()) bad_param("messages", "messages is required");
  if (!it->is_array() || it->empty())
    bad_param("messages", "messages must be a non-empty array of {role, content} objects");
  if (it->size() > lim.max_messages)
    bad_param("messages",
              fmt::format("too many messages ({}; at most {})", it->size(), lim.max_messages));
  for (size_t i = 0; i < it->size(); ++i) check_message((*it)[i], i);
  t.messages = *it;
  t.tools = parse_tools(j, lim);
  if (auto k = j.find("chat_template_kwargs"); k != j.end() && !k->is_null()) {
    if (!k->is_object())
      bad_param("chat_template_kwargs", "chat_template_kwargs must be an object");
    for (const auto& [key, v] : k->items())
      for (const char* reserved :
           {"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"})
        if (key == reserved)
          bad_param("chat_template_kwargs",
                    fmt::format("chat_template_kwargs cannot set '{}'", key));
    t.kwargs = *k;
  }
  t.add_generation_prompt = fields::get_bool(j, "add_generation_prompt").value_or(true);
  return t;
}

void parse_chat_fields(const ordered_json& j, CompletionRequest& r, const ParseLimits& lim) {
  r.chat_turns = parse_chat_turns(j, lim);
  parse_tool_choice(j, r);
  r.parallel_tool_calls = fields::get_bool(j, "parallel_tool_calls").value_or(true);
}

}  // namespace kvasir
