// model/chat_template.cpp — loading chat templates, rendering conversations
// through the Jinja interpreter, and encoding the rendered segments.
#include "model/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/check.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace kvasir {
namespace {

// Google's Gemma 3 instruct template, byte for byte the committed
// tests/data/chat_templates/google-gemma-3-it.jinja (a raw string: its
// newlines are part of it).
constexpr const char* kGemma3 = R"TMPL({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
)TMPL";

// The reference templates of the families the override can name (the
// published Llama 3, Llama 2, Mistral and Gemma 3 instruct templates, plain
// ChatML). "gemma" is Google's Gemma 3 template (tokenizer_config.json of
// the instruct checkpoints): <bos>, then
// <start_of_turn>{user|model}\n{content | trim}<end_of_turn>\n per turn, a
// system message folded into the first user turn followed by a blank line,
// roles that must alternate, and <start_of_turn>model\n to generate.
const char* builtin(const std::string& name) {
  if (name == "gemma") return kGemma3;
  if (name == "chatml")
    return "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
           "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
           "{{ '<|im_start|>assistant\\n' }}{% endif %}";
  if (name == "llama3")
    return "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
           "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
           "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = "
           "bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt "
           "%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
  if (name == "llama2")
    return "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
           "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages "
           "%}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
           "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('"
           "Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% "
           "if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
           "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content "
           "= message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
           "'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
           "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
  if (name == "mistral")
    return "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
           "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
           "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
           "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' "
           "%}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and "
           "assistant roles are supported!') }}{% endif %}{% endfor %}";
  return nullptr;
}

