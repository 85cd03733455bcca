// The HTTP server and routes in-process, against a FAKE engine and codec
// (test_api_fakes.h): routing, validation, streaming, limits, timeouts,
// cancellation on disconnect, API keys. End-to-end tests against the real
// kvasird live in tests/integration/test_api_e2e.sh.
// clang-format off
#include <utility>  // first: Boost 1.74 Asio uses std::exchange (GCC 12)
// clang-format on
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "base/check.h"
#include "daemon/api/api.h"
#include "daemon/api/api_internal.h"
#include "daemon/api/openai.h"
#include "daemon/config/config.h"
#include "test_api_client.h"
#include "test_api_fakes.h"
#include "test_api_http_fixture.h"

using namespace kvasir;
using test::parse_resp;
using test::Resp;
using test::sse_events;
using test::ApiHttpTest;
using test::Capture;
using namespace std::chrono_literals;
using nlohmann::json;
namespace asio = boost::asio;


TEST_F(ApiHttpTest, CompletionWhole) {
  Resp r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":5,"temperature":0,"seed":7})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.j();
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  GenRequest g = engine_.last();
  EXPECT_EQ(g.prompt, (std::vector<int32_t>{'H', 'i'}));
  EXPECT_EQ(g.sampling.temperature, 0.f);
  EXPECT_TRUE(g.sampling.has_seed);
}

TEST_F(ApiHttpTest, CompletionEndsWithEog) {
  Resp r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":100,"logprobs":1})");
  json j = r.j();
  EXPECT_EQ(j["choices"][0]["text"], engine_.reply);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), engine_.reply.size() + 1);
}

TEST_F(ApiHttpTest, EchoAndChatLogprobs) {
  Resp r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":3,"echo":true})");
  EXPECT_EQ(r.j()["choices"][0]["text"], "HiHel");
  Resp c = post(
      "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2,"logprobs":true,"top_logprobs":1})");
  json lp = c.j()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 2u);
  EXPECT_EQ(lp[0]["token"], "H");
  EXPECT_EQ(lp[0]["top_logprobs"].size(), 1u);
}

TEST_F(ApiHttpTest, CompletionStreamWithUsage) {
  Resp r = post(
      "/v1/completions",
      R"({"prompt":"Hi","max_tokens":8,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.head.find("text/event-stream"), std::string::npos);
  bool done = false;
  auto ev = sse_events(r.body, &done);
  EXPECT_TRUE(done);
  std::string text;
  for (const auto& e : ev)
    if (!e["choices"].empty()) text += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "Hello wo");
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ev.back()["usage"]["completion_tokens"], 8);
}

TEST_F(ApiHttpTest, StopStringTruncatesAndCancels) {
  Resp r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":30,"stop":["world"]})");
  json j = r.j();
  EXPECT_EQ(j["choices"][0]["text"], "Hello ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(engine_.n_cancelled(), 1u);
  Resp s = post("/v1/completions", R"({"prompt":"Hi","max_tokens":30,"stop":"o w","stream":true})");
  std::string text;
  for (const auto& e : sse_events(s.body)) text += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "Hell");
}

TEST_F(ApiHttpTest, ParallelSamplingWholeCountsThePromptOnce) {
  engine_.cached_tokens = 1;
  Resp r = post("/v1/completions",
                R"({"prompt":"Hi","max_tokens":5,"n":3,"seed":7,"cache_salt":"tenant-a"})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.j();
  ASSERT_EQ(j["choices"].size(), 3u);
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][1]["text"], "<1>He");
  EXPECT_EQ(j["choices"][2]["text"], "<2>He");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens"], 15);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
  GenRequest g = engine_.last();
  EXPECT_EQ(g.n, 3);
  EXPECT_EQ(g.cache_salt, "tenant-a");
  EXPECT_EQ(g.sampling.seed, 7u);  // the engine adds i for choice i
}

TEST_F(ApiHttpTest, BestOfReturnsTheChoicesOfHighestLogprob) {
  // The fake's choice i has logprob -0.25 (i + 1) per token: 0 is best.
  Resp r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":4,"best_of":3})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.j();
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], "Hell");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);  // all three were generated
  EXPECT_EQ(engine_.last().n, 3);
  j = post("/v1/completions", R"({"prompt":"Hi","max_tokens":4,"n":2,"best_of":3})").j();
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["text"], "Hell");
  EXPECT_EQ(j["choices"][1]["text"], "<1>H");
  EXPECT_EQ(j["choices"][1]["index"], 1);
  Resp s = post("/v1/completions", R"({"prompt":"Hi","best_of":2,"stream":true})");
  EXPECT_EQ(s.status, 400);
  EXPECT_EQ(s.j()["error"]["param"], "best_of");
}

