// daemon/api/api_generate.cpp — one completion or chat request, from the parsed
// body to the last byte: tokenize, submit, then turn engine events (posted to
// the io thread) into text with the incremental detokenizer, match stop
// strings on that text, and answer in one JSON body or as SSE chunks.
#include <fmt/format.h>

#include <algorithm>

#include "base/check.h"
#include "daemon/api/api_internal.h"
#include "daemon/api/chat_turns.h"
#include "daemon/api/ids.h"
#include "daemon/api/openai_stop.h"
#include "daemon/api/tool_calls.h"

namespace kvasir {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

ApiError engine_error(const Status& error) {
  // The engine refuses a request for its prompt (bad ids, too long) or for
  // reasons of its own; only the former names a parameter.
  const bool prompt_at_fault =
      error.code() == ErrorCode::kInvalidArgument || error.code() == ErrorCode::kContextLength;
  return ApiError(error.code(), error.message(), prompt_at_fault ? "prompt" : "");
}

// One request's answer: n choices (best_of generated), each with its own
// incremental detokenizer, stop matcher, text and logprobs. A stream sends
// each choice's pieces as they come, tagged with its index, each choice's
// last chunk with its finish_reason, and ends when all have finished; a
// whole response waits for all. Usage counts the prompt once.
class Generation : public std::enable_shared_from_this<Generation> {
 public:
  // tools: the calls' syntax when the output is parsed for tool calls (a
  // chat request with tools and tool_choice other than none); each choice
  // has its own parser.
  Generation(std::shared_ptr<ApiService::Impl> api, std::shared_ptr<Responder> res,
             CompletionRequest req, std::string route, std::optional<ToolFormat> tools)
      : api_(std::move(api)),
        res_(std::move(res)),
        req_(std::move(req)),
        route_(std::move(route)),
        tool_format_(tools) {}

  // Registers the request (shutdown and disconnects reach it from now on)
  // and fills in the response's id, model, time and choices.
  void begin(size_t prompt_tokens, std::string echo_text) {
    // Unique across restarts and replicas and not guessable from another
    // response (a serial times a constant was both): 128 random bits.
    meta_.id = fmt::format("{}-{}", req_.chat ? "chatcmpl" : "cmpl", random_hex(16));
    // The name the client used (check_model accepted it), as vLLM answers.
    meta_.model = req_.model.empty() ? api_->ctx.model_name : req_.model;
    meta_.created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    usage_.prompt_tokens = int64_t(prompt_tokens);
    const bool forced =
        req_.tool_choice == ToolChoice::kRequired || req_.tool_choice == ToolChoice::kNamed;
    for (int32_t i = 0; i < req_.generated(); ++i) {
      auto c = std::make_unique<Choice>(req_.stop);
      c->index = i;
      c->dec = api_->ctx.codec->stream(req_.skip_special_tokens);
      if (req_.echo) c->pending_text = echo_text;
      if (tool_format_)
        c->tools.emplace(*tool_format_, forced, random_u64());
      choices_.push_back(std::move(c));
    }
    res_->on_close([w = weak_from_this()] {
      if (auto s = w.lock()) s->client_gone();
    });
    serial_ = api_->next_serial.fetch_add(1);
    std::lock_guard lk(api_->gens_mu);
    api_->gens[serial_] = shared_from_this();
  }

  // The request goes to the engine (grammar: its constraint's checked
  // spec, or null; every choice follows it).
  void submit(std::vector<int32_t> prompt, std::shared_ptr<const std::string> grammar) {
    if (done_) return;  // the client left while its constraint compiled
    // Engine events come on the engine's thread: hop to the io thread.
    auto self = shared_from_this();
    std::weak_ptr<PostGate> gate = api_->gate;
    auto sink = [self, gate](const TokenEvent& ev) {
      if (auto g = gate.lock()) g->run([self, ev] { self->on_event(ev); });
    };
    t_submit_ = Clock::now();
    if (req_.engine_prompt_logprobs() >= 0) {
      prompt_ = prompt;
      for (auto& c : choices_) c->prompt_lp.assign(prompt.size(), std::nullopt);
    }
    GenRequest g = gen_request(std::move(prompt));
    g.grammar = std::move(grammar);
    id_ = api_->engine.submit(std::move(g), std::move(sink));
    if (cancel_when_submitted_ && id_ != 0) api_->engine.cancel(id_);
  }

