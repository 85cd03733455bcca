// daemon/api/openai.h — the OpenAI request and response shapes, as pure functions.
//
// Parsing turns an untrusted JSON body into a CompletionRequest or throws
// ApiError (daemon/api/errors.h: an ErrorCode, naming the parameter).
// Shaping builds the JSON of responses and stream chunks (error bodies:
// errors.h). Nothing here does I/O, tokenizes, or knows about HTTP
// transport: it is tested alone (tests/unit/daemon/api/test_openai.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/api/errors.h"
#include "daemon/engine/engine.h"
#include "ipc/sampling.h"

namespace kvasir {

// A chat conversation as the model's chat template takes it (the OpenAI
// shape, key order kept: a template's tojson shows it): messages
// (system/user/assistant/tool; content a string, null or text parts;
// tool_calls on assistant turns; tool_call_id and name on tool turns),
// tools (null or [{"type": "function", "function": {...}}]),
// chat_template_kwargs, add_generation_prompt.
struct ChatTurns {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null or an array
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
};

// What the output must match (docs/structured-outputs.md), as the request
// asked for it, with the field it came from (named in a 400).
struct OutputConstraint {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kChoice, kEbnf, kStructuralTag };
  Kind kind = Kind::kJsonObject;
  std::string text;  // the schema (JSON), regex, grammar or structural tag
  std::vector<std::string> choices;
  std::string param;  // "response_format", "structured_outputs.regex", "tools", ...
};

// tool_choice: "none" (tools shown, output not parsed for calls), "auto"
// (the model decides; calls parsed), "required" (at least one call,
// decoding constrained), a named function (exactly one call of it).
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ParseLimits {
  int32_t max_tokens_cap = 1 << 20;  // largest max_tokens accepted
  int32_t default_max_tokens = 16;  // completions; chat's is max_tokens_cap (the context)
  size_t max_stop = 16;          // stop strings per request
  size_t max_stop_bytes = 1024;  // per stop string
  size_t max_prompt_ids = 1 << 20;
  size_t max_messages = 4096;
  size_t max_tools = 128;
  // Where a request omits temperature, top_p, top_k, min_p or
  // repetition_penalty, these values (the model's defaults); the other
  // fields of it are not read.
  SamplingParams sampling_defaults;
};

struct CompletionRequest {
  bool chat = false;
  std::string model;  // as sent ("" if absent)
  // Completions: either text or ids. Chat: the conversation.
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  ChatTurns chat_turns;
  ToolChoice tool_choice = ToolChoice::kNone;  // kAuto when tools are given
  std::string tool_name;                       // kNamed: the function
  bool parallel_tool_calls = true;
  // response_format, structured_outputs or guided_* (at most one of them).
  std::optional<OutputConstraint> constraint;
  int32_t max_tokens = 16;
  bool max_tokens_given = false;
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // Kvasir's extension: false keeps this request's rows free of drafts
  // (docs/speculative.md); the output is the same either way.
  bool speculative = true;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions only
  // echo with max_tokens 0 (scoring, as lm-eval sends it): the prompt and,
  // with logprobs, its logprobs; no new token (max_tokens is 1 then, and
  // the one generated is left out). finish_reason "length".
  bool echo_only = false;
  // prompt_logprobs (vLLM): -1 none; else the alternatives per prompt
  // position (0..kMaxLogprobs). Not with stream.
  int prompt_logprobs = -1;
  bool skip_special_tokens = true;
  int logprobs = -1;  // -1: none; otherwise number of top alternatives (0..kMaxLogprobs)
  // logit_bias, sorted by token id, no id twice, biases in [-100, 100]
  // (the ids' vocabulary bound is checked once the model is known).
  std::vector<LogitBias> logit_bias;
  // Parallel sampling: n choices (1..kMaxChoices), choice i sampled with
  // seed + i. best_of (0: not given; else n..kMaxChoices, not with stream):
  // that many are generated and the n of highest cumulative logprob returned.
  int32_t n = 1;
  int32_t best_of = 0;
  // Prefix caching isolation: only requests with the same salt share cached
  // blocks (docs/scheduler.md). Empty: the daemon's shared default pool.
  std::string cache_salt;
  int32_t generated() const { return best_of > 0 ? best_of : n; }
  // The prompt logprobs to ask the engine for (GenRequest::prompt_logprobs):
  // prompt_logprobs', and echo with logprobs lists the prompt's tokens too.
  int engine_prompt_logprobs() const {
    return std::max(prompt_logprobs, echo && logprobs >= 0 ? logprobs : -1);
  }
};