TEST_F(ApiHttpTest, ParallelSamplingStreamsEachChoiceWithItsIndex) {
  Resp r = post(
      "/v1/completions",
      R"({"prompt":"Hi","max_tokens":6,"n":2,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200);
  bool done = false;
  auto ev = sse_events(r.body, &done);
  EXPECT_TRUE(done);
  std::map<int, std::string> text;
  std::map<int, int> finals;
  for (const auto& e : ev) {
    if (e["choices"].empty()) continue;
    const json& c = e["choices"][0];
    text[c["index"].get<int>()] += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) finals[c["index"].get<int>()]++;
  }
  EXPECT_EQ(text[0], "Hello ");
  EXPECT_EQ(text[1], "<1>Hel");
  EXPECT_EQ(finals, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(ev.back()["usage"]["completion_tokens"], 12);
  EXPECT_EQ(ev.back()["usage"]["prompt_tokens"], 2);
  // Chat: a role chunk per choice first.
  Resp c =
      post("/v1/chat/completions",
           R"({"messages":[{"role":"user","content":"x"}],"max_tokens":3,"n":2,"stream":true})");
  auto cev = sse_events(c.body);
  ASSERT_GE(cev.size(), 2u);
  EXPECT_EQ(cev[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(cev[0]["choices"][0]["index"], 0);
  EXPECT_EQ(cev[1]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(cev[1]["choices"][0]["index"], 1);
}

TEST_F(ApiHttpTest, AStopStringEndsOneChoiceOnly) {
  Resp r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":8,"n":2,"stop":"1>"})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.j();
  EXPECT_EQ(j["choices"][0]["text"], "Hello wo");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][1]["text"], "<");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  EXPECT_TRUE(engine_.was_stopped(1, 1));
  EXPECT_EQ(engine_.n_cancelled(), 0u);
}

TEST_F(ApiHttpTest, Chat) {
  Resp r =
      post("/v1/chat/completions",
           R"({"model":"fake-model","messages":[{"role":"user","content":"yo"}],"max_tokens":5})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(r.j()["object"], "chat.completion");
  auto prompt = engine_.last().prompt;
  EXPECT_EQ(std::string(prompt.begin(), prompt.end()), "user: yo\nassistant: ");
  Resp s = post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"yo"}],"max_tokens":3,"stream":true})");
  auto ev = sse_events(s.body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t i = 1; i + 1 < ev.size(); ++i)
    text += ev[i]["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(text, "Hel");
  EXPECT_EQ(ev.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(ApiHttpTest, BadRequests) {
  struct Case {
    const char* path;
    const char* body;
    int status;
    const char* param;
  };
  const Case cases[] = {
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", R"({"prompt":5})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":-1})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","n":1000000000})", 400, "n"},
      {"/v1/completions", R"({"prompt":[1,999]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":5000})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","model":"gpt-9"})", 404, "model"},
      {"/v1/chat/completions", R"({"messages":"hi"})", 400, "messages"},
      {"/detokenize", R"({"tokens":[1,300]})", 400, "tokens"},
  };
  for (const auto& c : cases) {
    Resp r = post(c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " → " << r.body;
    json e = r.j()["error"];
    EXPECT_TRUE(e["message"].is_string());
    if (*c.param) {
      EXPECT_EQ(e["param"], c.param) << c.body;
    }
  }
  EXPECT_EQ(get("/nope").status, 404);
  EXPECT_EQ(get("/v1/completions").status, 405);
  EXPECT_EQ(engine_.submitted.size(), 0u);  // nothing bad reached the engine
}