  // The grammar service's answer for the request's constraint (io thread).
  void compiled(std::vector<int32_t> prompt, const Status& st,
                std::shared_ptr<const std::string> spec, const std::string& param) {
    if (done_) return;
    constraint_param_ = param;
    if (st.ok()) return submit(std::move(prompt), std::move(spec));
    fail(ApiError(st.code(), st.message(),
                  st.code() == ErrorCode::kInvalidArgument ? param : std::string()));
  }

  // The client went away (io thread): abort at the next iteration.
  void client_gone() {
    if (done_) return;
    {
      std::lock_guard lk(api_->metrics.mu);
      api_->metrics.cancelled++;
    }
    end(false);
    cancel();
  }

  // The daemon is stopping and the drain is over (io thread).
  void abort(const ApiError& e) {
    if (done_) return;
    fail(e);
    cancel();
  }

  void cancel() {
    if (RequestId id = id_.load(); id != 0)
      api_->engine.cancel(id);
    else
      cancel_when_submitted_ = true;
  }

 private:
  struct Choice {
    explicit Choice(const std::vector<std::string>& stops) : stop(stops) {}
    int32_t index = 0;
    std::unique_ptr<TextStream> dec;
    StopMatcher stop;
    std::string pending_text, full_text;
    std::vector<TokenLogprob> pending_lp, all_lp;
    size_t text_offset = 0;
    double cum_logprob = 0;  // best_of ranks by it
    FinishReason finish = FinishReason::kNone;
    bool done = false, stopped = false;  // stopped: by a stop string (its kAbort follows)
    bool any_token = false;
    Clock::time_point t_last;
    std::optional<ToolCallStream> tools;  // chat with tools: the output parsed for calls
    // Prompt logprobs by position (engine_prompt_logprobs): as the engine
    // scored them, each once (a recompute may send one again).
    std::vector<std::optional<PromptLogprob>> prompt_lp;
    bool prompt_listed = false;  // echo with logprobs: the prompt's went into pending_lp
  };

  GenRequest gen_request(std::vector<int32_t> prompt) const {
    GenRequest g;
    g.prompt = std::move(prompt);
    g.max_tokens = req_.max_tokens;
    g.sampling = req_.sampling;
    g.stop_ids = req_.stop_token_ids;
    g.ignore_eos = req_.ignore_eos;
    g.speculative = req_.speculative;
    g.n = req_.generated();
    g.cache_salt = req_.cache_salt;
    if (!req_.logit_bias.empty())
      g.logit_bias = std::make_shared<const std::vector<LogitBias>>(req_.logit_bias);
    g.prompt_logprobs = req_.engine_prompt_logprobs();
    return g;
  }

  void on_event(const TokenEvent& ev) {
    if (done_ || ev.index < 0 || size_t(ev.index) >= choices_.size()) return;
    Choice& c = *choices_[size_t(ev.index)];
    if (c.done) return;  // a choice a stop string ended: its kAbort
    if (ev.index == 0) usage_.cached_tokens = ev.cached_tokens;
    for (const PromptLogprob& p : ev.prompt_logprobs)
      if (p.position > 0 && size_t(p.position) < c.prompt_lp.size())
        c.prompt_lp[size_t(p.position)] = p;
    if (ev.token < 0 && ev.finish == FinishReason::kNone) return;
    list_prompt(c);
    if (req_.echo_only && ev.token >= 0) {
      // Scoring only: the one token generated is not the answer's.
      TokenEvent end;
      end.finish = FinishReason::kLength;
      return on_event_end(c, end);
    }
    if (ev.token >= 0 && !on_token(c, ev)) return;
    on_event_end(c, ev);
  }

