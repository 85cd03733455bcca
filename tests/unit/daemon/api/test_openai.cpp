// Request parsing and validation (JSON → CompletionRequest or a 400 naming the
// parameter), response shapes, SSE framing and stop-string matching. Pure
// functions: no server, no engine.
#include <gtest/gtest.h>

#include "daemon/api/openai.h"
#include "daemon/api/openai_stop.h"

using namespace kvasir;
using nlohmann::json;

namespace {

// The ApiError a body produces, or kOk if it parses.
ApiError parse_error(const std::string& body, bool chat = false) {
  try {
    parse_completion_request(body, chat);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(ErrorCode::kOk, "");
}

}  // namespace

TEST(OpenAiParse, MinimalCompletion) {
  auto r = parse_completion_request(R"({"prompt":"Hello","max_tokens":5})", false);
  ASSERT_TRUE(r.prompt_text);
  EXPECT_EQ(*r.prompt_text, "Hello");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(r.sampling.temperature, 1.0f);
}

TEST(OpenAiParse, AllFields) {
  auto r = parse_completion_request(
      R"({"model":"m","prompt":[1,2,3],"max_tokens":7,"temperature":0,"top_p":0.9,"top_k":40,
          "min_p":0.05,"seed":-3,"stop":["a","bb"],"stream":true,
          "stream_options":{"include_usage":true},"logprobs":2,"n":1,"echo":false})",
      false);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.sampling.temperature, 0.f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_TRUE(r.sampling.has_seed);
  EXPECT_EQ(r.sampling.seed, uint64_t(-3));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bb"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.sampling.logprobs, 2);
}

TEST(OpenAiParse, StopAsStringAndListOfOnePrompt) {
  auto r = parse_completion_request(R"({"prompt":["x"],"stop":"\n"})", false);
  EXPECT_EQ(*r.prompt_text, "x");
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  auto r2 = parse_completion_request(R"({"prompt":[[5,6]]})", false);
  EXPECT_EQ(r2.prompt_ids, (std::vector<int32_t>{5, 6}));
}

TEST(OpenAiParse, Errors) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt":"x","max_tokens":-1})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":0})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":"5"})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":1.5})", "max_tokens"},
      {R"({"prompt":"x","max_tokens":1e300})", "max_tokens"},
      {R"({"prompt":"x","n":0})", "n"},
      {R"({"prompt":"x","n":17})", "n"},
      {R"({"prompt":"x","n":1.5})", "n"},
      {R"({"prompt":"x","n":99999999999999999999})", "n"},
      {R"({"prompt":"x","n":4,"best_of":3})", "best_of"},
      {R"({"prompt":"x","best_of":17})", "best_of"},
      {R"({"prompt":"x","best_of":2,"stream":true})", "best_of"},
      {R"({"prompt":"x","cache_salt":7})", "cache_salt"},
      {R"({"prompt":"x","cache_salt":""})", "cache_salt"},
      {R"({"prompt":"x","temperature":-1})", "temperature"},
      {R"({"prompt":"x","temperature":"hot"})", "temperature"},
      {R"({"prompt":"x","top_p":0})", "top_p"},
      {R"({"prompt":"x","top_p":1.5})", "top_p"},
      {R"({"prompt":"x","stop":5})", "stop"},
      {R"({"prompt":"x","stop":[""]})", "stop"},
      {R"({"prompt":"x","stream":"yes"})", "stream"},
      {R"({"prompt":"x","stream_options":{"include_usage":true}})", "stream_options"},
      {R"({"prompt":"x","logprobs":50})", "logprobs"},
      {R"({"prompt":"x","seed":"abc"})", "seed"},
      {R"({"prompt":""})", "prompt"},
      {R"({"prompt":[]})", "prompt"},
      {R"({"prompt":["a","b"]})", "prompt"},
      {R"({"prompt":[1,-2]})", "prompt"},
      {R"({"prompt":[1,"a"]})", "prompt"},
      {R"({"prompt":[1,4294967296]})", "prompt"},
      {R"({"prompt":{}})", "prompt"},
      {R"({"max_tokens":3})", "prompt"},
      {R"({"prompt":"x","model":7})", "model"},
  };
  for (const auto& c : cases) {
    ApiError e = parse_error(c.body);
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << c.body;
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " → " << e.what();
  }
}

