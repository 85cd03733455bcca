// Request parsing and validation (JSON → CompletionRequest or a 400 naming the
// parameter), response shapes, SSE framing and stop-string matching. Pure
// functions: no server, no engine.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/sse.h"
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

// A body nested too deep is refused before parsing, naming the top-level
// field it is in; a schema 13 objects deep (about 40 levels) is not.
TEST(OpenAiParse, NestingLimitNamesTheField) {
  std::string deep = R"({"prompt":"x","stop":["{"],"response_format":)";
  for (int i = 0; i < 130; ++i) deep += "[";
  for (int i = 0; i < 130; ++i) deep += "]";
  deep += "}";
  const ApiError e = parse_error(deep);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format") << e.what();
  std::string schema = R"({"type":"object","properties":{"a":)";
  std::string tail = "}}";
  for (int i = 0; i < 12; ++i) {
    schema += R"({"type":"object","properties":{"a":)";
    tail += "}}";
  }
  schema += R"({"type":"string"})" + tail;
  auto r = parse_completion_request(
      R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"d","schema":)" +
          schema + "}}}",
      false);
  ASSERT_TRUE(r.constraint.has_value());
}

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

// The model's defaults (a folder's generation_config.json) fill exactly the
// sampling fields a request omits; what it sends wins.
TEST(OpenAiParse, ModelSamplingDefaultsFillOmittedFields) {
  ParseLimits lim;
  lim.sampling_defaults.temperature = 0.6f;
  lim.sampling_defaults.top_p = 0.9f;
  lim.sampling_defaults.top_k = 20;
  lim.sampling_defaults.min_p = 0.05f;
  lim.sampling_defaults.repetition_penalty = 1.1f;
  lim.sampling_defaults.presence_penalty = 1.5f;  // not a generation_config key: unread
  for (bool chat : {false, true}) {
    const char* body =
        chat ? R"({"messages":[{"role":"user","content":"x"}]})" : R"({"prompt":"x"})";
    const SamplingParams s = parse_completion_request(body, chat, lim).sampling;
    EXPECT_FLOAT_EQ(s.temperature, 0.6f);
    EXPECT_FLOAT_EQ(s.top_p, 0.9f);
    EXPECT_EQ(s.top_k, 20);
    EXPECT_FLOAT_EQ(s.min_p, 0.05f);
    EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
    EXPECT_FLOAT_EQ(s.presence_penalty, 0.f);
  }
  const SamplingParams s =
      parse_completion_request(
          R"({"prompt":"x","temperature":0,"top_p":1,"top_k":-1,"min_p":0,"repetition_penalty":1})",
          false, lim)
          .sampling;
  EXPECT_FLOAT_EQ(s.temperature, 0.f);
  EXPECT_FLOAT_EQ(s.top_p, 1.f);
  EXPECT_EQ(s.top_k, 0);
  EXPECT_FLOAT_EQ(s.min_p, 0.f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.f);
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
  ASSERT_EQ(r.chat_turns.messages.size(), 2u);
  EXPECT_EQ(r.chat_turns.messages[1]["content"][1]["text"],
            "there");  // parts kept for the template
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.max_tokens, 9);
  // Both given: max_completion_tokens wins (vLLM's precedence).
  EXPECT_EQ(parse_completion_request(
                R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":7})",
                true)
                .max_tokens,
            7);
  EXPECT_EQ(parse_error(R"({"messages":[]})", true).param, "messages");
  EXPECT_EQ(parse_error(R"({"messages":[{"role":"wizard","content":"x"}]})", true).param,
            "messages[0].role");
  EXPECT_EQ(parse_error(R"({"messages":[{"role":"user","content":5}]})", true).param,
            "messages[0].content");
  EXPECT_EQ(
      parse_error(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", true).param,
      "top_logprobs");
}

// top_logprobs / logprobs up to 20 (vLLM's default --max-logprobs); more
// is a 400 naming the field, never a silent clamp.
TEST(OpenAiParse, LogprobsUpToTwenty) {
  EXPECT_EQ(
      parse_completion_request(
          R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":20})", true)
          .sampling.logprobs,
      20);
  EXPECT_EQ(parse_completion_request(R"({"prompt":"x","logprobs":20})", false).logprobs, 20);
  const ApiError chat = parse_error(
      R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})", true);
  EXPECT_EQ(chat.status, 400);
  EXPECT_EQ(chat.param, "top_logprobs");
  const ApiError comp = parse_error(R"({"prompt":"x","logprobs":21})");
  EXPECT_EQ(comp.status, 400);
  EXPECT_EQ(comp.param, "logprobs");
}