// Structured outputs: the constraint is compiled before anything is
// scheduled (its spec then travels with the request), a refusal is a 400
// naming the field, a busy compiler a 429, a client gone meanwhile nothing.
TEST_F(ApiHttpTest, ConstraintsCompiledOnArrival) {
  grammar_->delay_ms = 50;
  Resp r = post("/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"x"}],"max_tokens":3,
                    "response_format":{"type":"json_schema","json_schema":{"name":"n",
                    "schema":{"type":"object"}}}})");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_NE(engine_.last().grammar, nullptr);
  EXPECT_EQ(*engine_.last().grammar, R"(wire:{"type":"object"})");
  r = post("/v1/completions",
           R"({"prompt":"x","max_tokens":2,"structured_outputs":{"regex":"a"}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(*engine_.last().grammar, "wire:a");
  const size_t submitted = engine_.submitted.size();
  grammar_->answer = Status(ErrorCode::kInvalidArgument, "regex: the parenthesis is not closed");
  r = post("/v1/completions", R"({"prompt":"x","structured_outputs":{"regex":"("}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.j()["error"]["param"], "structured_outputs.regex");
  EXPECT_EQ(r.j()["error"]["message"], "regex: the parenthesis is not closed");
  grammar_->answer = Status(ErrorCode::kQueueFull, "json_schema: no grammar compiler was free");
  r = post("/v1/completions", R"({"prompt":"x","guided_json":{"type":"object"}})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.j()["error"]["code"], "queue_full");
  EXPECT_EQ(engine_.submitted.size(), submitted);  // nothing refused reached the engine
  // Without a grammar service (a build without the engine): 400 naming the field.
  ApiContext ctx;
  ctx.codec = codec_;
  auto bare = std::make_shared<ApiService>(engine_, ctx, ApiOptions{},
                                           [](std::function<void()> f) { f(); });
  auto cap = std::make_shared<Capture>();
  HttpRequest hr;
  hr.method = "POST";
  hr.path = hr.target = "/v1/completions";
  hr.body = R"({"prompt":"x","structured_outputs":{"json_object":true}})";
  bare->handle(hr, cap);
  EXPECT_EQ(cap->status, 400);
  EXPECT_EQ(json::parse(cap->body)["error"]["param"], "structured_outputs.json_object");
  EXPECT_EQ(engine_.submitted.size(), submitted);
}

// Tool calls through the front door: the fake model answers in Hermes
// syntax; the whole response has the call, the stream's deltas assemble
// into the same call; tool_choice required compiles the forcing grammar.
TEST_F(ApiHttpTest, ToolCallsWholeAndStreamed) {
  engine_.reply =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  const std::string body =
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":200,
          "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  Resp r = post("/v1/chat/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  const json msg = r.j()["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null());
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"city": "Oslo"})");
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "tool_calls");
  // The template knows no tools (the fake's source): they went into a system turn.
  auto prompt = engine_.last().prompt;
  EXPECT_EQ(std::string(prompt.begin(), prompt.end()).rfind("system: # Tools", 0), 0u);
  Resp s = post("/v1/chat/completions", body + R"(,"stream":true})");
  std::string name, args, content;
  for (const json& ev : sse_events(s.body)) {
    const json& d = ev["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) content += d["content"];
    if (!d.contains("tool_calls")) continue;
    for (const json& c : d["tool_calls"]) {
      EXPECT_EQ(c["index"], 0);
      if (c.contains("id")) name = c["function"]["name"];
      args += c["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(args, R"({"city": "Oslo"})");
  EXPECT_EQ(sse_events(s.body).back()["choices"][0]["finish_reason"], "tool_calls");
  // A call cut by a stop string or max_tokens is not reported complete.
  r = post("/v1/chat/completions", body + R"(,"stop":["Oslo"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "stop") << r.body;
  s = post("/v1/chat/completions", body + R"(,"stop":["Oslo"],"stream":true})");
  EXPECT_EQ(sse_events(s.body).back()["choices"][0]["finish_reason"], "stop") << s.body;
  const std::string cut = R"({"messages":[{"role":"user","content":"x"}],"max_tokens":50,
          "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]})";
  r = post("/v1/chat/completions", cut);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "length") << r.body;
  // max_tokens cuts the closing tag: no call syntax leaks into content.
  const size_t no_gt = engine_.reply.size() - 1;
  r = post("/v1/chat/completions",
           R"({"messages":[{"role":"user","content":"x"}],"max_tokens":)" + std::to_string(no_gt) +
               R"(,"tool_choice":"required",
          "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.j()["choices"][0]["message"]["content"].is_null()) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["message"]["tool_calls"].size(), 1u) << r.body;
  // Forced: the family's syntax around the parameters, as a structural tag.
  r = post("/v1/chat/completions", body + R"(,"tool_choice":"required"})");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_FALSE(grammar_->seen.empty());
  EXPECT_EQ(grammar_->seen.back().kind, OutputConstraint::Kind::kStructuralTag);
  EXPECT_EQ(grammar_->seen.back().param, "tools");
  EXPECT_NE(grammar_->seen.back().text.find("<tool_call>"), std::string::npos);
}

// A template's own refusal (raise_exception) is a 400 naming messages;
// /tokenize with messages goes the chat path.
TEST_F(ApiHttpTest, TemplateRefusalAndTokenizeMessages) {
  Resp r = post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],
                "chat_template_kwargs":{"refuse":true}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.j()["error"]["param"], "messages");
  EXPECT_NE(r.j()["error"]["message"].get<std::string>().find("the template refuses"),
            std::string::npos);
  r = post("/tokenize", R"({"messages":[{"role":"user","content":"x"}],
                           "chat_template_kwargs":{"refuse":true}})");
  EXPECT_EQ(r.status, 400);
  // The fixture's template does not know the developer role: a system turn.
  const std::string developer = R"({"messages":[{"role":"developer","content":"be"}],
                                    "add_generation_prompt":false})";
  r = post("/tokenize", developer);
  ASSERT_EQ(r.status, 200) << r.body;
  auto ids = r.j()["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(std::string(ids.begin(), ids.end()), "system: be\n");
  // A template that knows it (read when the service is set up: the facts
  // are the model's, fixed while it is served).
  ApiContext ctx;
  auto codec = std::make_shared<test::FakeCodec>();
  codec->source = "developer";
  ctx.codec = codec;
  auto api = std::make_shared<ApiService>(engine_, ctx, ApiOptions{},
                                          [](std::function<void()> f) { f(); });
  auto cap = std::make_shared<Capture>();
  HttpRequest hr;
  hr.method = "POST";
  hr.path = hr.target = "/tokenize";
  hr.body = developer;
  api->handle(hr, cap);
  ASSERT_EQ(cap->status, 200) << cap->body;
  ids = json::parse(cap->body)["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(std::string(ids.begin(), ids.end()), "developer: be\n");
}

// The template is read when the service is set up, never per request.
TEST_F(ApiHttpTest, TemplateReadOnceNotPerRequest) {
  EXPECT_EQ(codec_->source_reads.load(), 1);
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1})";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(post("/v1/chat/completions", chat).status, 200);
    EXPECT_EQ(post("/tokenize", R"({"messages":[{"role":"user","content":"x"}]})").status, 200);
  }
  EXPECT_EQ(codec_->source_reads.load(), 1);
}