  // The end an event carries, if any (its token, if any, already taken).
  void on_event_end(Choice& c, const TokenEvent& ev) {
    switch (ev.finish) {
      case FinishReason::kNone:
        return;
      case FinishReason::kStop:
      case FinishReason::kLength: {
        std::string rest = c.stop.push(c.dec->flush());
        c.pending_text += rest;
        if (!c.stop.matched()) c.pending_text += c.stop.flush();
        return finish_choice(c, c.stop.matched() ? FinishReason::kStop : ev.finish);
      }
      case FinishReason::kAbort:
        if (!started_)
          return fail(
              ApiError(ErrorCode::kAborted, "the request was aborted (the daemon is stopping)"));
        return finish_choice(c, FinishReason::kAbort);
      case FinishReason::kError: {
        // Invalid mid-generation, under a constraint: the spec, not the
        // prompt (the tail found it allows no continuation, or it could
        // not be compiled in time).
        if (ev.error.code() == ErrorCode::kInvalidArgument && !constraint_param_.empty())
          fail(ApiError(ev.error.code(), ev.error.message(), constraint_param_));
        else
          fail(engine_error(ev.error));
        return cancel();
      }
    }
  }

  // A token of choice c: its text through the stop matcher. False when a
  // stop string ended the choice (the rest of the event does not count).
  bool on_token(Choice& c, const TokenEvent& ev) {
    observe_latency(c);
    usage_.completion_tokens++;
    c.cum_logprob += ev.logprob;
    bool final_stop =
        ev.finish == FinishReason::kStop &&
        (api_->ctx.facts->is_eog(ev.token) ||
         std::count(req_.stop_token_ids.begin(), req_.stop_token_ids.end(), ev.token));
    std::string piece;
    try {
      piece = final_stop ? c.dec->flush() : c.dec->push(ev.token);
    } catch (const std::exception&) {
      piece = "\xEF\xBF\xBD";  // an id the tokenizer cannot decode: U+FFFD
    }
    if (req_.logprobs >= 0) add_logprob(c, ev);
    c.pending_text += c.stop.push(piece);
    if (c.stop.matched()) {
      {
        std::lock_guard lk(api_->metrics.mu);
        api_->metrics.stopped_by_string++;
      }
      stop_choice(c);
      finish_choice(c, FinishReason::kStop);
      return false;
    }
    if (ev.finish == FinishReason::kNone) emit_pending(c);
    return true;
  }

  // TTFT: the request's first token (any choice); ITL: within a choice.
  void observe_latency(Choice& c) {
    const auto now = Clock::now();
    std::lock_guard lk(api_->metrics.mu);
    if (!any_token_)
      api_->metrics.ttft.observe(std::chrono::duration<double>(now - t_submit_).count());
    else if (c.any_token)
      api_->metrics.itl.observe(std::chrono::duration<double>(now - c.t_last).count());
    any_token_ = c.any_token = true;
    c.t_last = now;
  }

  // A stop string ended choice c: the engine stops generating it.
  void stop_choice(Choice& c) {
    c.stopped = true;
    if (choices_.size() == 1) return cancel();
    if (RequestId id = id_.load(); id != 0) api_->engine.stop_choice(id, c.index);
  }

  std::string text_of(int32_t id) const {
    try {
      return api_->ctx.codec->decode({id}, false);
    } catch (const std::exception&) {
      return std::string();
    }
  }

  // Echo with logprobs: before the choice's first output, the prompt's
  // tokens go first into its logprobs (the first with none, as vLLM), so
  // text_offset counts from the start of the echoed text.
  void list_prompt(Choice& c) {
    if (c.prompt_listed || !req_.echo || req_.logprobs < 0 || prompt_.empty()) return;
    c.prompt_listed = true;
    std::vector<TokenLogprob> lp;
    for (size_t i = 0; i < prompt_.size(); ++i) {
      TokenLogprob t{text_of(prompt_[i]), 0.f, {}};
      const std::optional<PromptLogprob>& p = c.prompt_lp[i];
      t.none = !p;
      if (p) t.logprob = p->logprob;
      for (size_t j = 0; p && j < p->top.size() && int(j) < req_.logprobs; ++j)
        t.top.emplace_back(text_of(p->top[j].first), p->top[j].second);
      lp.push_back(std::move(t));
    }
    c.pending_lp.insert(c.pending_lp.begin(), lp.begin(), lp.end());
  }