TEST(OpenAiParse, LogitBias) {
  auto r =
      parse_completion_request(R"({"prompt":"x","logit_bias":{"9":-100,"3":2.5,"0":100}})", false);
  ASSERT_EQ(r.logit_bias.size(), 3u);  // sorted by id
  EXPECT_EQ(r.logit_bias[0].token, 0);
  EXPECT_EQ(r.logit_bias[0].bias, 100.0f);
  EXPECT_EQ(r.logit_bias[1].token, 3);
  EXPECT_EQ(r.logit_bias[1].bias, 2.5f);
  EXPECT_EQ(r.logit_bias[2].token, 9);
  EXPECT_EQ(r.logit_bias[2].bias, -100.0f);
  EXPECT_TRUE(
      parse_completion_request(R"({"prompt":"x","logit_bias":null})", false).logit_bias.empty());
  EXPECT_TRUE(
      parse_completion_request(R"({"prompt":"x","logit_bias":{}})", false).logit_bias.empty());
  std::string many = R"({"prompt":"x","logit_bias":{)";
  for (int i = 0; i <= kMaxLogitBias; ++i) many += (i ? "," : "") + fmt::format(R"("{}":1)", i);
  many += "}}";
  for (const std::string& bad :
       {std::string(R"({"prompt":"x","logit_bias":[1,2]})"),
        std::string(R"({"prompt":"x","logit_bias":{"abc":1}})"),
        std::string(R"({"prompt":"x","logit_bias":{"-1":1}})"),
        std::string(R"({"prompt":"x","logit_bias":{"1.5":1}})"),
        std::string(R"({"prompt":"x","logit_bias":{"":1}})"),
        std::string(R"({"prompt":"x","logit_bias":{"99999999999":1}})"),
        std::string(R"({"prompt":"x","logit_bias":{"5":101}})"),
        std::string(R"({"prompt":"x","logit_bias":{"5":-100.5}})"),
        std::string(R"({"prompt":"x","logit_bias":{"5":"1"}})"),
        std::string(R"({"prompt":"x","logit_bias":{"5":null}})"),
        std::string(R"({"prompt":"x","logit_bias":{"5":1,"05":2}})"), many}) {
    const ApiError e = parse_error(bad);
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "logit_bias") << bad << " → " << e.what();
  }
  many.replace(many.find(R"("0":1,)"), 6, "");  // exactly kMaxLogitBias
  EXPECT_EQ(parse_completion_request(many, false).logit_bias.size(), size_t(kMaxLogitBias));
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
  // Offsets count characters, not UTF-8 bytes (as OpenAI and vLLM): "é" is
  // two bytes and one character; a token holding half a character counts
  // the character it starts.
  lp = completion_logprobs_json(
      {{"\xc3\xa9", -0.1f, {}}, {"\xe2\x82", -0.1f, {}}, {"\xac!", -0.1f, {}}, {"x", -0.1f, {}}}, 0);
  EXPECT_EQ(lp["text_offset"], json::array({0, 1, 2, 3}));
  EXPECT_EQ(utf8_chars("na\xc3\xafve \xe2\x82\xac"), 7u);
  // The OpenAI field for prefix caching, always present.
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  json cached = usage_json(Usage{40, 2, 32});
  EXPECT_EQ(cached["prompt_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(cached["total_tokens"], 42);
}

// Prompt logprobs' shapes: echo's first token null in token_logprobs and
// top_logprobs; prompt_logprobs as vLLM's list (null, then by token id),
// on the choice for completions and beside the choices for chat.
TEST(OpenAiShape, PromptLogprobs) {
  TokenLogprob first{"The", 0.f, {}};
  first.none = true;
  json lp = completion_logprobs_json({first, {" cat", -2.f, {{" dog", -1.f}}}}, 0);
  EXPECT_EQ(lp["token_logprobs"], json::parse("[null, -2.0]"));
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1], json::parse(R"({" dog": -1.0})"));
  EXPECT_EQ(lp["text_offset"], json::array({0, 3}));
  PromptLogprobOut p;
  p.present = true;
  p.entries = {{7, " cat", -2.f, 3}, {9, " dog", -1.f, 1}};
  const json pl = prompt_logprobs_json({PromptLogprobOut{}, p});
  EXPECT_EQ(pl, json::parse(R"([null, {"7": {"logprob": -2.0, "rank": 3, "decoded_token": " cat"},
                                        "9": {"logprob": -1.0, "rank": 1, "decoded_token": " dog"}}])"));
  ResponseMeta m{"cmpl-1", "smol", 42};
  ChoiceOut c;
  c.text = "a";
  c.finish = FinishReason::kLength;
  EXPECT_FALSE(completion_response(m, {c}, {1, 1, 0})["choices"][0].contains("prompt_logprobs"));
  EXPECT_FALSE(chat_response(m, {c}, {1, 1, 0}).contains("prompt_logprobs"));
  c.prompt_logprobs = pl;
  EXPECT_EQ(completion_response(m, {c}, {1, 1, 0})["choices"][0]["prompt_logprobs"], pl);
  EXPECT_EQ(chat_response(m, {c}, {1, 1, 0})["prompt_logprobs"], pl);
}

