// daemon/api/grammar_service.cpp — the daemon's GrammarService (api.h):
// checks each constraint on arrival (grammar::check_grammar: the limits,
// then XGrammar building the grammar from the spec), so that a bad schema,
// regex or grammar is a 400 before anything is scheduled. It does not
// compile against the vocabulary: the tail stage does that, once, starting
// when the spec reaches it and overlapped with the prompt's forward pass
// (stages/tail_grammar.h). A compilation here as well would put a second
// one on a new schema's first token.
//
// The check makes no pass over the vocabulary, but building XGrammar's
// grammar is not always cheap: a counted repetition (`[a-z]{1,2000}`)
// unrolls into thousands of rules (~0.35 s). The caller is the API's io
// thread, which every connection shares, so the checks run on a worker of
// their own, in arrival order, and done() is called there; at most
// kMaxQueued wait (more: kQueueFull, a 429 the client retries).
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "base/log.h"
#include "daemon/api/api.h"
#include "grammar/grammar.h"

namespace kvasir {
namespace {

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
  static constexpr size_t kMaxQueued = 256;

  explicit Service(const GrammarServiceOptions& o) {
    options_.limits.max_text_bytes = o.max_spec_bytes;
    worker_ = std::thread([this] { run(); });
  }
  // Checks still queued answer kStopping; the one running finishes first.
  ~Service() override {
    std::deque<Job> left;
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
      left.swap(queue_);
    }
    cv_.notify_all();
    worker_.join();
    for (Job& j : left)
      j.done(error_status(ErrorCode::kStopping, "the daemon is stopping"), nullptr);
  }

  void compile(const OutputConstraint& c, Done done) override {
    bool stopping = false;
    {
      std::lock_guard lk(mu_);
      stopping = stopping_;
      if (!stopping && queue_.size() < kMaxQueued) {
        queue_.push_back({to_spec(c), std::move(done)});
        cv_.notify_one();
        return;
      }
    }
    if (stopping) return done(error_status(ErrorCode::kStopping, "the daemon is stopping"), nullptr);
    done(error_status(ErrorCode::kQueueFull,
                      "{} structured-output constraints are waiting to be checked; try again later",
                      kMaxQueued),
         nullptr);
  }

 private:
  struct Job {
    grammar::GrammarSpec spec;
    Done done;
  };

  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      check(job);
    }
  }

  void check(Job& job) const {
    std::vector<std::string> warnings;
    Status st = grammar::check_grammar(job.spec, options_, &warnings);
    if (!st.ok()) return job.done(std::move(st), nullptr);
    for (const std::string& w : warnings)
      KV_LOG_DEBUG("api", "{}: {}", grammar::kind_name(job.spec.kind), w);
    job.done(Status(), std::make_shared<const std::string>(grammar::encode_spec(job.spec)));
  }

  grammar::CompilerOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread worker_;     // last: started once the rest exists
};

}  // namespace

std::shared_ptr<GrammarService> make_grammar_service(const GrammarServiceOptions& options) {
  return std::make_shared<Service>(options);
}

}  // namespace kvasir
