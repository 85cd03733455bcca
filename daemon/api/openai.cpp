// daemon/api/openai.cpp — parsing and shaping of the OpenAI request/response bodies.
#include "daemon/api/openai.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "daemon/api/openai_fields.h"

namespace kvasir {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {
// Deepest [ / { nesting outside strings: refused before parsing, so a body of
// a million '[' costs a scan, not a million allocations. Deep enough for
// any schema the grammar engine takes (GrammarLimits::max_nesting_depth,
// 64, names its field): a schema 13 objects deep is about 40 levels.
constexpr size_t kMaxJsonDepth = 128;

// The top-level key under which the body first nests deeper than `limit`
// ("" when it does not, or the body is not an object): the last string
// seen at depth 1 before the deep nesting is the key whose value it is.
std::optional<std::string> too_deep(std::string_view s, size_t limit) {
  size_t depth = 0, str_at = 0, key_at = 0, key_len = 0;
  bool in_str = false, esc = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"') {
        in_str = false;
        if (depth == 1) key_at = str_at, key_len = i - str_at;
      }
    } else if (c == '"') {
      in_str = true;
      str_at = i + 1;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return std::string(s.substr(key_at, key_len));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}
}  // namespace

namespace {
template <class J>
J parse_object(std::string_view body) {
  if (auto key = too_deep(body, kMaxJsonDepth))
    throw ApiError(ErrorCode::kInvalidArgument,
                   fmt::format("the JSON body is nested deeper than {} levels{}", kMaxJsonDepth,
                               key->empty() ? "" : " (in " + *key + ")"),
                   *key);
  J j;
  try {
    j = J::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/true,
                 /*ignore_comments=*/false);
  } catch (const typename J::exception& e) {
    throw ApiError(ErrorCode::kInvalidArgument, fmt::format("malformed JSON body: {}", e.what()));
  }
  if (!j.is_object())
    throw ApiError(ErrorCode::kInvalidArgument, "the request body must be a JSON object");
  return j;
}
}  // namespace

json parse_json_object(std::string_view body) {
  return parse_object<json>(body);
}

ordered_json parse_ordered_object(std::string_view body) {
  return parse_object<ordered_json>(body);
}

namespace {

using fields::get_bool;
using fields::get_int;
using fields::get_number;
using fields::get_string;

const char* type_name(const ordered_json& v) {
  return v.type_name();
}

std::vector<int32_t> int_array(const ordered_json& a, const char* key, size_t max_n) {
  if (a.size() > max_n)
    bad_param(key,
              fmt::format("{} has {} token ids; at most {} are accepted", key, a.size(), max_n));
  std::vector<int32_t> out;
  out.reserve(a.size());
  for (const auto& v : a) {
    if (!v.is_number_integer())
      bad_param(key, fmt::format("{} must hold integer token ids (got {})", key, type_name(v)));
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX)
                               : (v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX))
      bad_param(key, fmt::format("{}: token id {} is out of range", key, v.dump()));
    out.push_back(int32_t(v.get<int64_t>()));
  }
  return out;
}

void parse_prompt(const ordered_json& j, CompletionRequest& r, const ParseLimits& lim) {
  auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) bad_param("prompt", "prompt is required");
  const ordered_json* p = &*it;
  // A list of one prompt is accepted; batches are not.
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() != 1)
      bad_param("prompt", fmt::format("batched prompts are not supported (got {}); send one "
                                      "prompt per request",
                                      p->size()));
    p = &(*p)[0];
  }
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    if (r.prompt_text->empty()) bad_param("prompt", "prompt must not be empty");
  } else if (p->is_array()) {
    r.prompt_ids = int_array(*p, "prompt", lim.max_prompt_ids);
    if (r.prompt_ids.empty()) bad_param("prompt", "prompt must not be empty");
  } else {
    bad_param("prompt", fmt::format("prompt must be a string or an array of token ids (got {})",
                                    type_name(*p)));
  }
}