  // prompt_logprobs as vLLM answers it: null for the first position (and
  // any the engine did not score), else the prompt's token and the top k.
  json prompt_logprobs_of(const Choice& c) const {
    std::vector<PromptLogprobOut> out(c.prompt_lp.size());
    for (size_t i = 0; i < c.prompt_lp.size(); ++i) {
      const std::optional<PromptLogprob>& p = c.prompt_lp[i];
      if (!p) continue;
      out[i].present = true;
      out[i].entries.push_back({p->token, text_of(p->token), p->logprob, p->rank});
      for (size_t j = 0; j < p->top.size() && int(j) < req_.prompt_logprobs; ++j)
        if (p->top[j].first != p->token)
          out[i].entries.push_back(
              {p->top[j].first, text_of(p->top[j].first), p->top[j].second, int32_t(j) + 1});
    }
    return prompt_logprobs_json(out);
  }

  void add_logprob(Choice& c, const TokenEvent& ev) {
    TokenLogprob t{text_of(ev.token), ev.logprob, {}};
    for (const auto& [id, lp] : ev.top_logprobs) t.top.emplace_back(text_of(id), lp);
    c.pending_lp.push_back(std::move(t));
  }

  json take_logprobs(Choice& c) {
    if (req_.logprobs < 0) return nullptr;
    json j = req_.chat ? chat_logprobs_json(c.pending_lp)
                       : completion_logprobs_json(c.pending_lp, c.text_offset);
    for (const auto& t : c.pending_lp) c.text_offset += utf8_chars(t.text);
    c.pending_lp.clear();
    return j;
  }

  void begin_stream() {
    if (started_) return;
    started_ = true;
    res_->start_stream(200, "text/event-stream");
    if (req_.chat)
      for (const auto& c : choices_)
        res_->write(sse_event(
            chat_chunk(meta_, std::string(), true, FinishReason::kNone, nullptr, c->index)));
  }

  // Streaming: send what is ready; whole responses accumulate.
  void emit_pending(Choice& c) {
    if (req_.stream && c.tools) return emit_tools(c, c.tools->push(c.pending_text));
    if (!req_.stream) {
      c.full_text += c.pending_text;
      c.pending_text.clear();
      c.all_lp.insert(c.all_lp.end(), c.pending_lp.begin(), c.pending_lp.end());
      c.pending_lp.clear();
      return;
    }
    begin_stream();
    if (c.pending_text.empty()) return;
    json lp = take_logprobs(c);
    json chunk = req_.chat
                     ? chat_chunk(meta_, c.pending_text, false, FinishReason::kNone, lp, c.index)
                     : completion_chunk(meta_, c.pending_text, FinishReason::kNone, lp, c.index);
    c.pending_text.clear();
    res_->write(sse_event(chunk));
  }

  // Streaming with tool calls: content and call pieces of choice c as its
  // parser gives them (tool_calls.h); pending text is the parser's now.
  void emit_tools(Choice& c, const ToolCallStream::Out& o) {
    c.pending_text.clear();
    begin_stream();
    if (!o.reasoning.empty())
      res_->write(sse_event(chat_reasoning_chunk(meta_, o.reasoning, c.index)));
    if (!o.content.empty())
      res_->write(sse_event(
          chat_chunk(meta_, o.content, false, FinishReason::kNone, take_logprobs(c), c.index)));
    if (!o.deltas.empty()) res_->write(sse_event(chat_tool_chunk(meta_, o.deltas, c.index)));
  }

