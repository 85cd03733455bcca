// model/chat_template.cpp — family recognition and native rendering.
#include "model/chat_template.h"

#include "base/check.h"
#include "model/gguf.h"
#include "model/unicode.h"

namespace kvasir {
namespace {

bool has(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

// Python's str.strip() / Jinja's |trim: Unicode whitespace at both ends.
std::string py_strip(const std::string& s) {
  const auto cps = unicode::decode_utf8(s);
  size_t b = 0, e = cps.size();
  while (b < e && unicode::is_python_space(cps[b])) ++b;
  while (e > b && unicode::is_python_space(cps[e - 1])) --e;
  // Map codepoint bounds back to bytes (content is expected to be valid UTF-8).
  std::string out;
  for (size_t i = b; i < e; ++i) unicode::append_utf8(out, cps[i]);
  return out;
}

// The default system message of a ChatML template: the literal
//   '<|im_start|>system\n ... <|im_end|>\n'
// it prints when the conversation has no system message. Handles both real
// newlines and \n escapes inside the Jinja string literal.
std::string chatml_default_system(const std::string& t) {
  for (const char* head : {"'<|im_start|>system\n", "'<|im_start|>system\\n",
                           "\"<|im_start|>system\n", "\"<|im_start|>system\\n"}) {
    const size_t p = t.find(head);
    if (p == std::string::npos) continue;
    const char quote = head[0];
    const size_t b = p + std::string(head).size();
    std::string out;
    for (size_t i = b; i < t.size(); ++i) {
      if (t[i] == quote) break;
      if (t[i] == '\\' && i + 1 < t.size()) {
        const char c = t[++i];
        out.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
      } else {
        out.push_back(t[i]);
      }
    }
    const size_t end = out.find("<|im_end|>");
    if (end == std::string::npos) return "";
    return out.substr(0, end);
  }
  return "";
}

const char* kFamilies = "chatml, llama3, llama2, mistral";

}  // namespace

ChatTemplate ChatTemplate::from_string(const std::string& t, const std::string& bos,
                                       const std::string& eos, const std::string& model,
                                       const std::string& override_name) {
  ChatTemplate c;
  c.bos_ = bos;
  c.eos_ = eos;
  if (!override_name.empty()) {
    KV_CHECK(override_name == "chatml" || override_name == "llama3" || override_name == "llama2" ||
                 override_name == "mistral",
             "chat template override '{}' is not a supported family ({})", override_name,
             kFamilies);
    c.family_ = override_name;
  } else if (has(t, "<|im_start|>")) {
    c.family_ = "chatml";
  } else if (has(t, "<|start_header_id|>")) {
    KV_CHECK(!has(t, "Cutting Knowledge Date"),
             "model '{}': its chat template is a Llama 3.1+ variant (tools and date preamble), "
             "which is not "
             "supported; set the chat template override to 'llama3' to render the Llama 3.0 form",
             model);
    c.family_ = "llama3";
  } else if (has(t, "[INST]") && has(t, "<<SYS>>")) {
    c.family_ = "llama2";
  } else if (has(t, "[INST]")) {
    c.family_ = "mistral";
  } else {
    KV_FAIL(
        "model '{}': {}; set the chat template override to one of: {}", model,
        t.empty() ? "the file has no chat template" : "its chat template is not a supported family",
        kFamilies);
  }
  if (c.family_ == "chatml") c.default_system_ = chatml_default_system(t);
  return c;
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& f, const std::string& override_name) {
  std::string tmpl, name = f.path(), bos, eos;
  if (const GgufValue* v = f.find("tokenizer.chat_template"))
    tmpl = std::string(v->as_string("chat_template"));
  if (const GgufValue* v = f.find("general.name")) name = std::string(v->as_string("general.name"));
  if (const GgufValue* tv = f.find("tokenizer.ggml.tokens")) {
    const GgufArray& toks = tv->as_array("tokenizer.ggml.tokens");
    auto text = [&](const char* key) -> std::string {
      const GgufValue* v = f.find(key);
      if (!v) return "";
      const uint64_t id = v->as_uint(key);
      return id < toks.strings.size() ? std::string(toks.strings[id]) : "";
    };
    bos = text("tokenizer.ggml.bos_token_id");
    eos = text("tokenizer.ggml.eos_token_id");
  }
  return from_string(tmpl, bos, eos, name, override_name);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& msgs, bool gen) const {
  std::string out;
  if (family_ == "chatml") {
    for (size_t i = 0; i < msgs.size(); ++i) {
      if (i == 0 && msgs[0].role != "system" && !default_system_.empty())
        out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      out += "<|im_start|>" + msgs[i].role + "\n" + msgs[i].content + "<|im_end|>\n";
    }
    if (gen) out += "<|im_start|>assistant\n";
  } else if (family_ == "llama3") {
    for (size_t i = 0; i < msgs.size(); ++i) {
      if (i == 0) out += bos_;
      out += "<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n" +
             py_strip(msgs[i].content) + "<|eot_id|>";
    }
    if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  } else if (family_ == "llama2") {
    KV_CHECK(!msgs.empty(), "the llama2 template needs at least one message");
    size_t first = 0;
    std::string sys;
    bool has_sys = false;
    if (!msgs.empty() && msgs[0].role == "system") {
      sys = msgs[0].content, has_sys = true, first = 1;
    }
    for (size_t i = first; i < msgs.size(); ++i) {
      const size_t k = i - first;
      KV_CHECK((msgs[i].role == "user") == (k % 2 == 0),
               "Conversation roles must alternate user/assistant/user/assistant/...");
      std::string content = msgs[i].content;
      if (k == 0 && has_sys) content = "<<SYS>>\n" + sys + "\n<</SYS>>\n\n" + content;
      if (msgs[i].role == "user")
        out += bos_ + "[INST] " + py_strip(content) + " [/INST]";
      else if (msgs[i].role == "assistant")
        out += " " + py_strip(content) + " " + eos_;
    }
  } else {  // mistral
    out += bos_;
    for (size_t i = 0; i < msgs.size(); ++i) {
      KV_CHECK((msgs[i].role == "user") == (i % 2 == 0),
               "Conversation roles must alternate user/assistant/user/assistant/...");
      if (msgs[i].role == "user")
        out += "[INST] " + msgs[i].content + " [/INST]";
      else if (msgs[i].role == "assistant")
        out += msgs[i].content + eos_;
      else
        KV_FAIL("Only user and assistant roles are supported!");
    }
  }
  return out;
}

}  // namespace kvasir