ChoiceOut choice(int32_t index, const std::string& text, FinishReason f) {
  ChoiceOut c;
  c.index = index;
  c.text = text;
  c.finish = f;
  return c;
}

TEST(OpenAiShape, SeveralChoices) {
  ResponseMeta m{"cmpl-1", "smol", 42};
  json r = completion_response(
      m, {choice(0, "a", FinishReason::kLength), choice(1, "b", FinishReason::kStop)}, {3, 4, 0});
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][1]["index"], 1);
  EXPECT_EQ(r["choices"][1]["text"], "b");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 3);  // once, whatever n
  json c = chat_response(
      m, {choice(0, "x", FinishReason::kLength), choice(1, "y", FinishReason::kLength)}, {3, 2, 0});
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
    for (auto& ev : p.feed(std::string_view(&c, 1))) got.push_back(std::move(ev.data));
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(json::parse(got[0]), a);
  EXPECT_EQ(got[2], "[DONE]");
  const auto crlf = p.feed("data: a\r\ndata: b\r\n\r\n");
  ASSERT_EQ(crlf.size(), 1u);
  EXPECT_EQ(crlf[0].data, "a\nb");
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

// ---- structured outputs and tools: the fields, and every refusal ----

namespace {
std::string chat_body(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"x"}])" + extra + "}";
}
const char* kTools = R"(,"tools":[{"type":"function","function":{"name":"get_weather",
  "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
  {"type":"function","function":{"name":"now"}}])";
}  // namespace

TEST(OpenAiStructured, EveryWayToAskForAConstraint) {
  using K = OutputConstraint::Kind;
  struct Case {
    std::string body;
    K kind;
    std::string param, text;
  };
  for (const Case& c : std::vector<Case>{
           {R"(,"response_format":{"type":"json_object"})", K::kJsonObject, "response_format", ""},
           {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,
              "schema":{"type":"object","properties":{"b":{},"a":{}}}}})",
            K::kJsonSchema, "response_format.json_schema.schema",
            R"({"type":"object","properties":{"b":{},"a":{}}})"},
           {R"(,"structured_outputs":{"json":"{\"type\":\"integer\"}"})", K::kJsonSchema,
            "structured_outputs.json", R"({"type":"integer"})"},
           {R"(,"structured_outputs":{"regex":"[a-z]+","disable_fallback":true})", K::kRegex,
            "structured_outputs.regex", "[a-z]+"},
           {R"(,"structured_outputs":{"grammar":"root ::= \"a\""})", K::kEbnf,
            "structured_outputs.grammar", "root ::= \"a\""},
           {R"(,"structured_outputs":{"json_object":true})", K::kJsonObject,
            "structured_outputs.json_object", ""},
           {R"(,"structured_outputs":{"structural_tag":{"type":"structural_tag"}})",
            K::kStructuralTag, "structured_outputs.structural_tag", R"({"type":"structural_tag"})"},
           {R"(,"guided_json":{"type":"string"})", K::kJsonSchema, "guided_json",
            R"({"type":"string"})"},
           {R"(,"guided_regex":"a|b")", K::kRegex, "guided_regex", "a|b"},
           {R"(,"guided_grammar":"root ::= \"x\"")", K::kEbnf, "guided_grammar", "root ::= \"x\""},
       }) {
    for (bool chat : {false, true}) {
      const std::string body = chat ? chat_body(c.body) : R"({"prompt":"x")" + c.body + "}";
      auto r = parse_completion_request(body, chat);
      ASSERT_TRUE(r.constraint) << body;
      EXPECT_EQ(r.constraint->kind, c.kind) << body;
      EXPECT_EQ(r.constraint->param, c.param);
      EXPECT_EQ(r.constraint->text, c.text);  // key order kept
    }
  }
  auto r =
      parse_completion_request(chat_body(R"(,"structured_outputs":{"choice":["a","b c"]})"), true);
  EXPECT_EQ(r.constraint->choices, (std::vector<std::string>{"a", "b c"}));
  r = parse_completion_request(chat_body(R"(,"guided_choice":["y","n"])"), true);
  EXPECT_EQ(r.constraint->param, "guided_choice");
  EXPECT_FALSE(parse_completion_request(chat_body(R"(,"response_format":{"type":"text"})"), true)
                   .constraint);
}