TEST(OpenAiParse, ChoicesBestOfAndCacheSalt) {
  auto r = parse_completion_request(R"({"prompt":"x"})", false);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.best_of, 0);
  EXPECT_EQ(r.generated(), 1);
  EXPECT_TRUE(r.cache_salt.empty());
  r = parse_completion_request(R"({"prompt":"x","n":4,"seed":7,"stream":true})", false);
  EXPECT_EQ(r.n, 4);
  EXPECT_EQ(r.generated(), 4);
  r = parse_completion_request(R"({"prompt":"x","n":2,"best_of":5,"cache_salt":"tenant-a"})",
                               false);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.best_of, 5);
  EXPECT_EQ(r.generated(), 5);
  EXPECT_EQ(r.cache_salt, "tenant-a");
  auto c = parse_completion_request(
      R"({"messages":[{"role":"user","content":"hi"}],"n":16,"cache_salt":"s"})", true);
  EXPECT_EQ(c.n, 16);
  EXPECT_EQ(c.cache_salt, "s");
  ApiError e = parse_error(std::string(R"({"prompt":"x","cache_salt":")") +
                           std::string(kMaxCacheSalt + 1, 'a') + "\"}");
  EXPECT_EQ(e.param, "cache_salt");
}

TEST(OpenAiParse, MalformedJson) {
  for (const char* body : {"", "{", "[1,2]", "\"x\"", "{\"prompt\":\"x\",}", "null"}) {
    ApiError e = parse_error(body);
    EXPECT_EQ(e.status, 400) << body;
  }
}

TEST(OpenAiParse, Chat) {
  auto r = parse_completion_request(
      R"({"messages":[{"role":"system","content":"be brief"},
                      {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
          "logprobs":true,"top_logprobs":3,"max_completion_tokens":9})",
      true);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "hi there");
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(parse_error(R"({"messages":[]})", true).param, "messages");
  EXPECT_EQ(parse_error(R"({"messages":[{"role":"wizard","content":"x"}]})", true).param,
            "messages[0].role");
  EXPECT_EQ(parse_error(R"({"messages":[{"role":"user","content":5}]})", true).param,
            "messages[0].content");
  EXPECT_EQ(
      parse_error(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", true).param,
      "top_logprobs");
}

TEST(OpenAiParse, TokenizeAndDetokenize) {
  auto t = parse_tokenize_request(R"({"prompt":"abc","add_special_tokens":false})");
  EXPECT_EQ(*t.prompt, "abc");
  EXPECT_FALSE(t.add_special_tokens);
  EXPECT_EQ(parse_detokenize_request(R"({"tokens":[1,2]})"), (std::vector<int32_t>{1, 2}));
  EXPECT_THROW(parse_detokenize_request(R"({"tokens":"x"})"), ApiError);
  EXPECT_THROW(parse_tokenize_request(R"({})"), ApiError);
}

TEST(OpenAiShape, ErrorBody) {
  json j = error_body(ApiError(ErrorCode::kInvalidArgument, "n must be 1", "n"));
  EXPECT_EQ(j["error"]["message"], "n must be 1");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_TRUE(j["error"]["code"].is_null());
}

