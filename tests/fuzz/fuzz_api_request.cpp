// tests/fuzz/fuzz_api_request.cpp — the OpenAI request parsing on arbitrary bodies.
//
// The first byte picks the endpoint; the rest is the body. ApiError (a 400
// naming the parameter) is the only clean refusal: a kvasir::Error or a JSON
// library exception escaping would be a 500 at best, so it is a bug here too.
// An accepted request is checked against the parser's promises (limits,
// sampling valid) and its stop strings are run through the StopMatcher.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "daemon/api/openai.h"
#include "daemon/api/openai_stop.h"
#include "ipc/sampling.h"

using namespace kvasir;

size_t g_sink_api;

static void check_request(const CompletionRequest& r, const ParseLimits& lim) {
  if (r.max_tokens < 0 || r.max_tokens > lim.max_tokens_cap) __builtin_trap();
  if (r.stop.size() > lim.max_stop) __builtin_trap();
  for (const auto& s : r.stop)
    if (s.size() > lim.max_stop_bytes) __builtin_trap();
  if (r.prompt_ids.size() > lim.max_prompt_ids) __builtin_trap();
  if (r.chat_turns.messages.size() > lim.max_messages) __builtin_trap();
  if (r.chat_turns.tools.is_array() && r.chat_turns.tools.size() > lim.max_tools) __builtin_trap();
  if (!validate_sampling(r.sampling).ok()) __builtin_trap();
  StopMatcher m(r.stop);
  for (const auto& s : r.stop) g_sink_api += m.push(s).size() + m.push("x").size();
  g_sink_api += m.flush().size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  ParseLimits lim;
  lim.max_stop = 4;  // small limits, so the fuzzer reaches them
  lim.max_stop_bytes = 16;
  lim.max_prompt_ids = 64;
  lim.max_messages = 8;
  lim.max_tokens_cap = 4096;
  try {
    switch (which % 5) {
      case 0:
      case 1: {
        const bool chat = which % 5 == 1;
        CompletionRequest r = parse_completion_request(body, chat, lim);
        if (r.chat != chat) __builtin_trap();
        check_request(r, lim);
        break;
      }
      case 2: {
        TokenizeRequest r = parse_tokenize_request(body);
        g_sink_api += (r.chat ? r.chat->messages.size() : 0) + (r.prompt ? r.prompt->size() : 0);
        break;
      }
      case 3: {
        auto ids = parse_detokenize_request(body, 64);
        if (ids.size() > 64) __builtin_trap();
        break;
      }
      case 4: {
        auto j = parse_json_object(body);
        if (!j.is_object()) __builtin_trap();
        break;
      }
    }
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status > 599) __builtin_trap();
    // As api.cpp sends it: a parse error's message may quote invalid UTF-8
    // from the body, so the dump replaces it (a plain dump() would throw).
    g_sink_api += error_body(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
  }
  return 0;
}