  // Tool calls end a choice with finish_reason "tool_calls", except a call
  // forced by name ("stop", as OpenAI and vLLM answer it) and calls the end
  // cut short (the reason the output ended: "length" or "stop").
  bool tool_finish(const Choice& c) const {
    return c.tools && !c.tools->calls().empty() && !c.tools->cut() &&
           req_.tool_choice != ToolChoice::kNamed;
  }

  // Choice c is over: a stream sends its last chunk; the request completes
  // with its last choice.
  void finish_choice(Choice& c, FinishReason f) {
    if (c.done) return;
    c.done = true;
    c.finish = f;
    emit_pending(c);
    if (req_.stream) {
      if (c.tools) emit_tools(c, c.tools->finish());
      json chunk = req_.chat ? chat_chunk(meta_, std::nullopt, false, f, take_logprobs(c), c.index,
                                          tool_finish(c))
                             : completion_chunk(meta_, "", f, take_logprobs(c), c.index);
      res_->write(sse_event(chunk));
    }
    if (++n_done_ == choices_.size()) complete();
  }

  // The choices a whole response returns: all of them by index, or with
  // best_of the n of highest cumulative logprob, indexed 0..n-1.
  std::vector<ChoiceOut> returned() {
    std::vector<Choice*> order;
    for (auto& c : choices_) order.push_back(c.get());
    if (req_.best_of > 0)
      std::stable_sort(order.begin(), order.end(), [](const Choice* a, const Choice* b) {
        return a->cum_logprob > b->cum_logprob;
      });
    std::vector<ChoiceOut> out;
    for (int32_t i = 0; i < req_.n && size_t(i) < order.size(); ++i) {
      Choice& c = *order[size_t(i)];
      json lp = nullptr;
      if (req_.logprobs >= 0)
        lp = req_.chat ? chat_logprobs_json(c.all_lp) : completion_logprobs_json(c.all_lp, 0);
      ChoiceOut o;
      o.index = i;
      o.text = c.full_text;
      o.finish = c.finish;
      o.logprobs = std::move(lp);
      if (req_.prompt_logprobs >= 0) o.prompt_logprobs = prompt_logprobs_of(c);
      if (c.tools) {
        c.tools->push(c.full_text);
        c.tools->finish();
        o.text = c.tools->content();
        o.reasoning = c.tools->reasoning();
        o.calls = c.tools->calls();
        o.tool_finish = tool_finish(c);
      }
      out.push_back(std::move(o));
    }
    return out;
  }

  void complete() {
    if (done_) return;
    if (!req_.stream) {
      const std::vector<ChoiceOut> out = returned();
      json body =
          req_.chat ? chat_response(meta_, out, usage_) : completion_response(meta_, out, usage_);
      api_->send_json(res_, route_, 200, body);
    } else {
      begin_stream();
      std::string out;
      if (req_.include_usage) out += sse_event(usage_chunk(meta_, req_.chat, usage_));
      out += sse_done();
      res_->write(std::move(out));
      res_->finish();
      api_->count(route_, 200);
    }
    end(true);
  }

  void fail(const ApiError& e) {
    if (done_) return;
    if (!started_) {
      api_->send_error(res_, route_, e);
    } else {
      // Headers are gone: the error travels as an event, then the stream ends.
      res_->write(sse_event(error_body(e)) + sse_done());
      res_->finish();
      api_->count(route_, e.status);
    }
    end(false);
  }

  void end(bool ok) {
    done_ = true;
    if (ok) {
      std::lock_guard lk(api_->metrics.mu);
      api_->metrics.e2e.observe(std::chrono::duration<double>(Clock::now() - t_submit_).count());
    }
    std::lock_guard lk(api_->gens_mu);
    api_->gens.erase(serial_);
  }

