// daemon/api/chat_turns.cpp — see chat_turns.h.
#include "daemon/api/chat_turns.h"

#include <regex>

namespace kvasir {

using nlohmann::ordered_json;

TemplateTraits template_traits(std::string_view source) {
  const std::string src(source);
  TemplateTraits t;
  static const std::regex loop_parts(
      R"(for\s+\w+\s+in\s+\w+(\.content|\[\s*['"]content['"]\s*\]))");
  t.content_parts =
      std::regex_search(src, loop_parts) && src.find("is string") == std::string::npos;
  t.tools = src.find("tools") != std::string::npos;
  t.tool_calls = src.find("tool_calls") != std::string::npos;
  t.developer = src.find("developer") != std::string::npos;
  static const std::regex reads_thinking(
      R"(\.thinking\b|['"]thinking['"]\s+(not\s+)?in\s|\[\s*['"]thinking['"]\s*\])");
  t.thinking = std::regex_search(src, reads_thinking);
  return t;
}

namespace {

std::string joined_text(const ordered_json& content) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    if (i) out += "\n";
    out += content[i]["text"].get<std::string>();
  }
  return out;
}

// A call in format f's syntax, as the model is asked to write one.
std::string call_text(const ordered_json& call, ToolFormat f) {
  const ordered_json& fn = call["function"];
  ordered_json args = fn.value("arguments", ordered_json(nullptr));
  if (args.is_null()) args = ordered_json::object();
  const std::string key = f == ToolFormat::kLlama3Json ? "parameters" : "arguments";
  const std::string body = "{\"name\": " + ordered_json(fn["name"]).dump() + ", \"" + key +
                           "\": " + (args.is_string() ? args.get<std::string>() : args.dump()) +
                           "}";
  return f == ToolFormat::kHermes ? "<tool_call>\n" + body + "\n</tool_call>" : body;
}

std::string calls_text(const ordered_json& calls, ToolFormat f) {
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) out += f == ToolFormat::kHermes ? "\n" : f == ToolFormat::kMistral ? ", " : "; ";
    out += call_text(calls[i], f);
  }
  return f == ToolFormat::kMistral ? "[TOOL_CALLS][" + out + "]" : out;
}

// How a model whose template teaches no tool calling is told of the tools.
std::string tools_prompt(const ordered_json& tools, ToolFormat f) {
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const auto& t : tools) s += "\n" + t.dump();
  s += "\n</tools>\n\nFor each function call, return a json object with function name and "
       "arguments ";
  if (f == ToolFormat::kHermes)
    s += "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
         "\"arguments\": <args-json-object>}\n</tool_call>";
  else if (f == ToolFormat::kLlama3Json)
    s += "as {\"name\": <function-name>, \"parameters\": <args-json-object>}";
  else
    s += "as [TOOL_CALLS][{\"name\": <function-name>, \"arguments\": <args-json-object>}]";
  return s;
}

// One message for the template (see chat_turns.h).
ordered_json adapt_message(ordered_json m, const TemplateTraits& t, ToolFormat f) {
  if (m["role"] == "developer" && !t.developer) m["role"] = "system";
  const bool calls =
      m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
  if (calls && t.tool_calls) {
    for (auto& c : m["tool_calls"]) {
      auto& a = c["function"]["arguments"];
      if (!a.is_string()) continue;
      try {
        ordered_json parsed = ordered_json::parse(a.get<std::string>());
        if (parsed.is_object()) a = std::move(parsed);
      } catch (const ordered_json::exception&) {
      }
    }
  } else if (calls) {
    std::string text = joined_text(m.value("content", ordered_json(nullptr)));
    m["content"] = (text.empty() ? "" : text + "\n") + calls_text(m["tool_calls"], f);
    m.erase("tool_calls");
  }
  const bool keep_null = calls && t.tool_calls && m["content"].is_null();
  if (!m.contains("content") || m["content"].is_null()) {
    if (!keep_null) m["content"] = "";
  } else if (m["content"].is_array() && !t.content_parts) {
    m["content"] = joined_text(m["content"]);
  }
  auto rc = m.find("reasoning_content");
  if (t.thinking && rc != m.end() && rc->is_string()) {
    m["thinking"] = *rc;
    if (calls && t.tool_calls) m.erase("content");
  }
  return m;
}

}  // namespace

ChatTurns adapt_chat_turns(ChatTurns in, const TemplateTraits& t, ToolFormat f) {
  ordered_json msgs = ordered_json::array();
  for (auto& m : in.messages) msgs.push_back(adapt_message(std::move(m), t, f));
  if (!t.tools && in.tools.is_array() && !in.tools.empty()) {
    const std::string prompt = tools_prompt(in.tools, f);
    if (!msgs.empty() && msgs[0]["role"] == "system") {
      std::string sys = joined_text(msgs[0]["content"]);
      msgs[0]["content"] = sys.empty() ? prompt : sys + "\n\n" + prompt;
    } else {
      msgs.insert(msgs.begin(), ordered_json{{"role", "system"}, {"content", prompt}});
    }
  }
  in.messages = std::move(msgs);
  return in;
}

}  // namespace kvasir
