// model/chat_template.h — turn a conversation into the prompt text the model
// was trained on.
//
// The template comes with the model (GGUF `tokenizer.chat_template`, a Jinja
// program). We do not embed a Jinja interpreter: we recognise the family the
// template belongs to and render it natively, byte for byte as Jinja renders
// the reference templates (tests compare against jinja2 output):
//   chatml  <|im_start|>role\ncontent<|im_end|>\n     (SmolLM2, Qwen2; a default
//           system message written in the template is extracted and used)
//   llama3  <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n
//           content (trimmed)<|eot_id|>
//   llama2  <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s>
//   mistral <s>[INST] user [/INST]answer</s>
// An unrecognised template is an error naming the model; a configuration
// override (one of the family names) forces a family.
//
// The rendered text includes the BOS text when the template writes it
// (llama3/llama2/mistral): encode such prompts with add_special = false.
#pragma once

#include <string>
#include <vector>

namespace kvasir {

class GgufFile;

struct ChatMessage {
  std::string role, content;
};

class ChatTemplate {
 public:
  // Throws kvasir::Error naming the model if the template is missing or not
  // supported (and no override is given), or if the override is unknown.
  static ChatTemplate from_gguf(const GgufFile&, const std::string& override_name = "");
  // Same from the template text itself; bos/eos are the token texts the
  // template refers to as bos_token/eos_token.
  static ChatTemplate from_string(const std::string& tmpl, const std::string& bos,
                                  const std::string& eos, const std::string& model_name,
                                  const std::string& override_name = "");

  // Throws kvasir::Error when the family rejects the conversation (roles not
  // alternating user/assistant, a system message where none is supported),
  // with the reference template's own message.
  std::string render(const std::vector<ChatMessage>&, bool add_generation_prompt) const;
  std::string family() const { return family_; }
  // The default system message a ChatML template injects ("" if none).
  const std::string& default_system() const { return default_system_; }

 private:
  ChatTemplate() = default;
  std::string family_;
  std::string bos_, eos_;
  std::string default_system_;
};

}  // namespace kvasir