// Parse a /v1/completions (chat=false) or /v1/chat/completions (chat=true)
// body. Throws ApiError (400 naming the parameter) on anything malformed.
CompletionRequest parse_completion_request(std::string_view body, bool chat,
                                           const ParseLimits& limits = {});

// /tokenize: {"prompt": str, "add_special_tokens": bool} or {"messages": [...],
// "tools", "chat_template_kwargs", "add_generation_prompt"}, rendered as chat
// requests are.
struct TokenizeRequest {
  std::optional<std::string> prompt;
  std::optional<ChatTurns> chat;
  bool add_special_tokens = true;
};
TokenizeRequest parse_tokenize_request(std::string_view body);
// /detokenize: {"tokens": [int...]}
std::vector<int32_t> parse_detokenize_request(std::string_view body, size_t max_ids = 1 << 20);

// Parse any JSON body; 400 on malformed JSON or a non-object.
nlohmann::json parse_json_object(std::string_view body);
// The same, keeping the order of object keys (chat requests: a template's
// tojson shows it, and transformers keeps the client's order).
nlohmann::ordered_json parse_ordered_object(std::string_view body);

// Chat requests (openai_chat.cpp): messages, tools, tool_choice,
// parallel_tool_calls, chat_template_kwargs, add_generation_prompt from `j`
// into r; 400 naming the field on anything malformed.
void parse_chat_fields(const nlohmann::ordered_json& j, CompletionRequest& r,
                       const ParseLimits& limits);
ChatTurns parse_chat_turns(const nlohmann::ordered_json& j, const ParseLimits& limits);
// response_format, structured_outputs and vLLM's older guided_* fields
// (openai_structured.cpp): at most one constraint, shapes checked (whether
// it compiles is known only by compiling it).
std::optional<OutputConstraint> parse_constraint(const nlohmann::ordered_json& j, bool chat);

// ---- responses ----

// The OpenAI finish_reason: "stop", "length", or null (kNone, kAbort,
// kError); "tool_calls" for kStop with tool_finish.
nlohmann::json finish_reason_json(FinishReason f, bool tool_finish = false);

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  // Of the prompt tokens, those found in the prefix cache
  // (prompt_tokens_details.cached_tokens, as OpenAI reports them).
  int64_t cached_tokens = 0;
};
nlohmann::json usage_json(const Usage& u);

// One token's log-probability with its alternatives, text already decoded.
struct TokenLogprob {
  std::string text;
  float logprob = 0.f;
  std::vector<std::pair<std::string, float>> top;
  bool none = false;  // no logprob (null): the prompt's first token under echo
};
// One position of prompt_logprobs (vLLM): absent = null (the first
// position, or one the engine did not score); else the prompt's token
// then its alternatives, each by id with its logprob, vocabulary rank and
// text.
struct PromptLogprobOut {
  struct Entry {
    int32_t token = 0;
    std::string text;
    float logprob = 0.f;
    int32_t rank = 0;
  };
  bool present = false;
  std::vector<Entry> entries;
};
// [null, {"id": {"logprob", "rank", "decoded_token"}, ...}, ...]
nlohmann::json prompt_logprobs_json(const std::vector<PromptLogprobOut>& lp);
// Completions logprobs object: tokens, token_logprobs, top_logprobs, text_offset.
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprob>& lp, size_t text_offset0);
// Characters (Unicode code points) in UTF-8 text, the unit of text_offset
// (as OpenAI and vLLM count it): every byte but a continuation byte counts,
// so a token holding part of a character counts what it starts.
size_t utf8_chars(std::string_view text);
// Chat logprobs object: {"content":[{"token","logprob","bytes","top_logprobs"}]}.
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprob>& lp);

