// daemon/api/chat_turns.h — a chat request's conversation made into what the
// model's own template can render, as vLLM prepares it for transformers'
// apply_chat_template: text parts joined where the template wants a string,
// tool-call arguments as objects, and, for a template that teaches no tool
// calling, the tools described in a system message and earlier calls
// written back in the syntax the model is asked to use (as llama.cpp does
// for such templates). Pure JSON; the template itself renders afterwards.
#pragma once

#include <string_view>

#include "daemon/api/openai.h"
#include "daemon/api/tool_calls.h"

namespace kvasir {

// What a template's source says it handles.
struct TemplateTraits {
  bool content_parts = false;  // iterates over a message's content parts (no "is string" test)
  bool tools = false;          // reads `tools`
  bool tool_calls = false;     // reads an assistant turn's `tool_calls`
  bool developer = false;      // knows the developer role
  bool thinking = false;       // reads a message's `thinking` (gpt-oss's analysis text)
};
TemplateTraits template_traits(std::string_view source);

// The conversation for a template with traits `t`:
//   - content parts joined with "\n" unless the template takes parts, and a
//     null content "" (vLLM's "string" content format);
//   - developer turns as system turns unless the template knows them;
//   - tool_calls' arguments given as JSON strings parsed into objects
//     (templates expect objects; vLLM does the same);
//   - without t.tools, non-empty tools go into the first system message
//     (one is added if there is none) with how to call them in format f;
//     without t.tool_calls, an assistant turn's calls become its text in
//     that syntax;
//   - with t.thinking, an assistant turn's reasoning_content is given as
//     `thinking` too, and beside tool calls its content is dropped (the
//     template refuses both), as llama.cpp prepares gpt-oss conversations.
ChatTurns adapt_chat_turns(ChatTurns in, const TemplateTraits& t, ToolFormat f);

}  // namespace kvasir
