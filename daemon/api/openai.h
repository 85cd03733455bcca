// daemon/api/openai.h — the OpenAI request and response shapes, as pure functions.
//
// Parsing turns an untrusted JSON body into a CompletionRequest or throws
// ApiError (daemon/api/errors.h: an ErrorCode, naming the parameter).
// Shaping builds the JSON of responses and stream chunks (error bodies:
// errors.h). Nothing here does I/O, tokenizes, or knows about HTTP
// transport: it is tested alone (tests/unit/daemon/api/test_openai.cpp).
#pragma once

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

struct ChatMessageIn {
  std::string role, content;
};

struct ParseLimits {
  int32_t max_tokens_cap = 1 << 20;  // largest max_tokens accepted
  int32_t default_max_tokens = 16;   // completions; chat uses default_chat_max_tokens
  int32_t default_chat_max_tokens = 512;
  size_t max_stop = 16;          // stop strings per request
  size_t max_stop_bytes = 1024;  // per stop string
  size_t max_prompt_ids = 1 << 20;
  size_t max_messages = 4096;
};

struct CompletionRequest {
  bool chat = false;
  std::string model;  // as sent ("" if absent)
  // Completions: either text or ids. Chat: messages.
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  std::vector<ChatMessageIn> messages;
  int32_t max_tokens = 16;
  bool max_tokens_given = false;
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions only
  bool skip_special_tokens = true;
  int logprobs = -1;  // -1: none; otherwise number of top alternatives (0..kMaxLogprobs)
  // Parallel sampling: n choices (1..kMaxChoices), choice i sampled with
  // seed + i. best_of (0: not given; else n..kMaxChoices, not with stream):
  // that many are generated and the n of highest cumulative logprob returned.
  int32_t n = 1;
  int32_t best_of = 0;
  // Prefix caching isolation: only requests with the same salt share cached
  // blocks (docs/scheduler.md). Empty: the daemon's shared default pool.
  std::string cache_salt;
  int32_t generated() const { return best_of > 0 ? best_of : n; }
};

// Parse a /v1/completions (chat=false) or /v1/chat/completions (chat=true)
// body. Throws ApiError (400 naming the parameter) on anything malformed.
CompletionRequest parse_completion_request(std::string_view body, bool chat,
                                           const ParseLimits& limits = {});

// /tokenize: {"prompt": str, "add_special_tokens": bool} or {"messages": [...]}
struct TokenizeRequest {
  std::optional<std::string> prompt;
  std::vector<ChatMessageIn> messages;
  bool add_special_tokens = true;
};
TokenizeRequest parse_tokenize_request(std::string_view body);
// /detokenize: {"tokens": [int...]}
std::vector<int32_t> parse_detokenize_request(std::string_view body, size_t max_ids = 1 << 20);

// Parse any JSON body; 400 on malformed JSON or a non-object.
nlohmann::json parse_json_object(std::string_view body);

// ---- responses ----

// The OpenAI finish_reason: "stop", "length", or null (kNone, kAbort, kError).
nlohmann::json finish_reason_json(FinishReason f);

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
};
// Completions logprobs object: tokens, token_logprobs, top_logprobs, text_offset.
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprob>& lp, size_t text_offset0);
// Chat logprobs object: {"content":[{"token","logprob","bytes","top_logprobs"}]}.
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprob>& lp);

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
  nlohmann::json logprobs;  // null when not asked
};

// A whole (non-streamed) response: its choices in the order given.
nlohmann::json completion_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices,
                                   const Usage& u);
nlohmann::json chat_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices,
                             const Usage& u);
// The same with one choice.
nlohmann::json completion_response(const ResponseMeta& m, const std::string& text, FinishReason f,
                                   const Usage& u, const nlohmann::json& logprobs);
nlohmann::json chat_response(const ResponseMeta& m, const std::string& text, FinishReason f,
                             const Usage& u, const nlohmann::json& logprobs);

// Stream chunks, one choice each (`index`: which). `usage` (only with
// include_usage) goes in a final chunk with empty choices, as OpenAI sends it.
nlohmann::json completion_chunk(const ResponseMeta& m, const std::string& text, FinishReason f,
                                const nlohmann::json& logprobs, int32_t index = 0);
// Chat: the first chunk of each choice carries delta.role; later ones delta.content.
nlohmann::json chat_chunk(const ResponseMeta& m, const std::optional<std::string>& content,
                          bool with_role, FinishReason f, const nlohmann::json& logprobs,
                          int32_t index = 0);
nlohmann::json usage_chunk(const ResponseMeta& m, bool chat, const Usage& u);

// Server-sent events framing: "data: <json>\n\n" and "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& j);
std::string sse_done();

// Parses SSE from a byte stream (the CLI, tests): feed bytes, get the data
// payloads of complete events ("[DONE]" included, verbatim).
class SseParser {
 public:
  std::vector<std::string> feed(std::string_view bytes);

 private:
  std::string buf_;
};

}  // namespace kvasir