// The stop conditions: "stop" (a string or up to max_stop strings, each
// non-empty and at most max_stop_bytes) and "stop_token_ids" (up to 64 ids;
// the vocabulary bound is checked where the vocabulary is known).
void parse_stops(const ordered_json& j, CompletionRequest& r, const ParseLimits& lim) {
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    const bool many = it->is_array();
    if (many && it->size() > lim.max_stop)
      bad_param("stop", fmt::format("at most {} stop strings (got {})", lim.max_stop, it->size()));
    for (const ordered_json& s : many ? *it : ordered_json::array({*it})) {
      if (!s.is_string()) bad_param("stop", "stop must be a string or an array of strings");
      std::string v = s.get<std::string>();
      if (v.empty()) bad_param("stop", "stop strings must not be empty");
      if (v.size() > lim.max_stop_bytes)
        bad_param("stop", fmt::format("a stop string is longer than {} bytes", lim.max_stop_bytes));
      r.stop.push_back(std::move(v));
    }
  }
  if (auto it = j.find("stop_token_ids"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) bad_param("stop_token_ids", "stop_token_ids must be an array of ids");
    r.stop_token_ids = int_array(*it, "stop_token_ids", 64);
  }
}

// n, best_of and cache_salt (the engine's GenRequest has their meaning).
void parse_choices(const json& j, CompletionRequest& r) {
  r.n = int32_t(get_int(j, "n", 1, kMaxChoices).value_or(1));
  if (auto b = get_int(j, "best_of", 1, kMaxChoices)) {
    if (*b < r.n) bad_param("best_of", fmt::format("best_of must be >= n ({}) (got {})", r.n, *b));
    r.best_of = int32_t(*b);
  }
  if (auto salt = get_string(j, "cache_salt")) {
    if (salt->empty() || salt->size() > kMaxCacheSalt)
      bad_param("cache_salt",
                fmt::format("cache_salt must be a string of 1 to {} bytes", kMaxCacheSalt));
    r.cache_salt = std::move(*salt);
  }
}

// OpenAI fields that change what is generated and that Kvasir does not
// implement: a 400 naming each (silently ignoring them would return
// something else than asked). Neutral values pass.
void refuse_unsupported(const ordered_json& j, bool chat) {
  auto refuse = [](const char* key, const char* why) {
    bad_param(key, fmt::format("{} is not supported by this server{}", key, why));
  };
  for (const char* key : {"suffix", "functions", "function_call", "audio", "prediction",
                          "web_search_options", "guided_whitespace_pattern"})
    if (fields::has(j, key)) refuse(key, "");
  if (auto it = j.find("modalities");
      it != j.end() && !it->is_null() && *it != ordered_json::array({"text"}))
    refuse("modalities", " (text only)");
  if (!chat && fields::has(j, "tools")) refuse("tools", " on /v1/completions (use chat)");
  // vLLM extensions a client may send expecting them honoured; their
  // neutral values (absent, null, false) pass.
  if (chat && fields::get_bool(j, "continue_final_message").value_or(false))
    refuse("continue_final_message", "");
  if (chat && fields::get_bool(j, "echo").value_or(false))
    refuse("echo", " on chat completions (use /v1/completions)");
  if (auto it = j.find("stream_options"); it != j.end() && it->is_object())
    if (fields::get_bool(*it, "continuous_usage_stats", "stream_options.continuous_usage_stats")
            .value_or(false))
      bad_param("stream_options.continuous_usage_stats",
                "stream_options.continuous_usage_stats is not supported by this server");
}

// logit_bias: {"token id": bias, ...}, ids as decimal strings (the vocabulary
// bound is checked where the vocabulary is known), biases numbers in
// [-100, 100], at most kMaxLogitBias of them; sorted by id. Null or {} =
// none.
std::vector<LogitBias> parse_logit_bias(const ordered_json& j) {
  std::vector<LogitBias> out;
  auto it = j.find("logit_bias");
  if (it == j.end() || it->is_null()) return out;
  auto bad = [](const std::string& why) { bad_param("logit_bias", "logit_bias: " + why); };
  if (!it->is_object()) bad("must be an object mapping token ids to biases");
  if (it->size() > size_t(kMaxLogitBias))
    bad(fmt::format("at most {} tokens may be biased (got {})", kMaxLogitBias, it->size()));
  for (const auto& [key, value] : it->items()) {
    int64_t id = -1;
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) id = std::stoll(key);
    if (!digits || id > INT32_MAX)
      bad(fmt::format("key \"{}\" is not a token id (a non-negative integer)", key));
    if (!value.is_number())
      bad(fmt::format("the bias of token {} must be a number (got {})", id, value.type_name()));
    const double v = value.get<double>();
    if (!(v >= -kMaxLogitBiasValue && v <= kMaxLogitBiasValue))
      bad(fmt::format("the bias of token {} must be in [-100, 100] (got {})", id, value.dump()));
    out.push_back(LogitBias{int32_t(id), float(v)});
  }
  std::sort(out.begin(), out.end(),
            [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].token == out[i - 1].token) bad(fmt::format("token {} is named twice", out[i].token));
  return out;
}