  std::shared_ptr<ApiService::Impl> api_;
  std::shared_ptr<Responder> res_;
  CompletionRequest req_;
  std::string route_;
  std::optional<ToolFormat> tool_format_;
  ResponseMeta meta_;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::vector<int32_t> prompt_;  // kept when prompt logprobs are asked for
  size_t n_done_ = 0;
  Usage usage_;
  std::atomic<RequestId> id_{0};  // cancel() may come from another thread (shutdown)
  uint64_t serial_ = 0;
  std::string constraint_param_;  // the field that carried its constraint ("" without one)
  std::atomic<bool> cancel_when_submitted_{false};
  bool started_ = false, done_ = false, any_token_ = false;
  Clock::time_point t_submit_;
};

namespace {

// The tool-call syntax of a chat request whose output is parsed for calls.
// A harmony model's chat output is always parsed: its channels carry the
// reasoning apart from the answer, tools or not.
std::optional<ToolFormat> tool_format(const CompletionRequest& req, const ModelFacts& facts) {
  if (!req.chat) return std::nullopt;
  if (facts.tool_format == ToolFormat::kHarmony) return ToolFormat::kHarmony;
  if (req.tool_choice == ToolChoice::kNone) return std::nullopt;
  return facts.tool_format;
}

}  // namespace

// A chat request's prompt: its conversation made into what the model's
// template renders (chat_turns.h), rendered and tokenized without turn
// injection (TextCodec::encode_chat).
std::vector<int32_t> ApiService::Impl::chat_prompt(const ChatTurns& turns) const {
  ChatTurns adapted = adapt_chat_turns(turns, ctx.facts->template_traits, ctx.facts->tool_format);
  try {
    return ctx.codec->encode_chat(adapted);
  } catch (const Error& e) {
    throw ApiError(e.code(), "cannot apply the chat template: " + e.message(), "messages");
  }
}

// A completion's prompt: its text tokenized, or its ids checked; the text
// `echo` prepends.
std::vector<int32_t> ApiService::Impl::completion_prompt(const CompletionRequest& req,
                                                         std::string& echo) const {
  const TextCodec& codec = *ctx.codec;
  if (req.prompt_text) {
    echo = *req.prompt_text;
    return codec.encode(*req.prompt_text, true, true);
  }
  const int32_t vocab = ctx.facts->vocab_size;
  for (size_t i = 0; i < req.prompt_ids.size(); ++i)
    if (req.prompt_ids[i] < 0 || req.prompt_ids[i] >= vocab)
      throw ApiError(ErrorCode::kInvalidArgument,
                     fmt::format("prompt[{}]: token id {} is out of range (vocabulary: {})", i,
                                 req.prompt_ids[i], vocab),
                     "prompt");
  if (req.echo) echo = codec.decode(req.prompt_ids, req.skip_special_tokens);
  return req.prompt_ids;
}

int32_t ApiService::Impl::max_model_len() const {
  const int32_t engine_max = engine.max_sequence_tokens();
  return engine_max > 0 ? engine_max : ctx.max_model_len;
}

// The prompt and max_tokens against the context; max_tokens not given is
// cut to what is left of it (chat's default is all of it, as in vLLM).
void ApiService::Impl::check_context(CompletionRequest& req, size_t prompt_tokens) const {
  const char* what = req.chat ? "messages" : "prompt";
  if (prompt_tokens == 0)
    throw ApiError(ErrorCode::kInvalidArgument, "the prompt encodes to no tokens", what);
  for (int32_t id : req.stop_token_ids)
    if (id >= ctx.facts->vocab_size)
      throw ApiError(ErrorCode::kInvalidArgument,
                     fmt::format("stop_token_ids: {} is out of range", id), "stop_token_ids");
  if (Status st = validate_logit_bias(req.logit_bias, ctx.facts->vocab_size); !st.ok())
    throw ApiError(ErrorCode::kInvalidArgument, st.message(), "logit_bias");
  const int32_t max_len = max_model_len();
  if (max_len <= 0) return;
  const int64_t n = int64_t(prompt_tokens);
  if (n >= max_len)
    throw ApiError(ErrorCode::kContextLength,
                   fmt::format("this model's maximum context length is {} tokens; the prompt "
                               "has {}",
                               max_len, n),
                   what);
  const int64_t room = max_len - n;
  if (req.max_tokens <= room) return;
  if (req.max_tokens_given)
    throw ApiError(ErrorCode::kContextLength,
                   fmt::format("this model's maximum context length is {} tokens; you asked "
                               "for {} ({} in the prompt, {} to generate)",
                               max_len, n + req.max_tokens, n, req.max_tokens),
                   "max_tokens");
  req.max_tokens = int32_t(room);
}

void ApiService::Impl::generate(const HttpRequest& http, const std::shared_ptr<Responder>& res,
                                bool chat) {
  const std::string route = chat ? "/v1/chat/completions" : "/v1/completions";
  ParseLimits lim = opts.limits;
  lim.sampling_defaults = ctx.sampling_defaults;
  if (const int32_t max_len = max_model_len(); max_len > 0)
    lim.max_tokens_cap = std::min(lim.max_tokens_cap, max_len);
  CompletionRequest req = parse_completion_request(http.body, chat, lim);
  check_model(req.model);
  if (draining)
    throw ApiError(ErrorCode::kStopping,
                   "the daemon is stopping; retry on another instance or later");
  if (!engine.ready())
    throw ApiError(ErrorCode::kLoading, "the model is still loading; retry later");
  std::string echo;
  std::vector<int32_t> prompt = chat ? chat_prompt(req.chat_turns) : completion_prompt(req, echo);
  check_context(req, prompt.size());
  const std::optional<ToolFormat> tools = tool_format(req, *ctx.facts);
  const bool forced =
      req.tool_choice == ToolChoice::kRequired || req.tool_choice == ToolChoice::kNamed;
  // A harmony call opens with control tokens, which no grammar can force.
  if (tools == ToolFormat::kHarmony && forced)
    throw ApiError(ErrorCode::kInvalidArgument,
                   "tool_choice 'required' or a named function is not supported for this model "
                   "(gpt-oss's harmony format): use 'auto'",
                   "tool_choice");
  if (tools && forced)
    req.constraint =
        tool_call_constraint(*tools, req.chat_turns.tools, req.tool_name, req.parallel_tool_calls);
  // Mistral's and harmony's markers are control tokens: the parser must see them.
  if (tools == ToolFormat::kMistral || tools == ToolFormat::kHarmony)
    req.skip_special_tokens = false;
  std::optional<OutputConstraint> constraint = std::move(req.constraint);
  if (constraint && !ctx.grammar)
    throw ApiError(ErrorCode::kInvalidArgument,
                   "structured outputs are not available on this server", constraint->param);
  auto gen = std::make_shared<Generation>(shared_from_this(), res, std::move(req), route, tools);
  gen->begin(prompt.size(), std::move(echo));
  if (!constraint) return gen->submit(std::move(prompt), nullptr);
  // Checked on arrival (a bad one is a 400 before anything is scheduled);
  // the answer comes back to this thread (the tail compiles it).
  std::weak_ptr<PostGate> gate = this->gate;
  ctx.grammar->compile(*constraint,
                       [gen, gate, prompt = std::move(prompt), param = constraint->param](
                           Status st, std::shared_ptr<const std::string> spec) {
                         if (auto g = gate.lock())
                           g->run([gen, prompt, st, spec, param]() mutable {
                             gen->compiled(std::move(prompt), st, std::move(spec), param);
                           });
                       });
}

size_t ApiService::abort_all(const std::string& message) {
  std::vector<std::shared_ptr<Generation>> live;
  {
    std::lock_guard lk(impl_->gens_mu);
    for (auto& [k, w] : impl_->gens)
      if (auto g = w.lock()) live.push_back(g);
  }
  ApiError e(ErrorCode::kAborted, message);
  for (auto& g : live) g->abort(e);
  return live.size();
}

void ApiService::shutdown() {
  impl_->gate->close();
  std::vector<std::shared_ptr<Generation>> live;
  {
    std::lock_guard lk(impl_->gens_mu);
    for (auto& [k, w] : impl_->gens)
      if (auto g = w.lock()) live.push_back(g);
  }
  for (auto& g : live) g->cancel();
}

}  // namespace kvasir