TEST(OpenAiStructured, RefusalsNameTheField) {
  struct Case {
    std::string extra, param;
  };
  for (
      const Case& c : std::vector<Case>{
          {R"(,"response_format":"json")", "response_format"},
          {R"(,"response_format":{})", "response_format.type"},
          {R"(,"response_format":{"type":"xml"})", "response_format.type"},
          {R"(,"response_format":{"type":"json_schema"})", "response_format.json_schema"},
          {R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{}}})",
           "response_format.json_schema.name"},
          {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}})",
           "response_format.json_schema.schema"},
          {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":5}})",
           "response_format.json_schema.schema"},
          {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{},"strict":1}})",
           "response_format.json_schema.strict"},
          {R"(,"structured_outputs":5)", "structured_outputs"},
          {R"(,"structured_outputs":{})", "structured_outputs"},
          {R"(,"structured_outputs":{"regex":"a","choice":["a"]})", "structured_outputs.choice"},
          {R"(,"structured_outputs":{"regex":""})", "structured_outputs.regex"},
          {R"(,"structured_outputs":{"choice":[]})", "structured_outputs.choice"},
          {R"(,"structured_outputs":{"choice":["a",1]})", "structured_outputs.choice"},
          {R"(,"structured_outputs":{"json":"{not json"})", "structured_outputs.json"},
          {R"(,"structured_outputs":{"json":"[1]"})", "structured_outputs.json"},
          {R"(,"structured_outputs":{"whitespace_pattern":" "})",
           "structured_outputs.whitespace_pattern"},
          {R"(,"structured_outputs":{"json_object":true,"disable_any_whitespace":true})",
           "structured_outputs.disable_any_whitespace"},
          {R"(,"structured_outputs":{"nope":1})", "structured_outputs.nope"},
          {R"(,"response_format":{"type":"json_object"},"structured_outputs":{"regex":"a"})",
           "structured_outputs"},
          {R"(,"response_format":{"type":"json_object"},"guided_regex":"a")", "guided_regex"},
          {R"(,"guided_regex":"a","guided_choice":["a"])", "guided_choice"},
          {R"(,"guided_whitespace_pattern":" ")", "guided_whitespace_pattern"},
          {R"(,"functions":[])", "functions"},
          {R"(,"modalities":["text","audio"])", "modalities"},
          // vLLM extensions Kvasir does not implement: never silently ignored.
          {R"(,"continue_final_message":true)", "continue_final_message"},
          {R"(,"echo":true)", "echo"},
          {R"(,"stream":true,"stream_options":{"continuous_usage_stats":true})",
           "stream_options.continuous_usage_stats"},
      }) {
    const ApiError e = parse_error(chat_body(c.extra), true);
    EXPECT_EQ(e.status, 400) << c.extra;
    EXPECT_EQ(e.param, c.param) << c.extra << " → " << e.what();
  }
  EXPECT_EQ(parse_error(R"({"prompt":"x","tools":[]})").param, "tools");
  EXPECT_EQ(parse_error(R"({"prompt":"x","suffix":"y"})").param, "suffix");
  EXPECT_EQ(parse_error(chat_body(R"(,"logit_bias":{})"), true).code(), ErrorCode::kOk);  // neutral
  EXPECT_EQ(parse_error(chat_body(R"(,"continue_final_message":false,"echo":false,"prompt_logprobs":null)"), true)
                .code(),
            ErrorCode::kOk);
}

