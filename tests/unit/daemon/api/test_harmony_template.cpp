// gpt-oss's harmony template on 20 conversations, as a chat request reaches
// it: the request (OpenAI shape: reasoning_content, arguments as JSON
// strings) adapted for the template (chat_turns.h) and rendered by Kvasir's
// Jinja, byte for byte against transformers' apply_chat_template of the same
// conversation written for the template (thinking, arguments as objects):
// tests/data/chat_templates/harmony_refs.json, written by
// tests/reference/chat_templates/make_harmony_refs.py.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "daemon/api/chat_turns.h"
#include "model/chat_template.h"

using namespace kvasir;
using nlohmann::ordered_json;

namespace {

std::string read_file(const std::string& rel) {
  std::ifstream in(std::string(KVASIR_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(HarmonyTemplate, EqualsTransformersOnEveryConversation) {
  const std::string src = read_file("tests/data/chat_templates/openai-gpt-oss-120b.jinja");
  const auto refs = ordered_json::parse(read_file("tests/data/chat_templates/harmony_refs.json"));
  const ChatTemplate tmpl =
      ChatTemplate::from_string(src, "<|startoftext|>", "<|return|>", "gpt-oss");
  const TemplateTraits traits = template_traits(src);
  ASSERT_TRUE(traits.thinking);
  std::tm now{};  // the references' clock: 2025-08-05 12:00
  now.tm_year = 125, now.tm_mon = 7, now.tm_mday = 5, now.tm_hour = 12;
  size_t n = 0;
  for (const auto& c : refs["cases"]) {
    const auto& req = c["request"];
    ChatTurns t;
    t.messages = req["messages"];
    t.tools = req["tools"];
    t.kwargs = req["chat_template_kwargs"];
    t.add_generation_prompt = req["add_generation_prompt"];
    const ChatTurns a = adapt_chat_turns(t, traits, detect_tool_format(src));
    ChatInput in;
    in.messages = a.messages;
    in.tools = a.tools;
    in.kwargs = a.kwargs;
    in.add_generation_prompt = a.add_generation_prompt;
    in.now = now;
    EXPECT_EQ(tmpl.apply(in).text(), c["expected"].get<std::string>()) << c["name"];
    ++n;
  }
  EXPECT_EQ(n, 20u);
}

// Without the adaptation the analysis before a tool call is lost: the
// template reads `thinking`, which an OpenAI request does not carry.
TEST(HarmonyTemplate, ReasoningContentBecomesThinking) {
  ChatTurns t;
  t.messages = ordered_json::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": null, "reasoning_content": "Need it.", "tool_calls": [
      {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}])");
  TemplateTraits traits = template_traits("{{ message.thinking }} tool_calls");
  const ChatTurns a = adapt_chat_turns(t, traits, ToolFormat::kHarmony);
  EXPECT_EQ(a.messages[1]["thinking"], "Need it.");
  EXPECT_FALSE(a.messages[1].contains("content"));  // the template refuses both
  traits.thinking = false;
  EXPECT_FALSE(adapt_chat_turns(t, traits, ToolFormat::kHarmony).messages[1].contains("thinking"));
}

}  // namespace
