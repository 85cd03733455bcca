// daemon/api/tool_calls.h — tool calls in a model family's own syntax: which
// syntax a chat template teaches its model, the grammar that forces a call
// (tool_choice "required" or a named function), and the parser that turns
// the model's text into OpenAI tool calls, incrementally for streaming.
//
// Families (ToolFormat):
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, one
//                or more (Hermes 2/3, Qwen 2.5/3, QwQ, and the default for
//                templates that teach none: chat_turns.cpp shows such a
//                model this syntax in its system prompt)
//   llama3_json  {"name": "f", "parameters": {...}}, calls separated by ";"
//                (Llama 3.1/3.2/3.3 JSON tool calling; <|python_tag|> is a
//                special token the detokenizer leaves out)
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] (the
//                marker is a control token: the request's text keeps special
//                tokens; a forced call, which no grammar can start with a
//                control token, is the bare array)
//   harmony      gpt-oss: <|channel|>commentary to=functions.f <|constrain|>json
//                <|message|>{...}<|call|>, among messages on other channels;
//                the stream also gives the analysis channel as reasoning
//                (harmony.h). Every chat request of such a model is parsed,
//                tools or not; no grammar forces a call (its markers are
//                control tokens).
//
// Streamed and whole responses come from the same parser, so the deltas of
// a stream assemble into exactly the calls of the whole response: a call's
// first delta carries its index, id, type and name (arguments ""), the
// next ones pieces of its arguments, which are the raw JSON text the model
// wrote for them (a JSON string value: its contents, sent whole).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/api/openai.h"

namespace kvasir {

class HarmonyStream;

enum class ToolFormat { kHermes, kLlama3Json, kMistral, kHarmony };

const char* tool_format_name(ToolFormat f);

// The syntax a chat template teaches (from its source text): harmony's
// <|channel|> markers, Mistral's [TOOL_CALLS], Llama 3's "parameters"
// objects (<|python_tag|> or the "{"name": function name, "parameters":
// ..." instruction), else Hermes.
ToolFormat detect_tool_format(std::string_view template_source);

// The id of call `index` of a response whose calls are keyed by `seed`:
// "call_" and 24 letters or digits (Mistral: 9, no prefix, as its
// templates take).
std::string tool_call_id(uint64_t seed, size_t index, ToolFormat f);

// The family's call syntax around each function's parameters schema, as an
// XGrammar structural tag: one call or more (`parallel`), of `only` if not
// empty (tool_choice naming a function: exactly one call), else of any of
// `tools`. JSON whitespace bounded by `max_whitespace`.
OutputConstraint tool_call_constraint(ToolFormat f, const nlohmann::ordered_json& tools,
                                      const std::string& only, bool parallel,
                                      int max_whitespace = 16);

// The model's text as content and tool calls, fed piece by piece.
class ToolCallStream {
 public:
  struct Out {
    std::string content;
    std::string reasoning;  // harmony's analysis channel (reasoning_content)
    std::vector<ToolCallDelta> deltas;
  };
  // constrained: the output is calls by construction (tool_choice required
  // or named), which for mistral starts without its control token. id_seed
  // makes the calls' ids (distinct per request).
  ToolCallStream(ToolFormat f, bool constrained, uint64_t id_seed);
  ToolCallStream(ToolCallStream&&) noexcept;
  ~ToolCallStream();

  // Text the model wrote (after stop strings): what can be sent now. Text
  // that may begin a call is held back until it is known not to.
  Out push(std::string_view text);
  // The end: the held-back text, and a call cut short ended as it stands.
  // Content that is only whitespace beside calls is dropped.
  Out finish();

  const std::vector<ToolCall>& calls() const;
  // finish() found the last call still open (cut by max_tokens or a stop
  // string): its arguments are not a whole JSON object, so the calls are
  // not reported as complete (finish_reason is not "tool_calls").
  bool cut() const;
  // Everything sent as content, finish() included.
  const std::string& content() const;
  // Everything sent as reasoning (harmony; empty for the others).
  const std::string& reasoning() const;

  struct Scan;  // what is known of one call object (tool_calls.cpp)

 private:
  void step(Out& out, bool end);
  bool content_step(Out& out, bool end);
  bool call_step(Out& out, bool end);
  bool close_step(bool end);
  void emit_content(Out& out, std::string_view text, bool end);
  void update_call(Out& out, const Scan& s, std::string_view body, bool done);

  ToolFormat f_;
  bool constrained_;
  uint64_t seed_;
  std::string text_;          // everything fed so far
  size_t pos_ = 0;            // text_ before pos_ is handled
  bool in_calls_ = false;     // pos_ is inside the calls' region
  bool region_open_ = false;  // mistral: inside its [ ... ] array
  std::string held_ws_;       // content that is only whitespace, so far
  std::string content_;
  std::vector<ToolCall> calls_;
  bool call_open_ = false;     // calls_.back() is still being written
  bool cut_ = false;           // finish() ended an open call
  bool expect_close_ = false;  // hermes: a call's object ended; its closing tag next
  bool began_ = false;         // any content or call seen (llama3: calls come first)
  std::unique_ptr<HarmonyStream> harmony_;  // kHarmony: the parser it is
};

}  // namespace kvasir