// Prompt logprobs (docs/api.md): prompt_logprobs on either route (capped
// like logprobs, not with stream), echo with logprobs asking the engine
// for them too, and max_tokens 0 only with echo (scoring: one token
// generated and left out).
TEST(OpenAiParse, PromptLogprobsAndEchoScoring) {
  auto r = parse_completion_request(R"({"prompt":"x","prompt_logprobs":0})", false);
  EXPECT_EQ(r.prompt_logprobs, 0);
  EXPECT_EQ(r.engine_prompt_logprobs(), 0);
  r = parse_completion_request(chat_body(R"(,"prompt_logprobs":20)"), true);
  EXPECT_EQ(r.prompt_logprobs, kMaxLogprobs);
  r = parse_completion_request(R"({"prompt":"x","prompt_logprobs":null})", false);
  EXPECT_EQ(r.engine_prompt_logprobs(), -1);
  r = parse_completion_request(R"({"prompt":"x","echo":true,"logprobs":3})", false);
  EXPECT_EQ(r.prompt_logprobs, -1);
  EXPECT_EQ(r.engine_prompt_logprobs(), 3);
  EXPECT_FALSE(r.echo_only);
  r = parse_completion_request(R"({"prompt":"x","echo":true,"max_tokens":0,"logprobs":1})", false);
  EXPECT_TRUE(r.echo_only);
  EXPECT_EQ(r.max_tokens, 1);
  EXPECT_EQ(r.engine_prompt_logprobs(), 1);
  EXPECT_EQ(parse_error(R"({"prompt":"x","max_tokens":0,"echo":false})").param, "max_tokens");
  EXPECT_EQ(parse_error(chat_body(R"(,"max_tokens":0)"), true).param, "max_tokens");
  EXPECT_EQ(parse_error(R"({"prompt":"x","prompt_logprobs":21})").param, "prompt_logprobs");
  EXPECT_EQ(parse_error(R"({"prompt":"x","prompt_logprobs":-1})").param, "prompt_logprobs");
  EXPECT_EQ(parse_error(R"({"prompt":"x","prompt_logprobs":1,"stream":true})").param,
            "prompt_logprobs");
}

TEST(OpenAiChat, ToolsAndToolChoice) {
  auto r = parse_completion_request(chat_body(kTools), true);
  EXPECT_EQ(r.tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(r.chat_turns.tools.size(), 2u);
  EXPECT_TRUE(r.parallel_tool_calls);
  r = parse_completion_request(
      chat_body(std::string(kTools) + R"(,"tool_choice":"required","parallel_tool_calls":false)"),
      true);
  EXPECT_EQ(r.tool_choice, ToolChoice::kRequired);
  EXPECT_FALSE(r.parallel_tool_calls);
  r = parse_completion_request(
      chat_body(std::string(kTools) +
                R"(,"tool_choice":{"type":"function","function":{"name":"now"}})"),
      true);
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tool_name, "now");
  r = parse_completion_request(chat_body(std::string(kTools) + R"(,"tool_choice":"none")"), true);
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
  EXPECT_EQ(parse_completion_request(chat_body(""), true).tool_choice, ToolChoice::kNone);
  // Key order of the tools is the client's (a template's tojson shows it).
  EXPECT_EQ(r.chat_turns.tools[0]["function"].begin().key(), "name");
  EXPECT_EQ(r.chat_turns.tools[0].begin().key(), "type");
}

