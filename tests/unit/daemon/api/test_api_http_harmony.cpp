// A harmony model (gpt-oss) through the front door, over the in-process
// HTTP fixture (test_api_http_fixture.h) with a template that speaks
// harmony: the analysis channel comes back as reasoning_content, the final
// channel as content and a commentary message to=functions.NAME as a tool
// call, whole and streamed alike; tool_choice "required" is refused by name.
// With gpt-oss's real template: an assistant turn's reasoning_content reaches
// the template's `thinking`, and the prompt is transformers' rendering
// (tests/data/chat_templates/harmony_refs.json) byte for byte.
#include <fstream>
#include <sstream>
#include <string>

#include "test_api_http_fixture.h"

using namespace kvasir;
using nlohmann::json;
using test::ApiHttpTest;
using test::Resp;

namespace {

class HarmonyApiTest : public ApiHttpTest {
 protected:
  // What makes the facts say harmony: the template writes channels.
  std::string template_source() const override {
    return "{{ '<|start|>assistant<|channel|>final<|message|>' }}";
  }
};

struct Streamed {
  std::string reasoning, content, name, args, finish;
};

Streamed read_stream(const std::string& body) {
  Streamed s;
  for (const json& ev : test::sse_events(body)) {
    const json& ch = ev["choices"][0];
    if (!ch["finish_reason"].is_null()) s.finish = ch["finish_reason"];
    const json& d = ch["delta"];
    if (d.contains("reasoning_content")) s.reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content") && d["content"].is_string()) s.content += d["content"];
    if (!d.contains("tool_calls")) continue;
    for (const json& c : d["tool_calls"]) {
      if (c.contains("id")) s.name = c["function"]["name"];
      s.args += c["function"]["arguments"].get<std::string>();
    }
  }
  return s;
}

const std::string kChat = R"({"messages":[{"role":"user","content":"x"}],"max_tokens":400)";
const std::string kTools =
    R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";

TEST_F(HarmonyApiTest, ReasoningAndAnswer) {
  engine_.reply =
      "<|channel|>analysis<|message|>The user says x.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Hello!";
  Resp r = post("/v1/chat/completions", kChat + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  const json msg = r.j()["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], "The user says x.");
  EXPECT_EQ(msg["content"], "Hello!");
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "stop");
  const Streamed s = read_stream(post("/v1/chat/completions", kChat + R"(,"stream":true})").body);
  EXPECT_EQ(s.reasoning, "The user says x.");
  EXPECT_EQ(s.content, "Hello!");
  EXPECT_EQ(s.finish, "stop");
  // The markers are control tokens: the request keeps them for the parser.
  EXPECT_FALSE(engine_.last().prompt.empty());
}

TEST_F(HarmonyApiTest, ToolCallWholeAndStreamed) {
  engine_.reply =
      "<|channel|>analysis<|message|>Weather, then.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\": \"Oslo\"}<|call|>";
  Resp r = post("/v1/chat/completions", kChat + kTools + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  const json msg = r.j()["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], "Weather, then.");
  EXPECT_TRUE(msg["content"].is_null());
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"city": "Oslo"})");
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "tool_calls");
  const Streamed s =
      read_stream(post("/v1/chat/completions", kChat + kTools + R"(,"stream":true})").body);
  EXPECT_EQ(s.reasoning, "Weather, then.");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.name, "get_weather");
  EXPECT_EQ(s.args, R"({"city": "Oslo"})");
  EXPECT_EQ(s.finish, "tool_calls");
}

TEST_F(HarmonyApiTest, ForcedToolChoiceIsRefusedByName) {
  const size_t submitted = engine_.submitted.size();
  Resp r = post("/v1/chat/completions", kChat + kTools + R"(,"tool_choice":"required"})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.j()["error"]["param"], "tool_choice");
  EXPECT_EQ(engine_.submitted.size(), submitted);  // nothing scheduled
  // Completions are not parsed: the text comes back as the model wrote it.
  engine_.reply = "<|channel|>final<|message|>raw";
  r = post("/v1/completions", R"({"prompt":"x","max_tokens":100})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["text"], "<|channel|>final<|message|>raw");
}

std::string read_file(const std::string& rel) {
  std::ifstream in(std::string(KVASIR_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class HarmonyTemplateApiTest : public ApiHttpTest {
 protected:
  std::string template_source() const override {
    return read_file("tests/data/chat_templates/openai-gpt-oss-120b.jinja");
  }
  void SetUp() override {
    ApiHttpTest::SetUp();
    codec_->chat = std::make_shared<ChatTemplate>(
        ChatTemplate::from_string(template_source(), "<|startoftext|>", "<|return|>", "gpt-oss"));
    std::tm t{};  // harmony_refs.json's clock: 2025-08-05
    t.tm_year = 125, t.tm_mon = 7, t.tm_mday = 5, t.tm_hour = 12;
    codec_->now = t;
  }
};

TEST_F(HarmonyTemplateApiTest, ReasoningContentReachesTheTemplate) {
  const json refs = json::parse(read_file("tests/data/chat_templates/harmony_refs.json"));
  size_t checked = 0;
  for (const json& c : refs["cases"]) {
    const std::string name = c["name"];
    if (name != "call_with_thinking" && name != "two_calls" && name != "user_only") continue;
    json body = {{"messages", c["request"]["messages"]}, {"max_tokens", 20}};
    if (!c["request"]["tools"].is_null()) body["tools"] = c["request"]["tools"];
    engine_.reply = "<|channel|>final<|message|>ok";
    Resp r = post("/v1/chat/completions", body.dump());
    ASSERT_EQ(r.status, 200) << name << ": " << r.body;
    const auto ids = engine_.last().prompt;
    EXPECT_EQ(std::string(ids.begin(), ids.end()), c["expected"].get<std::string>()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 3u);
  // The analysis text before a call is in the prompt only through the
  // request's reasoning_content.
  const auto ids = engine_.last().prompt;
  EXPECT_NE(
      std::string(ids.begin(), ids.end()).find("<|channel|>analysis<|message|>Now Rome.<|end|>"),
      std::string::npos);
}

}  // namespace