TEST(OpenAiShape, Responses) {
  ResponseMeta m{"cmpl-1", "smol", 42};
  json r = completion_response(m, "hi", FinishReason::kLength, {3, 2}, nullptr);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "hi");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
  json c = chat_chunk(m, std::string("x"), true, FinishReason::kNone, nullptr);
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  json u = usage_chunk(m, true, {1, 1});
  EXPECT_TRUE(u["choices"].empty());
  json lp = completion_logprobs_json({{"a", -0.5f, {{"a", -0.5f}}}, {"bc", -1.f, {}}}, 10);
  EXPECT_EQ(lp["text_offset"], json::array({10, 11}));
  // The OpenAI field for prefix caching, always present.
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  json cached = usage_json(Usage{40, 2, 32});
  EXPECT_EQ(cached["prompt_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(cached["total_tokens"], 42);
}

TEST(OpenAiShape, SeveralChoices) {
  ResponseMeta m{"cmpl-1", "smol", 42};
  json r = completion_response(m,
                               {ChoiceOut{0, "a", FinishReason::kLength, nullptr},
                                ChoiceOut{1, "b", FinishReason::kStop, nullptr}},
                               {3, 4, 0});
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][1]["index"], 1);
  EXPECT_EQ(r["choices"][1]["text"], "b");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 3);  // once, whatever n
  json c = chat_response(m,
                         {ChoiceOut{0, "x", FinishReason::kLength, nullptr},
                          ChoiceOut{1, "y", FinishReason::kLength, nullptr}},
                         {3, 2, 0});
  EXPECT_EQ(c["choices"][1]["message"]["content"], "y");
  EXPECT_EQ(completion_chunk(m, "t", FinishReason::kNone, nullptr, 3)["choices"][0]["index"], 3);
  EXPECT_EQ(chat_chunk(m, std::string("t"), false, FinishReason::kNone, nullptr,
                       2)["choices"][0]["index"],
            2);
}

TEST(Sse, FramingRoundTrip) {
  json a = {{"text", "line1\nline2"}};
  std::string wire = sse_event(a) + sse_event({{"x", 1}}) + sse_done();
  EXPECT_EQ(wire.rfind("data: ", 0), 0u);
  EXPECT_EQ(std::count(wire.begin(), wire.end(), '\n'), 6);  // newline inside is escaped
  SseParser p;
  std::vector<std::string> got;
  for (char c : wire) {  // byte by byte: events may split anywhere
    auto ev = p.feed(std::string_view(&c, 1));
    got.insert(got.end(), ev.begin(), ev.end());
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(json::parse(got[0]), a);
  EXPECT_EQ(got[2], "[DONE]");
  EXPECT_EQ(p.feed("data: a\r\ndata: b\r\n\r\n"), std::vector<std::string>{"a\nb"});
}

TEST(Stop, HoldsBackPrefixesAndTruncates) {
  StopMatcher s({"STOP", "\n\n"});
  std::string out;
  out += s.push("Hello S");
  EXPECT_EQ(out, "Hello ");  // "S" could start STOP
  out += s.push("T");
  EXPECT_EQ(out, "Hello ");
  out += s.push("X and\n");
  EXPECT_EQ(out, "Hello STX and");
  out += s.push("\nmore");
  EXPECT_TRUE(s.matched());
  EXPECT_EQ(out, "Hello STX and");
  EXPECT_EQ(s.push("ignored"), "");
  EXPECT_EQ(s.flush(), "");
}

TEST(Stop, MatchInsideOnePieceAndFlush) {
  StopMatcher s({"world"});
  EXPECT_EQ(s.push("hello world again"), "hello ");
  EXPECT_EQ(s.matched_stop(), "world");
  StopMatcher t({"xyz"});
  EXPECT_EQ(t.push("abcx"), "abc");
  EXPECT_EQ(t.flush(), "x");
  EXPECT_FALSE(t.matched());
  StopMatcher none;
  EXPECT_EQ(none.push("abc"), "abc");
}

TEST(OpenAiParse, DeepNestingIsRefusedNotACrash) {
  std::string deep =
      R"({"prompt":"x","stop":)" + std::string(4u << 20, '[') + std::string(4u << 20, ']') + "}";
  ApiError e = parse_error(deep);
  EXPECT_EQ(e.status, 400);
  std::string open_only(1u << 20, '[');
  EXPECT_EQ(parse_error(open_only).status, 400);
  // Brackets inside strings are text, not nesting.
  std::string text = R"({"prompt":")" + std::string(100, '[') + R"(\"{"})";
  EXPECT_EQ(parse_error(text).code(), ErrorCode::kOk) << parse_error(text).what();
}
