// daemon/api/grammar_service.cpp — the daemon's GrammarService (api.h): a
// GrammarCompiler over the model's vocabulary, driven from a few waiter
// threads so that the io thread never blocks on a compilation.
//
// A compile() call goes into a bounded queue (full: kQueueFull at once);
// a waiter takes it and calls GrammarCompiler::compile, which waits at most
// the compile deadline (grammar.compile_timeout) for a worker's result and
// caches it. A request that waited in the queue past the deadline is
// answered kQueueFull without being compiled. So a pathological spec costs
// one compile worker until XGrammar finishes it (it cannot be interrupted)
// and its sender a 400 at the deadline; others keep compiling on the other
// workers, or get kQueueFull (429) while every worker is taken.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "base/check.h"
#include "base/log.h"
#include "daemon/api/api.h"
#include "grammar/grammar.h"

namespace kvasir {
namespace {

using Clock = std::chrono::steady_clock;

grammar::GrammarSpec to_spec(const OutputConstraint& c) {
  using K = OutputConstraint::Kind;
  switch (c.kind) {
    case K::kJsonObject:
      return grammar::GrammarSpec::json_object();
    case K::kJsonSchema:
      return grammar::GrammarSpec::json_schema(c.text, /*strict=*/true);
    case K::kRegex:
      return grammar::GrammarSpec::regex(c.text);
    case K::kChoice:
      return grammar::GrammarSpec::choice(c.choices);
    case K::kEbnf:
      return grammar::GrammarSpec::ebnf(c.text);
    case K::kStructuralTag:
      return grammar::GrammarSpec::structural_tag(c.text);
  }
  return grammar::GrammarSpec::json_object();
}

class Service final : public GrammarService {
 public:
  Service(std::shared_ptr<const grammar::Vocabulary> vocab, const GrammarServiceOptions& o)
      : vocab_(std::move(vocab)), opt_(o), compiler_(compiler_options(o)) {
    for (int i = 0; i < std::max(o.waiters, 1); ++i) waiters_.emplace_back([this] { run(); });
  }
  ~Service() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : waiters_) t.join();
    for (Job& j : queue_) j.done(Status(ErrorCode::kStopping, "the daemon is stopping"), nullptr);
  }

  void compile(const OutputConstraint& c, Done done) override {
    Job job{to_spec(c), std::move(done), Clock::now()};
    {
      std::lock_guard lk(mu_);
      if (!stop_ && queue_.size() < opt_.max_queue) {
        queue_.push_back(std::move(job));
        cv_.notify_one();
        return;
      }
    }
    job.done(error_status(ErrorCode::kQueueFull,
                          "{}: {} structured-output compilations are waiting; try again later",
                          grammar::kind_name(job.spec.kind), opt_.max_queue),
             nullptr);
  }

 private:
  struct Job {
    grammar::GrammarSpec spec;
    Done done;
    Clock::time_point queued;
  };

  static grammar::CompilerOptions compiler_options(const GrammarServiceOptions& o) {
    grammar::CompilerOptions c;
    c.workers = std::max(o.workers, 1);
    c.cache_capacity = o.cache_capacity;
    c.limits.max_text_bytes = o.max_spec_bytes;
    c.limits.compile_timeout =
        std::chrono::milliseconds(int64_t(std::max(o.compile_timeout_s, 0.001) * 1000));
    return c;
  }

  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      if (Clock::now() - job.queued > compiler_.options().limits.compile_timeout) {
        job.done(error_status(ErrorCode::kQueueFull,
                              "{}: no grammar compiler was free in time; try again later",
                              grammar::kind_name(job.spec.kind)),
                 nullptr);
        continue;
      }
      std::shared_ptr<const grammar::CompiledGrammar> g;
      Status st = compiler_.compile(job.spec, vocab_, &g);
      if (!st.ok()) {
        job.done(std::move(st), nullptr);
        continue;
      }
      for (const std::string& w : g->warnings())
        KV_LOG_DEBUG("api", "{}: {}", grammar::kind_name(job.spec.kind), w);
      job.done(Status(), std::make_shared<const std::string>(grammar::encode_spec(job.spec)));
    }
  }

  std::shared_ptr<const grammar::Vocabulary> vocab_;
  GrammarServiceOptions opt_;
  grammar::GrammarCompiler compiler_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::vector<std::thread> waiters_;
};

}  // namespace

std::shared_ptr<GrammarService> make_grammar_service(const Tokenizer& tok, int32_t width,
                                                     const GrammarServiceOptions& options) {
  return std::make_shared<Service>(grammar::Vocabulary::from_tokenizer(tok, width), options);
}

}  // namespace kvasir