TEST(OpenAiChat, Refusals) {
  struct Case {
    std::string body, param;
  };
  const std::string t = kTools;
  for (
      const Case& c : std::vector<Case>{
          {chat_body(R"(,"tools":{})"), "tools"},
          {chat_body(R"(,"tools":[{"type":"function","function":{}}])"), "tools[0].function.name"},
          {chat_body(R"(,"tools":[{"type":"function","function":{"name":""}}])"),
           "tools[0].function.name"},
          {chat_body(R"(,"tools":[{"type":"function","function":{"name":"a b"}}])"),
           "tools[0].function.name"},
          {chat_body(R"(,"tools":[{"type":"retrieval"}])"), "tools[0].type"},
          {chat_body(R"(,"tools":[{"type":"function"}])"), "tools[0].function"},
          {chat_body(R"(,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}])"),
           "tools[0].function.parameters"},
          {chat_body(
               R"(,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])"),
           "tools[1].function.name"},
          {chat_body(R"(,"tool_choice":"required")"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":"sometimes")"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})"),
           "tool_choice"},
          {chat_body(t + R"(,"tool_choice":{"type":"function"})"), "tool_choice"},
          // A type of the wrong JSON type, or a tool_choice of one, is the
          // client's mistake (it was a 500 "type must be string").
          {chat_body(t + R"(,"tool_choice":{"type":null})"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":{"type":5,"function":{"name":"now"}})"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":{"type":true})"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":{"type":[]})"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":{})"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":5)"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":true)"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":[])"), "tool_choice"},
          {chat_body(t + R"(,"tool_choice":"required","response_format":{"type":"json_object"})"),
           "tool_choice"},
          {chat_body(t + R"(,"parallel_tool_calls":"yes")"), "parallel_tool_calls"},
          {chat_body(R"(,"chat_template_kwargs":[])"), "chat_template_kwargs"},
          {chat_body(R"(,"chat_template_kwargs":{"tools":[]})"), "chat_template_kwargs"},
          {chat_body(R"(,"add_generation_prompt":1)"), "add_generation_prompt"},
          {R"({"messages":[{"role":"tool","content":"x"}]})", "messages[0].tool_call_id"},
          {R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})",
           "messages[0].tool_calls"},
          {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{}}]}]})",
           "messages[0].tool_calls[0].function.name"},
          {R"({"messages":[{"role":"assistant","tool_calls":[{"type":"x","function":{"name":"f"}}]}]})",
           "messages[0].tool_calls[0].type"},
          {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":5}}]}]})",
           "messages[0].tool_calls[0].function.arguments"},
          {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
           "messages[0].content"},
          {R"({"messages":[{"role":"user","content":"x","name":5}]})", "messages[0].name"},
      }) {
    const ApiError e = parse_error(c.body, true);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " → " << e.what();
  }
  // A whole conversation with a call and its result parses, order kept.
  auto r = parse_completion_request(
      R"({"messages":[{"role":"user","content":"w?"},
          {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
            "function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
          {"role":"tool","tool_call_id":"c1","name":"get_weather","content":"cold"}],
          "chat_template_kwargs":{"enable_thinking":false},"add_generation_prompt":false})",
      true);
  EXPECT_EQ(r.chat_turns.messages.size(), 3u);
  EXPECT_EQ(r.chat_turns.kwargs["enable_thinking"], false);
  EXPECT_FALSE(r.chat_turns.add_generation_prompt);
}

TEST(OpenAiShapes, ToolCallsWholeAndStreamed) {
  ResponseMeta m{"chatcmpl-1", "m", 5};
  json whole = chat_response(m, "", FinishReason::kStop, {3, 4}, nullptr,
                             {{"call_1", "f", "{\"a\": 1}"}}, true);
  const json& msg = whole["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null());
  EXPECT_EQ(msg["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(
      chat_response(m, "x", FinishReason::kStop, {}, nullptr)["choices"][0]["message"].contains(
          "tool_calls"),
      false);
  json chunk = chat_tool_chunk(m, {{0, true, "call_1", "f", ""}, {0, false, "", "", "{\"a\""}});
  const json& calls = chunk["choices"][0]["delta"]["tool_calls"];
  EXPECT_EQ(calls[0]["function"]["name"], "f");
  EXPECT_EQ(calls[0]["id"], "call_1");
  EXPECT_FALSE(calls[1].contains("id"));
  EXPECT_EQ(calls[1]["function"]["arguments"], "{\"a\"");
  EXPECT_EQ(chat_chunk(m, std::nullopt, false, FinishReason::kStop, nullptr, 0,
                       true)["choices"][0]["finish_reason"],
            "tool_calls");
}
