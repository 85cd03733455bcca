// A fake Engine and a byte-level TextCodec, for the HTTP-layer tests ONLY.
// They exercise routing, validation, streaming, limits and cancellation of
// the front door in-process; end-to-end tests against the real kvasird (its
// ring, scheduler and tokenizer) are in tests/integration/test_api_e2e.sh.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "base/check.h"
#include "daemon/api/api.h"
#include "model/chat_template.h"

namespace kvasir::test {

// Token id = byte value; 256 is the end-of-generation token.
class FakeCodec : public TextCodec {
 public:
  static constexpr int32_t kEog = 256;
  std::vector<int32_t> encode(const std::string& text, bool, bool) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids)
      if (id < 256)
        s += char(id);
      else if (!skip_special)
        s += "<eog>";
    return s;
  }
  std::unique_ptr<TextStream> stream(bool skip_special) const override {
    struct S : TextStream {
      const FakeCodec* c;
      bool skip;
      std::string push(int32_t id) override { return c->decode({id}, skip); }
      std::string flush() override { return ""; }
    };
    auto s = std::make_unique<S>();
    s->c = this;
    s->skip = skip_special;
    return s;
  }
  int32_t vocab_size() const override { return 257; }
  bool is_eog(int32_t id) const override { return id == kEog; }
  // "role: content\n" per message, then "assistant: "; refuses (as a
  // template's raise_exception) when chat_template_kwargs has "refuse".
  // With `chat` set, that real template renders instead (clock `now`).
  std::vector<int32_t> encode_chat(const ChatTurns& c) const override {
    if (chat) {
      ChatInput in;
      in.messages = c.messages;
      in.tools = c.tools;
      in.kwargs = c.kwargs;
      in.add_generation_prompt = c.add_generation_prompt;
      in.now = now;
      return encode(chat->apply(in).text(), false, false);
    }
    KV_CHECK(!c.kwargs.contains("refuse"), "the template refuses this conversation");
    std::string s;
    for (const auto& m : c.messages) {
      s += m["role"].get<std::string>() + ": " +
           (m["content"].is_string() ? m["content"].get<std::string>() : std::string()) + "\n";
    }
    s += c.add_generation_prompt ? "assistant: " : "";
    return encode(s, false, false);
  }
  std::string chat_template_source() const override {
    ++source_reads;
    return source;
  }
  std::string source = "{{ messages }}";
  std::shared_ptr<const ChatTemplate> chat;
  std::optional<std::tm> now;
  mutable std::atomic<int> source_reads{0};  // the facts read it once, at setup
};

// A grammar service that answers from another thread, after `delay_ms`,
// with `answer` (ok: the spec is "wire:" and the constraint's text).
class FakeGrammar : public GrammarService {
 public:
  Status answer;
  std::atomic<int> delay_ms{0};
  ~FakeGrammar() override {
    for (auto& t : threads_) t.join();
  }
  void compile(const OutputConstraint& c, Done done) override {
    std::lock_guard lk(mu_);
    seen.push_back(c);
    Status st = answer;
    threads_.emplace_back([this, st, text = c.text, done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
      done(st, st.ok() ? std::make_shared<const std::string>("wire:" + text) : nullptr);
    });
  }
  std::vector<OutputConstraint> seen;

 private:
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

// Replies with the bytes of `reply` (then the EOG token), one event per token,
// each on a thread of its own after `delay_ms`. With n > 1 each choice on a
// thread of its own: choice i > 0 says "<i>" first, and its tokens' logprob
// is -0.25 x (i + 1) (so best_of ranks the choices by index).
class FakeEngine : public Engine {
 public:
  std::string reply = "Hello world. This is the fake engine.";
  std::atomic<int> delay_ms{0};
  std::atomic<bool> is_ready{true};
  std::atomic<int32_t> cached_tokens{0};  // every event's cached_tokens
  Status refuse;                          // not ok: refuse every request with this error
  RingReport ring;                        // what ring_report() says (set before serving)
  std::atomic<int32_t> max_tokens_per_sequence{0};  // max_sequence_tokens() (0: unknown)

  ~FakeEngine() override {
    for (auto& t : threads_) t.join();
  }

  RequestId submit(GenRequest req, EventSink sink) override {
    std::lock_guard lk(mu_);
    submitted.push_back(req);
    if (!refuse.ok()) {
      TokenEvent ev;
      ev.finish = FinishReason::kError;
      ev.error = refuse;
      sink(ev);
      return 0;
    }
    RequestId id = ++next_;
    for (int32_t choice = 0; choice < std::max(req.n, 1); ++choice)
      threads_.emplace_back([this, id, choice, req, sink] { run(id, choice, req, sink); });
    return id;
  }
  void run(RequestId id, int32_t choice, const GenRequest& req, const EventSink& sink) {
    const std::string text = choice ? "<" + std::to_string(choice) + ">" + reply : reply;
    for (int i = 0;; ++i) {
      if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      TokenEvent ev;
      ev.index = choice;
      ev.cached_tokens = cached_tokens;
      if (was_cancelled(id) || was_stopped(id, choice)) {
        ev.finish = FinishReason::kAbort;
        sink(ev);
        return;
      }
      bool eog = size_t(i) >= text.size() && !req.ignore_eos;
      ev.token = eog ? FakeCodec::kEog : static_cast<unsigned char>(text[i % text.size()]);
      ev.logprob = -0.25f * float(choice + 1);
      if (req.sampling.logprobs) ev.top_logprobs = {{ev.token, ev.logprob}};
      if (eog)
        ev.finish = FinishReason::kStop;
      else if (i + 1 >= req.max_tokens)
        ev.finish = FinishReason::kLength;
      sink(ev);
      if (ev.finish != FinishReason::kNone) return;
    }
  }
  void cancel(RequestId id) override {
    std::lock_guard lk(mu_);
    cancelled.insert(id);
  }
  void stop_choice(RequestId id, int32_t index) override {
    std::lock_guard lk(mu_);
    stopped.insert({id, index});
  }
  bool was_stopped(RequestId id, int32_t index) {
    std::lock_guard lk(mu_);
    return stopped.count({id, index}) > 0;
  }
  EngineStats stats() const override {
    EngineStats s;
    s.running = 1;
    s.blocks_total = 100;
    s.blocks_free = 60;
    s.prefix_caching = true;
    s.blocks_cached = 7;
    s.blocks_evictable = 5;
    s.blocks_swa_total = 40;  // a sliding-window group
    s.blocks_swa_free = 30;
    s.blocks_swa_cached = 6;
    s.blocks_swa_evictable = 4;
    s.prefix_queries = 200;
    s.prefix_hits = 150;
    return s;
  }
  RingReport ring_report() const override { return ring; }
  bool ready() const override { return is_ready; }
  int32_t max_sequence_tokens() const override { return max_tokens_per_sequence; }

  bool was_cancelled(RequestId id) {
    std::lock_guard lk(mu_);
    return cancelled.count(id) > 0;
  }
  size_t n_cancelled() {
    std::lock_guard lk(mu_);
    return cancelled.size();
  }
  GenRequest last() {
    std::lock_guard lk(mu_);
    return submitted.back();
  }

  std::vector<GenRequest> submitted;
  std::set<RequestId> cancelled;
  std::set<std::pair<RequestId, int32_t>> stopped;

 private:
  std::mutex mu_;
  std::vector<std::thread> threads_;
  RequestId next_ = 0;
};

}  // namespace kvasir::test