// The sampling fields: the model's defaults (generation_config.json, or
// the built-in ones) for those the request does not send.
void parse_sampling(const ordered_json& j, const SamplingParams& d, SamplingParams& s) {
  s.temperature = d.temperature;
  s.top_p = d.top_p;
  s.top_k = d.top_k;
  s.min_p = d.min_p;
  s.repetition_penalty = d.repetition_penalty;
  if (auto v = get_number(j, "temperature")) s.temperature = float(*v);
  if (auto v = get_number(j, "top_p")) s.top_p = float(*v);
  if (auto v = get_int(j, "top_k", -1, INT32_MAX)) s.top_k = *v < 0 ? 0 : int32_t(*v);
  if (auto v = get_number(j, "min_p")) s.min_p = float(*v);
  if (auto v = get_number(j, "repetition_penalty")) s.repetition_penalty = float(*v);
  if (auto v = get_number(j, "presence_penalty")) s.presence_penalty = float(*v);
  if (auto v = get_number(j, "frequency_penalty")) s.frequency_penalty = float(*v);
  if (auto v = get_int(j, "seed", INT64_MIN, INT64_MAX)) {
    s.seed = uint64_t(*v);
    s.has_seed = 1;
  }
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body, bool chat,
                                           const ParseLimits& lim) {
  ordered_json j = parse_ordered_object(body);
  CompletionRequest r;
  r.chat = chat;
  r.model = get_string(j, "model").value_or("");
  if (chat)
    parse_chat_fields(j, r, lim);
  else
    parse_prompt(j, r, lim);
  refuse_unsupported(j, chat);
  r.constraint = parse_constraint(j, chat);
  if (r.constraint &&
      (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed))
    bad_param("tool_choice", fmt::format("tool_choice forces a call, and {} constrains the output "
                                         "otherwise; send one",
                                         r.constraint->param));

  parse_choices(j, r);

  // max_completion_tokens is the newer chat name; it wins if both are
  // given, as in vLLM (max_tokens is deprecated for chat by OpenAI).
  std::optional<int64_t> mt;
  if (chat) mt = get_int(j, "max_completion_tokens", 1, lim.max_tokens_cap);
  if (!chat) r.echo = get_bool(j, "echo").value_or(false);
  // With echo, 0 scores the prompt (its logprobs) and generates nothing:
  // one token is generated and left out, as vLLM does.
  if (!mt) mt = get_int(j, "max_tokens", r.echo ? 0 : 1, lim.max_tokens_cap);
  r.echo_only = mt == 0;
  if (r.echo_only) mt = 1;
  r.max_tokens_given = mt.has_value();
  // Chat's default is the rest of the context (vLLM): the cap, which the
  // route sets to the context and check_context cuts to what is left.
  r.max_tokens = int32_t(mt.value_or(chat ? lim.max_tokens_cap : lim.default_max_tokens));

  SamplingParams& s = r.sampling;
  parse_sampling(j, lim.sampling_defaults, s);

  if (chat) {
    bool lp = get_bool(j, "logprobs").value_or(false);
    auto top = get_int(j, "top_logprobs", 0, kMaxLogprobs);
    if (top && !lp) bad_param("top_logprobs", "top_logprobs needs logprobs: true");
    if (lp) r.logprobs = int(top.value_or(0));
  } else {
    auto it = j.find("logprobs");
    if (it != j.end() && it->is_boolean()) {  // some clients send a boolean
      if (it->get<bool>()) r.logprobs = 0;
    } else if (auto v = get_int(j, "logprobs", 0, kMaxLogprobs)) {
      r.logprobs = int(*v);
    }
  }
  if (r.logprobs >= 0) s.logprobs = uint8_t(r.logprobs);
  r.logit_bias = parse_logit_bias(j);
  // vLLM's extension: each prompt token's logprob and k alternatives.
  if (auto v = get_int(j, "prompt_logprobs", 0, kMaxLogprobs)) r.prompt_logprobs = int(*v);

  parse_stops(j, r, lim);
  r.ignore_eos = get_bool(j, "ignore_eos").value_or(false);
  r.speculative = get_bool(j, "speculative").value_or(true);
  r.skip_special_tokens = get_bool(j, "skip_special_tokens").value_or(true);
  r.stream = get_bool(j, "stream").value_or(false);
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) bad_param("stream_options", "stream_options must be an object");
    if (!r.stream) bad_param("stream_options", "stream_options is only allowed with stream: true");
    r.include_usage = get_bool(*it, "include_usage").value_or(false);
  }

  if (r.prompt_logprobs >= 0 && r.stream)
    bad_param("prompt_logprobs", "prompt_logprobs is not supported with stream: true");
  if (r.best_of > 0 && r.stream)
    bad_param("best_of",
              "best_of is not supported with stream: the best choices are known only "
              "once all have finished");
  const char* field = "";
  if (Status st = validate_sampling(s, &field); !st.ok()) bad_param(field, st.message());
  return r;
}

