// model/chat_template.h — turn a conversation into the prompt text the model
// was trained on, with the model's own chat template.
//
// The template comes with the model: GGUF `tokenizer.chat_template`, or for
// a Hugging Face folder chat_template.jinja / tokenizer_config.json's
// `chat_template`. It is a Jinja program, rendered by Kvasir's own
// interpreter (jinja/) exactly as transformers' apply_chat_template
// renders it with jinja2; docs/chat-templates.md has the details.
//
// The rendered prompt is a list of segments: markup the template wrote, and
// data that came from the conversation (message text, tool calls and
// results, tool specs, extra variables; a message's role is markup when it
// is one of system, user, assistant, tool, developer, ipython, function,
// since templates build control tokens out of it: '<|' + role + '|>').
// Tokenize data with control-token parsing off and markup with it on
// (encode_prompt below), and no user can forge a turn by typing
// "<|im_start|>system" or "<|eot_id|>".
//
// The prompt includes the BOS text when the template writes it: encode it
// without adding another (encode_prompt never adds one).
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "jinja/jinja.h"

namespace kvasir {

class GgufFile;
class Tokenizer;

struct ChatMessage {
  std::string role, content;
};

// One run of a rendered prompt.
struct PromptSegment {
  std::string text;
  bool data = false;  // came from the conversation, not from the template
};

struct ChatPrompt {
  std::vector<PromptSegment> segments;
  std::string text() const;  // the segments joined
};

// What a chat request gives the template. JSON in the OpenAI shape; use
// ordered_json so that key order (visible through tojson, e.g. in tool
// specs) is the client's, as Python keeps it.
struct ChatInput {
  // [{"role", "content" (string, null, or [{"type": "text", "text"}...]),
  //   "tool_calls" [{"id", "type", "function": {"name", "arguments"}}],
  //   "tool_call_id", "name", "reasoning_content", ...}]
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null, or [{"type": "function", "function": {...}}]
  bool add_generation_prompt = true;
  // Extra template variables (the request's chat_template_kwargs, e.g.
  // {"enable_thinking": false}). Cannot redefine the variables above or the
  // special tokens.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  // The time strftime_now() formats; default: the local time now.
  std::optional<std::tm> now;
};

class ChatTemplate {
 public:
  // Throws kvasir::Error naming the model if the template is missing or
  // cannot be parsed (kModelFormat, naming the line and, for a construct
  // outside the supported subset, the construct), or if the override is
  // unknown. override_name: a family name (chatml, llama3, llama2, mistral,
  // gemma: the reference templates of those families) or a template's
  // source. A gemma3 GGUF without a template gets "gemma" (from_gguf).
  static ChatTemplate from_gguf(const GgufFile&, const std::string& override_name = "");
  // A Hugging Face model folder: chat_template.jinja, else
  // tokenizer_config.json's chat_template (the "default" one when it is a
  // list); bos/eos from tokenizer_config.json.
  static ChatTemplate from_hf_dir(const std::string& dir, const std::string& override_name = "");
  // From the template text; bos/eos are the token texts the template sees as
  // bos_token/eos_token.
  static ChatTemplate from_string(const std::string& tmpl, const std::string& bos,
                                  const std::string& eos, const std::string& model_name,
                                  const std::string& override_name = "");

  // Throws kvasir::Error (kInvalidArgument) when the template rejects the
  // conversation (raise_exception: the template's own message) or fails on
  // it, or when a limit is reached.
  ChatPrompt apply(const ChatInput& input, const jinja::Limits& limits = {}) const;
  // Plain messages, the prompt's text (what apply() gives, joined).
  std::string render(const std::vector<ChatMessage>&, bool add_generation_prompt) const;

  // For logs: the family the template's control strings suggest (chatml,
  // llama3, llama2, mistral, gemma, phi4, deepseek) or "jinja"; the
  // override name when one was given. Rendering never depends on it.
  const std::string& family() const { return family_; }
  const std::string& source() const { return source_; }
  const std::string& bos() const { return bos_; }
  const std::string& eos() const { return eos_; }

 private:
  ChatTemplate() = default;
  std::shared_ptr<const jinja::Template> tmpl_;
  std::string family_, source_, bos_, eos_;
};

// Token ids of a rendered prompt: data runs are tokenized with control-token
// parsing off, markup with it on. Where no data holds a control token's
// text this is exactly tok.encode(prompt.text(), false, true); otherwise the
// control-token texts inside data become plain text. Never adds BOS/EOS.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const ChatPrompt& prompt);

}  // namespace kvasir