// A tool call of the response (message.tool_calls), and one piece of one
// streamed (delta.tool_calls): the first piece of call `index` carries its
// id, type and name, the next ones pieces of its arguments.
struct ToolCall {
  std::string id, name, arguments;
};
struct ToolCallDelta {
  size_t index = 0;
  bool first = false;
  std::string id, name;  // on the first only
  std::string arguments;
};

struct ResponseMeta {
  std::string id;  // "cmpl-…" / "chatcmpl-…"
  std::string model;
  int64_t created = 0;
};

// One choice of a whole response.
struct ChoiceOut {
  int32_t index = 0;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  nlohmann::json logprobs;         // null when not asked
  nlohmann::json prompt_logprobs;  // null when not asked (prompt_logprobs_json)
  // Chat with tools: the calls parsed from the output (text is then the
  // content around them; null in the message when empty), and whether
  // finish_reason "stop" reads "tool_calls".
  std::vector<ToolCall> calls;
  bool tool_finish = false;
  // A reasoning model's thinking, apart from the content (harmony's
  // analysis channel): message.reasoning_content when not empty.
  std::string reasoning;
};

// A whole (non-streamed) response: its choices in the order given.
nlohmann::json completion_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices,
                                   const Usage& u);
nlohmann::json chat_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices,
                             const Usage& u);
// The same with one choice.
nlohmann::json completion_response(const ResponseMeta& m, const std::string& text, FinishReason f,
                                   const Usage& u, const nlohmann::json& logprobs);
// Chat: message.content is null when the model only called tools; with
// tool_finish, finish_reason "stop" reads "tool_calls".
nlohmann::json chat_response(const ResponseMeta& m, const std::string& text, FinishReason f,
                             const Usage& u, const nlohmann::json& logprobs,
                             const std::vector<ToolCall>& calls = {}, bool tool_finish = false);

// Stream chunks, one choice each (`index`: which). `usage` (only with
// include_usage) goes in a final chunk with empty choices, as OpenAI sends it.
nlohmann::json completion_chunk(const ResponseMeta& m, const std::string& text, FinishReason f,
                                const nlohmann::json& logprobs, int32_t index = 0);
// Chat: the first chunk of each choice carries delta.role; later ones delta.content.
nlohmann::json chat_chunk(const ResponseMeta& m, const std::optional<std::string>& content,
                          bool with_role, FinishReason f, const nlohmann::json& logprobs,
                          int32_t index = 0, bool tool_finish = false);
// A bool where the index goes is a mistake (tool_finish comes after it).
nlohmann::json chat_chunk(const ResponseMeta& m, const std::optional<std::string>& content,
                          bool with_role, FinishReason f, const nlohmann::json& logprobs,
                          bool index) = delete;
// delta.reasoning_content (vLLM's reasoning outputs) of choice `index`.
nlohmann::json chat_reasoning_chunk(const ResponseMeta& m, const std::string& text,
                                    int32_t index = 0);
// delta.tool_calls pieces (OpenAI's streaming shape) of choice `index`.
nlohmann::json chat_tool_chunk(const ResponseMeta& m, const std::vector<ToolCallDelta>& deltas,
                               int32_t index = 0);
nlohmann::json usage_chunk(const ResponseMeta& m, bool chat, const Usage& u);

// Server-sent events framing: "data: <json>\n\n" and "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& j);
std::string sse_done();
// Clients read them with base/sse.h.

}  // namespace kvasir
