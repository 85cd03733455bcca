// daemon/api/harmony.h — gpt-oss's harmony output as OpenAI fields: the
// model's text split by channel into reasoning_content (analysis), content
// (final, and commentary addressed to no one: a preamble) and tool calls
// (commentary addressed to=functions.NAME), incrementally for streaming.
//
// The format (OpenAI's harmony; docs/model-formats.md, "gpt-oss"): after the
// prompt's "<|start|>assistant" the model writes messages
//     [<|start|>assistant][ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT]
//     [ <|constrain|>FORMAT]<|message|>BODY<|end|> | <|return|> | <|call|>
// one after another; <|return|> and <|call|> end the turn (they are the
// family's end-of-generation tokens, so they usually do not reach the text).
// The markers are control tokens: the request's text keeps special tokens
// (api_generate.cpp), as for Mistral's [TOOL_CALLS].
//
// Output that does not start like a harmony message (a grammar-constrained
// answer, a model that ignores the format) is content as it stands.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/api/openai.h"

namespace kvasir {

class HarmonyStream {
 public:
  struct Out {
    std::string reasoning, content;
    std::vector<ToolCallDelta> deltas;
  };
  // id_seed makes the calls' ids (distinct per request).
  explicit HarmonyStream(uint64_t id_seed);

  // Text the model wrote: what can be sent now. A possible marker at the
  // end is held back until it is known.
  Out push(std::string_view text);
  // The end: what was held back; a call cut short ended as it stands.
  Out finish();

  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& calls() const { return calls_; }
  // The output ended inside a call's arguments (max_tokens, a stop
  // string): the calls are not reported as complete.
  bool cut() const { return cut_; }

 private:
  enum class Sink { kReasoning, kContent, kCall };
  enum class State { kHeader, kBody, kPlain, kDone };
  bool step(Out& out, bool end);
  bool header_step(Out& out, bool end);
  bool body_step(Out& out, bool end);
  void open_message(Out& out, std::string_view header);
  void emit(Out& out, std::string_view text);

  uint64_t seed_;
  State state_ = State::kHeader;
  bool first_ = true;  // no message opened yet
  std::string buf_;    // text not handled yet
  Sink sink_ = Sink::kContent;
  std::string reasoning_, content_;
  std::vector<ToolCall> calls_;
  bool cut_ = false;
};

}  // namespace kvasir