TEST_F(ApiHttpTest, EngineRefusals) {
  engine_.refuse = Status(ErrorCode::kQueueFull, "queue full (1024 requests waiting)");
  Resp r = post("/v1/completions", R"({"prompt":"x"})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.j()["error"]["code"], "queue_full");
  engine_.refuse = Status(ErrorCode::kContextLength, "prompt is longer than the KV cache");
  EXPECT_EQ(post("/v1/completions", R"({"prompt":"x"})").status, 400);
}

TEST_F(ApiHttpTest, TokenizeDetokenizeStatsMetrics) {
  Resp t = post("/tokenize", R"({"prompt":"ab"})");
  EXPECT_EQ(t.j()["tokens"], json::array({97, 98}));
  EXPECT_EQ(post("/detokenize", R"({"tokens":[97,98]})").j()["prompt"], "ab");
  Resp s = get("/kvasir/v1/stats");
  EXPECT_EQ(s.j()["engine"]["blocks_free"], 60);
  EXPECT_EQ(s.j()["stages"].size(), 2u);
  Resp m = get("/metrics");
  EXPECT_NE(m.body.find("kvasir_requests_running 1"), std::string::npos);
  EXPECT_NE(m.body.find(
                "kvasir_stage_busy_seconds_total{stage=\"1\",layers=\"15-29\",device=\"cpu\"} 2.5"),
            std::string::npos)
      << m.body;
}

// The shape `kvasir top`, `kvasir status` and `kvasir bench` read, from the
// engine's typed ring report: exactly these keys per stage.
TEST_F(ApiHttpTest, StatsAndMetricsFromTheRingReport) {
  // An expert group's member of position 1 (docs/expert-groups.md): after
  // the stages, with its position and index.
  StageReport member = engine_.ring.stages[1];
  member.index = 2;
  member.member = 1;
  member.busy_s = 0.5;
  engine_.ring.stages.push_back(member);
  json st = get("/kvasir/v1/stats").j();
  EXPECT_EQ(st["inflight"], 2);
  EXPECT_EQ(st["stages"][2]["position"], 1);
  EXPECT_EQ(st["stages"][2]["member"], 1);
  EXPECT_EQ(st["stages"][2]["busy_s"], 0.5);
  EXPECT_EQ(st["stages"][1], (json{{"index", 1},
                                   {"position", 1},
                                   {"member", 0},
                                   {"layers", "15-29"},
                                   {"device", "cpu"},
                                   {"simd", "cpu:avx2 amx:no q4_1/decode:avx2"},
                                   {"busy_s", 2.5},
                                   {"starved_s", 0.5},
                                   {"blocked_s", 0.75},
                                   {"state", "starved"},
                                   {"state_s", 0.5},
                                   {"batches", 11},
                                   {"tokens", 88},
                                   {"cost",
                                    {{"fixed_ms", 0.0},
                                     {"per_token_ms", 0.0},
                                     {"per_kctx_ms", 0.0},
                                     {"per_sample_ms", 0.0},
                                     {"rms_ms", 0.0},
                                     {"mean_busy_ms", 0.0},
                                     {"samples", 0}}},
                                   {"handoff_s", 0.25},
                                   {"handoffs", 11}}));
  EXPECT_EQ(st["ring_return"], (json{{"seconds", 0.5}, {"results", 11}}));
  for (const char* key : {"model", "ready", "uptime_s", "engine", "latency", "requests"})
    EXPECT_TRUE(st.contains(key)) << key;
  EXPECT_EQ(st["engine"]["prefix_cache"], (json{{"enabled", true},
                                                {"queries", 200},
                                                {"hits", 150},
                                                {"hit_rate", 0.75},
                                                {"blocks_cached", 7},
                                                {"blocks_evictable", 5},
                                                {"blocks_swa_cached", 6},
                                                {"blocks_swa_evictable", 4},
                                                {"resets", 0}}));
  std::string m = get("/metrics").body;
  for (const char* line : {
           "kvasir_ring_inflight 1\n",  // live: not the capacity (it was always 2)
           "kvasir_ring_inflight_capacity 2\n",
           "kvasir_stage_starved_seconds_total{stage=\"0\",layers=\"0-14\",device=\"cpu\"} 0.25\n",
           "kvasir_stage_blocked_seconds_total{stage=\"1\",layers=\"15-29\",device=\"cpu\"} 0.75\n",
           "kvasir_stage_batches_total{stage=\"0\",layers=\"0-14\",device=\"cpu\"} 10\n",
           "kvasir_stage_tokens_total{stage=\"1\",layers=\"15-29\",device=\"cpu\"} 88\n",
           "kvasir_stage_handoff_seconds_total{stage=\"1\",layers=\"15-29\",device=\"cpu\"} 0.25\n",
           "kvasir_stage_handoffs_total{stage=\"1\",layers=\"15-29\",device=\"cpu\"} 11\n",
           "kvasir_stage_busy_seconds_total{stage=\"1\",member=\"1\",layers=\"15-29\","
           "device=\"cpu\"} 0.5\n",
           "# TYPE kvasir_stage_tokens_total counter\n",
           "kvasir_prefix_cache_queries_total 200\n",
           "kvasir_prefix_cache_hits_total 150\n",
           "# TYPE kvasir_prefix_cache_hits_total counter\n",
           "kvasir_kv_blocks_cached 7\n",
           "kvasir_kv_blocks_evictable 5\n",
           "kvasir_kv_sliding_blocks_total 40\n",
           "kvasir_kv_sliding_blocks_free 30\n",
           "kvasir_kv_sliding_blocks_cached 6\n",
           "kvasir_kv_sliding_blocks_evictable 4\n",
       })
    EXPECT_NE(m.find(line), std::string::npos) << line << " in\n" << m;
}

// A MoE stage's expert load: its counters since start and their imbalance
// in the stats (the dense stage has no `experts`, above), one series per
// expert in /metrics, MoE stages only.
TEST_F(ApiHttpTest, ExpertLoadInStatsAndMetrics) {
  json st = get("/kvasir/v1/stats").j();
  EXPECT_EQ(st["stages"][0]["experts"], (json{{"n_experts", 4},
                                              {"experts_per_slot", 1},
                                              {"routed", {5, 0, 3, 0}},
                                              {"routed_total", 8},
                                              {"imbalance", 2.5}}));
  EXPECT_FALSE(st["stages"][1].contains("experts"));
  std::string m = get("/metrics").body;
  for (const char* line : {
           "# TYPE kvasir_expert_routed_tokens_total counter\n",
           "kvasir_expert_routed_tokens_total{stage=\"0\",expert=\"0\"} 5\n",
           "kvasir_expert_routed_tokens_total{stage=\"0\",expert=\"1\"} 0\n",
           "kvasir_expert_routed_tokens_total{stage=\"0\",expert=\"3\"} 0\n",
       })
    EXPECT_NE(m.find(line), std::string::npos) << line << " in\n" << m;
  EXPECT_EQ(m.find("kvasir_expert_routed_tokens_total{stage=\"1\""), std::string::npos);
  size_t series = 0;
  for (size_t at = m.find("kvasir_expert_routed_tokens_total{"); at != std::string::npos;
       at = m.find("kvasir_expert_routed_tokens_total{", at + 1))
    ++series;
  EXPECT_EQ(series, 4u);
}

// An expert group's leader (docs/expert-groups.md): its experts object
// also splits the routed tokens by process — experts 0-1 (the leader) and
// 2-3 (its member) — with their max / mean.
TEST_F(ApiHttpTest, ExpertLoadPerGroupMember) {
  engine_.ring.stages[0].group_firsts = {0, 2};
  json e = get("/kvasir/v1/stats").j()["stages"][0]["experts"];
  EXPECT_EQ(e["group"], (json{{"firsts", {0, 2}}, {"routed", {5, 3}}, {"imbalance", 1.25}}));
  engine_.ring.stages[0].group_firsts = {0, 1, 3};  // three processes: 5 | 0 + 3 | 0
  e = get("/kvasir/v1/stats").j()["stages"][0]["experts"];
  EXPECT_EQ(e["group"]["routed"], (json{5, 3, 0}));
}

TEST_F(ApiHttpTest, BodyOverLimitIs413) {
  std::string body(10u << 20, 'x');
  Resp r = parse_resp(raw(req("POST", "/v1/completions", body)));
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(get("/health").status, 200);  // still serving
}

TEST_F(ApiHttpTest, HugeHeaderIs431) {
  std::string big = "X-Big: " + std::string(1u << 20, 'a') + "\r\n";
  Resp r = parse_resp(raw(req("GET", "/health", "", big)));
  EXPECT_EQ(r.status, 431);
  EXPECT_EQ(get("/health").status, 200);
}

// HEAD gets the header a GET would (a 405 for a GET-only route: RFC 9110
// allows 405 for HEAD) and no body: a body would be read as the next
// response on the same connection (aiperf probes HEAD /metrics, then GETs).
TEST_F(ApiHttpTest, HeadHasNoBody) {
  asio::io_context io;
  asio::local::stream_protocol::socket s(io);
  s.connect(asio::local::stream_protocol::endpoint(sock_path_));
  asio::write(s, asio::buffer(std::string("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                                          "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")));
  std::string out;
  boost::system::error_code ec;
  char buf[4096];
  for (;;) {
    size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  const size_t end_of_head = out.find("\r\n\r\n");
  ASSERT_NE(end_of_head, std::string::npos) << out;
  EXPECT_EQ(out.rfind("HTTP/1.1 405", 0), 0u) << out;
  EXPECT_EQ(out.compare(end_of_head + 4, 15, "HTTP/1.1 200 OK"), 0) << out;
}

TEST_F(ApiHttpTest, SlowlorisIsCut) {
  asio::io_context io;
  asio::local::stream_protocol::socket s(io);
  s.connect(asio::local::stream_protocol::endpoint(sock_path_));
  auto t0 = std::chrono::steady_clock::now();
  asio::write(s, asio::buffer(std::string("GET /health HTTP/1.1\r\nHost: x\r\n")));
  std::string out;
  boost::system::error_code ec;
  char buf[4096];
  for (int i = 0; i < 40 && !ec; ++i) {  // trickle a header byte every 100 ms
    std::this_thread::sleep_for(100ms);
    asio::write(s, asio::buffer(std::string("X")), ec);
  }
  for (;;) {
    size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 3.0);  // cut near the 0.7 s read timeout, not after 4 s of trickling
  EXPECT_EQ(parse_resp(out).status, 408);
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(ApiHttpTest, DisconnectCancels) {
  engine_.delay_ms = 30;
  {
    asio::io_context io;
    asio::local::stream_protocol::socket s(io);
    s.connect(asio::local::stream_protocol::endpoint(sock_path_));
    asio::write(s, asio::buffer(
                       req("POST", "/v1/completions",
                           R"({"prompt":"x","max_tokens":1000,"stream":true,"ignore_eos":true})")));
    char buf[256];
    s.read_some(asio::buffer(buf));  // the stream has started
  }                                  // closed
  for (int i = 0; i < 100 && engine_.n_cancelled() == 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(engine_.n_cancelled(), 1u);
}

TEST_F(ApiHttpTest, StalledReaderIsDroppedAndCancelled) {
  engine_.delay_ms = 1;
  asio::io_context io;
  asio::local::stream_protocol::socket s(io);
  s.connect(asio::local::stream_protocol::endpoint(sock_path_));
  asio::write(
      s, asio::buffer(req("POST", "/v1/completions",
                          R"({"prompt":"x","max_tokens":4000,"stream":true,"ignore_eos":true})")));
  // Never read: the socket buffers fill, the write stalls, the server gives up.
  for (int i = 0; i < 500 && engine_.n_cancelled() == 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(engine_.n_cancelled(), 1u);
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(ApiHttpTest, KeepAliveServesSeveralRequests) {
  std::string one = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string out = raw(one + one + req("GET", "/health"));
  size_t n = 0;
  for (size_t p = 0; (p = out.find("HTTP/1.1 200", p)) != std::string::npos; ++p) ++n;
  EXPECT_EQ(n, 3u);
}

TEST_F(ApiHttpTest, ApiKeyOnTcpOnly) {
  EXPECT_EQ(parse_resp(raw(req("GET", "/v1/models"), true)).status, 401);
  EXPECT_EQ(
      parse_resp(raw(req("GET", "/v1/models", "", "Authorization: Bearer wrong\r\n"), true)).status,
      401);
  EXPECT_EQ(parse_resp(raw(req("GET", "/v1/models", "", "Authorization: Bearer sekrit\r\n"), true))
                .status,
            200);
  EXPECT_EQ(parse_resp(raw(req("GET", "/health"), true)).status, 200);
  EXPECT_EQ(get("/v1/models").status, 200);  // the Unix socket relies on file permissions
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
}

TEST_F(ApiHttpTest, SocketFileModeAndStaleReplace) {
  auto perms = std::filesystem::status(sock_path_).permissions();
  EXPECT_EQ(perms & std::filesystem::perms::others_all, std::filesystem::perms::none);
  // A live socket is not taken over.
  asio::io_context io2;
  HttpServer other(io2, {}, [](HttpRequest, std::shared_ptr<Responder>) {});
  EXPECT_THROW(other.listen_unix(sock_path_), Error);
}

TEST(DeferredEngine, RefusesUntilAttached) {
  DeferredEngine d;
  EXPECT_FALSE(d.ready());
  Status err;
  EXPECT_EQ(d.submit(GenRequest{}, [&](const TokenEvent& ev) { err = ev.error; }), 0u);
  EXPECT_EQ(err.code(), ErrorCode::kLoading);
  EXPECT_EQ(engine_error(err).status, 503);
  test::FakeEngine fake;
  d.attach(&fake);
  EXPECT_TRUE(d.ready());
  EXPECT_EQ(d.stats().blocks_total, 100);
}

// Before the bridge is up the planned ring is reported (no counters yet).
TEST(DeferredEngine, ReportsThePlannedRingUntilAttached) {
  RingReport planned;
  planned.inflight = 3;
  planned.stages.resize(2);  // "down", no counters
  planned.stages[0].last_layer = 9;
  planned.stages[0].device = "cpu";
  planned.stages[1].index = 1;
  planned.stages[1].first_layer = 10;
  planned.stages[1].last_layer = 21;
  planned.stages[1].device = "cuda:0";
  DeferredEngine d(planned);
  EXPECT_EQ(d.ring_report().inflight, 3);
  ASSERT_EQ(d.ring_report().stages.size(), 2u);
  EXPECT_EQ(d.ring_report().stages[1].device, "cuda:0");
  test::FakeEngine fake;
  fake.ring.inflight = 2;
  d.attach(&fake);
  EXPECT_EQ(d.ring_report().inflight, 2);
  EXPECT_TRUE(d.ring_report().stages.empty());
}