bool has(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

std::string family_of(const std::string& t) {
  if (has(t, "<|im_sep|>")) return "phi4";
  if (has(t, "<|im_start|>")) return "chatml";
  if (has(t, "<|start_header_id|>")) return "llama3";
  if (has(t, "<start_of_turn>")) return "gemma";
  if (has(t, "[INST]")) return has(t, "<<SYS>>") ? "llama2" : "mistral";
  if (has(t, "<｜User｜>")) return "deepseek";
  return "jinja";
}

// Variables a request cannot set through its extra variables.
bool reserved(const std::string& name) {
  for (const char* n :
       {"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token",
        "range", "dict", "namespace", "raise_exception", "strftime_now"})
    if (name == n) return true;
  return false;
}

// Roles a template may turn into control tokens ('<|' + role + '|>' in
// Phi-4-mini's): these known values are markup; any other role stays data.
bool known_role(const std::string& r) {
  for (const char* n : {"system", "user", "assistant", "tool", "developer", "ipython", "function"})
    if (r == n) return true;
  return false;
}

// The messages as template values: everything is data, except a known role.
jinja::Value messages_value(const nlohmann::ordered_json& messages) {
  std::vector<jinja::Value> out;
  for (const auto& m : messages) {
    if (!m.is_object()) {
      out.push_back(jinja::from_json(m, true));
      continue;
    }
    auto d = std::make_shared<jinja::Dict>();
    for (auto it = m.begin(); it != m.end(); ++it) {
      const bool markup =
          it.key() == "role" && it.value().is_string() && known_role(it.value().get<std::string>());
      d->set(jinja::Str(it.key(), true), jinja::from_json(it.value(), !markup));
    }
    out.push_back(jinja::Value::dict(std::move(d)));
  }
  return jinja::Value::list(std::move(out));
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  KV_CHECK_CODE(in.good(), ErrorCode::kNotFound, "cannot read {}", p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// tokenizer_config.json's bos_token/eos_token: a string or {"content": ...}.
std::string token_text(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

}  // namespace

std::string ChatPrompt::text() const {
  std::string s;
  for (const PromptSegment& seg : segments) s += seg.text;
  return s;
}

ChatTemplate ChatTemplate::from_string(const std::string& t, const std::string& bos,
                                       const std::string& eos, const std::string& model,
                                       const std::string& override_name) {
  ChatTemplate c;
  c.bos_ = bos;
  c.eos_ = eos;
  if (!override_name.empty()) {
    const char* named = builtin(override_name);
    const bool is_template = has(override_name, "{{") || has(override_name, "{%");
    KV_CHECK(named || is_template,
             "chat template override '{}' is neither a family (chatml, llama3, llama2, mistral, "
             "gemma) nor a template",
             override_name);
    c.source_ = named ? named : override_name;
    c.family_ = named ? override_name : family_of(c.source_);
  } else {
    KV_CHECK_CODE(!t.empty(), ErrorCode::kModelFormat,
                  "model '{}': the file has no chat template; set the chat template override to "
                  "one of chatml, llama3, llama2, mistral, gemma, or to a template",
                  model);
    c.source_ = t;
    c.family_ = family_of(t);
  }
  try {
    c.tmpl_ = std::make_shared<const jinja::Template>(c.source_);
  } catch (const Error& e) {
    KV_FAIL_CODE(ErrorCode::kModelFormat, "model '{}': {}", model, e.message());
  }
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
  // Gemma 3 files often carry no template (the published 270M Q4_K_M does
  // not): the family's own turn format, as llama.cpp and vLLM apply it.
  std::string chosen = override_name;
  if (tmpl.empty() && chosen.empty())
    if (const GgufValue* a = f.find("general.architecture"))
      if (a->as_string("general.architecture") == "gemma3") chosen = "gemma";
  return from_string(tmpl, bos, eos, name, chosen);
}

ChatTemplate ChatTemplate::from_hf_dir(const std::string& dir, const std::string& override_name) {
  const std::filesystem::path d(dir);
  nlohmann::json cfg = nlohmann::json::object();
  if (std::filesystem::exists(d / "tokenizer_config.json")) {
    try {
      cfg = nlohmann::json::parse(read_file(d / "tokenizer_config.json"));
    } catch (const nlohmann::json::exception& e) {
      KV_FAIL_CODE(ErrorCode::kModelFormat, "{}/tokenizer_config.json: {}", dir, e.what());
    }
  }
  std::string tmpl;
  if (std::filesystem::exists(d / "chat_template.jinja")) {
    tmpl = read_file(d / "chat_template.jinja");
  } else if (cfg.contains("chat_template")) {
    const auto& ct = cfg["chat_template"];
    if (ct.is_string()) {
      tmpl = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use"...}]
      for (const auto& e : ct)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string())
          tmpl = e["template"].get<std::string>();
    }
  }
  // A Gemma 3 folder without a template (transformers' conversion of a GGUF
  // file writes none): the family's own turn format, as for its GGUF form.
  std::string chosen = override_name;
  if (tmpl.empty() && chosen.empty() && std::filesystem::exists(d / "config.json")) {
    try {
      const auto model = nlohmann::json::parse(read_file(d / "config.json"));
      if (model.is_object() && model.value("model_type", "") == "gemma3_text") chosen = "gemma";
    } catch (const nlohmann::json::exception&) {  // the model's loader says why
    }
  }
  return from_string(tmpl, token_text(cfg, "bos_token"), token_text(cfg, "eos_token"),
                     d.filename().string(), chosen);
}

ChatPrompt ChatTemplate::apply(const ChatInput& in, const jinja::Limits& limits) const {
  KV_CHECK(in.messages.is_array(), "chat: messages must be an array");
  KV_CHECK(in.tools.is_null() || in.tools.is_array(), "chat: tools must be an array");
  KV_CHECK(in.kwargs.is_object(), "chat: chat_template_kwargs must be an object");
  std::vector<std::pair<std::string, jinja::Value>> vars;
  vars.emplace_back("messages", messages_value(in.messages));
  vars.emplace_back("tools",
                    in.tools.is_null() ? jinja::Value::none() : jinja::from_json(in.tools, true));
  vars.emplace_back("documents", jinja::Value::none());
  vars.emplace_back("add_generation_prompt", jinja::Value(in.add_generation_prompt));
  vars.emplace_back("bos_token", jinja::Value::string(bos_));
  vars.emplace_back("eos_token", jinja::Value::string(eos_));
  for (auto it = in.kwargs.begin(); it != in.kwargs.end(); ++it) {
    KV_CHECK(!reserved(it.key()), "chat: chat_template_kwargs cannot set '{}'", it.key());
    vars.emplace_back(it.key(), jinja::from_json(it.value(), true));
  }
  jinja::RenderOptions opt;
  opt.limits = limits;
  if (in.now) {
    opt.now = *in.now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &opt.now);
  }
  const jinja::Str out = tmpl_->render(vars, opt);
  ChatPrompt p;
  for (auto& s : jinja::Template::segments(out)) p.segments.push_back({std::move(s.text), s.data});
  return p;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& msgs, bool gen) const {
  ChatInput in;
  for (const ChatMessage& m : msgs)
    in.messages.push_back({{"role", m.role}, {"content", m.content}});
  in.add_generation_prompt = gen;
  return apply(in).text();
}

namespace {

// The special and added tokens in the order Tokenizer::encode cuts them out:
// longest first, ties by id.
std::vector<int32_t> specials_in_order(const TokenizerData& d) {
  std::vector<int32_t> specials;
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (d.attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown))
      specials.push_back(int32_t(i));
  std::stable_sort(specials.begin(), specials.end(),
                   [&](int32_t a, int32_t b) { return d.tokens[a].size() > d.tokens[b].size(); });
  return specials;
}

struct Frag {
  int32_t id;  // >= 0: a token; -1: text [off, off + len)
  size_t off, len;
};

// Tokenizer::encode's partition of `text`, except that a control token whose
// text touches a byte of `data` is not cut out: it stays text.
std::vector<Frag> partition(const TokenizerData& d, const std::string& text,
                            const std::vector<std::pair<size_t, size_t>>& data) {
  auto touches_data = [&](size_t b, size_t e) {
    for (auto [x, y] : data)
      if (x < e && b < y) return true;
    return false;
  };
  auto is_space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  std::vector<Frag> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  for (int32_t sid : specials_in_order(d)) {
    const std::string& st = d.tokens[sid];
    if (st.empty()) continue;
    const bool control = d.attrs[sid] & (kAttrControl | kAttrUnknown);
    std::vector<Frag> next;
    for (const Frag& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.off, len = f.len, from = f.off;
      while (len > 0) {
        const size_t match = std::string_view(text).substr(0, off + len).find(st, from);
        if (match == std::string::npos) break;
        if (control && touches_data(match, match + st.size())) {  // data: stays text
          from = match + 1;
          continue;
        }
        size_t left_len = match - off;
        if (d.attrs[sid] & kAttrLStrip)
          while (left_len > 0 && is_space(text[off + left_len - 1])) --left_len;
        if (left_len > 0) next.push_back({-1, off, left_len});
        next.push_back({sid, 0, 0});
        size_t roff = match + st.size(), rlen = off + len - roff;
        if (d.attrs[sid] & kAttrRStrip)
          while (rlen > 0 && is_space(text[roff])) ++roff, --rlen;
        off = from = roff, len = rlen;
      }
      if (len > 0) next.push_back({-1, off, len});
    }
    frags.swap(next);
  }
  return frags;
}

}  // namespace

// The tokenizer's own partition, with control tokens kept out of data; the
// text between tokens is encoded with control-token parsing off, as
// Tokenizer::encode encodes it after a special token (so SentencePiece's
// space prefix lands where it would in whole-text encoding).
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const ChatPrompt& prompt) {
  std::string text;
  std::vector<std::pair<size_t, size_t>> data;  // byte ranges
  for (const PromptSegment& s : prompt.segments) {
    if (s.data && !s.text.empty()) data.emplace_back(text.size(), text.size() + s.text.size());
    text += s.text;
  }
  std::vector<int32_t> ids;
  for (const Frag& f : partition(tok.data(), text, data)) {
    if (f.id >= 0) {
      ids.push_back(f.id);
    } else {
      const auto part = tok.encode(std::string_view(text).substr(f.off, f.len), false, false);
      ids.insert(ids.end(), part.begin(), part.end());
    }
  }
  return ids;
}

}  // namespace kvasir
