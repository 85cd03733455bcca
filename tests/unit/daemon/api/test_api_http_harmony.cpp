// A harmony model (gpt-oss) through the front door, over the in-process
// HTTP fixture (test_api_http_fixture.h) with a template that speaks
// harmony: the analysis channel comes back as reasoning_content, the final
// channel as content and a commentary message to=functions.NAME as a tool
// call, whole and streamed alike; tool_choice "required" is refused by name.
#include <string>

#include "test_api_http_fixture.h"

using namespace kvasir;
using test::ApiHttpTest;
using test::Resp;
using nlohmann::json;

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

}  // namespace