TokenizeRequest parse_tokenize_request(std::string_view body) {
  ordered_json j = parse_ordered_object(body);
  TokenizeRequest r;
  if (j.contains("messages") && !j["messages"].is_null()) {
    r.chat = parse_chat_turns(j, ParseLimits{});
    r.add_special_tokens = get_bool(j, "add_special_tokens").value_or(false);
  } else {
    r.prompt = get_string(j, "prompt");
    if (!r.prompt) bad_param("prompt", "prompt (a string) or messages is required");
    r.add_special_tokens = get_bool(j, "add_special_tokens").value_or(true);
  }
  return r;
}

std::vector<int32_t> parse_detokenize_request(std::string_view body, size_t max_ids) {
  ordered_json j = parse_ordered_object(body);
  auto it = j.find("tokens");
  if (it == j.end() || !it->is_array()) bad_param("tokens", "tokens must be an array of token ids");
  return int_array(*it, "tokens", max_ids);
}

// ---- responses ----

json finish_reason_json(FinishReason f, bool tool_finish) {
  switch (f) {
    case FinishReason::kStop:
      return tool_finish ? "tool_calls" : "stop";
    case FinishReason::kLength:
      return "length";
    default:
      return nullptr;
  }
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {
// JSON cannot hold -inf: clamp, as other servers do.
double safe_lp(float lp) {
  return std::isfinite(lp) ? double(lp) : -9999.0;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}
}  // namespace

size_t utf8_chars(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

json completion_logprobs_json(const std::vector<TokenLogprob>& lp, size_t off) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& t : lp) {
    tokens.push_back(t.text);
    if (t.none) {  // the prompt's first token: nothing before it to score it by
      lps.push_back(nullptr);
      tops.push_back(nullptr);
    } else {
      lps.push_back(safe_lp(t.logprob));
      json top = json::object();
      for (const auto& [s, v] : t.top) top[s] = safe_lp(v);
      tops.push_back(std::move(top));
    }
    offs.push_back(off);
    off += utf8_chars(t.text);
  }
  return {
      {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json prompt_logprobs_json(const std::vector<PromptLogprobOut>& lp) {
  json out = json::array();
  for (const PromptLogprobOut& p : lp) {
    if (!p.present) {
      out.push_back(nullptr);
      continue;
    }
    json d = json::object();
    for (const PromptLogprobOut::Entry& e : p.entries)
      d[std::to_string(e.token)] = {
          {"logprob", safe_lp(e.logprob)}, {"rank", e.rank}, {"decoded_token", e.text}};
    out.push_back(std::move(d));
  }
  return out;
}

json chat_logprobs_json(const std::vector<TokenLogprob>& lp) {
  json content = json::array();
  for (const auto& t : lp) {
    json top = json::array();
    for (const auto& [s, v] : t.top)
      top.push_back({{"token", s}, {"logprob", safe_lp(v)}, {"bytes", bytes_of(s)}});
    content.push_back({{"token", t.text},
                       {"logprob", safe_lp(t.logprob)},
                       {"bytes", bytes_of(t.text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices,
                         const Usage& u) {
  json out = json::array();
  for (const ChoiceOut& c : choices) {
    out.push_back({{"index", c.index},
                   {"text", c.text},
                   {"logprobs", c.logprobs},
                   {"finish_reason", finish_reason_json(c.finish)}});
    if (!c.prompt_logprobs.is_null()) out.back()["prompt_logprobs"] = c.prompt_logprobs;
  }
  return {{"id", m.id},       {"object", "text_completion"}, {"created", m.created},
          {"model", m.model}, {"choices", std::move(out)},   {"usage", usage_json(u)}};
}

json chat_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices, const Usage& u) {
  json out = json::array();
  for (const ChoiceOut& c : choices) {
    json message = {{"role", "assistant"}, {"content", c.text}};
    if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
    if (!c.calls.empty()) {
      if (c.text.empty()) message["content"] = nullptr;
      json tc = json::array();
      for (const ToolCall& call : c.calls)
        tc.push_back({{"id", call.id},
                      {"type", "function"},
                      {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      message["tool_calls"] = std::move(tc);
    }
    out.push_back({{"index", c.index},
                   {"message", std::move(message)},
                   {"logprobs", c.logprobs},
                   {"finish_reason", finish_reason_json(c.finish, c.tool_finish)}});
  }
  json body = {{"id", m.id},       {"object", "chat.completion"}, {"created", m.created},
               {"model", m.model}, {"choices", std::move(out)},   {"usage", usage_json(u)}};
  // vLLM answers a chat's prompt_logprobs beside the choices (one prompt).
  if (!choices.empty() && !choices[0].prompt_logprobs.is_null())
    body["prompt_logprobs"] = choices[0].prompt_logprobs;
  return body;
}

json completion_response(const ResponseMeta& m, const std::string& text, FinishReason f,
                         const Usage& u, const json& logprobs) {
  ChoiceOut c;
  c.text = text;
  c.finish = f;
  c.logprobs = logprobs;
  return completion_response(m, {std::move(c)}, u);
}

json chat_response(const ResponseMeta& m, const std::string& text, FinishReason f, const Usage& u,
                   const json& logprobs, const std::vector<ToolCall>& calls, bool tool_finish) {
  ChoiceOut c;
  c.text = text;
  c.finish = f;
  c.logprobs = logprobs;
  c.calls = calls;
  c.tool_finish = tool_finish;
  return chat_response(m, {std::move(c)}, u);
}

json completion_chunk(const ResponseMeta& m, const std::string& text, FinishReason f,
                      const json& logprobs, int32_t index) {
  return {{"id", m.id},
          {"object", "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({{{"index", index},
                                    {"text", text},
                                    {"logprobs", logprobs},
                                    {"finish_reason", finish_reason_json(f)}}})}};
}

json chat_chunk(const ResponseMeta& m, const std::optional<std::string>& content, bool with_role,
                FinishReason f, const json& logprobs, int32_t index, bool tool_finish) {
  json delta = json::object();
  if (with_role) delta["role"] = "assistant";
  if (content) delta["content"] = *content;
  return {{"id", m.id},
          {"object", "chat.completion.chunk"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({{{"index", index},
                                    {"delta", delta},
                                    {"logprobs", logprobs},
                                    {"finish_reason", finish_reason_json(f, tool_finish)}}})}};
}

json chat_reasoning_chunk(const ResponseMeta& m, const std::string& text, int32_t index) {
  return {{"id", m.id},
          {"object", "chat.completion.chunk"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({{{"index", index},
                                    {"delta", {{"reasoning_content", text}}},
                                    {"logprobs", nullptr},
                                    {"finish_reason", nullptr}}})}};
}

json chat_tool_chunk(const ResponseMeta& m, const std::vector<ToolCallDelta>& deltas,
                     int32_t index) {
  json calls = json::array();
  for (const ToolCallDelta& d : deltas) {
    json c = {{"index", d.index}};
    if (d.first) {
      c["id"] = d.id;
      c["type"] = "function";
      c["function"] = {{"name", d.name}, {"arguments", d.arguments}};
    } else {
      c["function"] = {{"arguments", d.arguments}};
    }
    calls.push_back(std::move(c));
  }
  return {{"id", m.id},
          {"object", "chat.completion.chunk"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({{{"index", index},
                                    {"delta", {{"tool_calls", std::move(calls)}}},
                                    {"logprobs", nullptr},
                                    {"finish_reason", nullptr}}})}};
}

json usage_chunk(const ResponseMeta& m, bool chat, const Usage& u) {
  return {{"id", m.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array()},
          {"usage", usage_json(u)}};
}

std::string sse_event(const json& j) {
  // dump() escapes control characters, so the payload never holds a newline.
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

}  // namespace kvasir
