// grammar/compiler.cpp — GrammarCompiler: the compile cache, the worker
// threads, and turning a GrammarSpec into XGrammar's compiled grammar.
//
// compile_async() checks the spec (check_spec), then looks its key up in
// the LRU cache. A miss inserts a pending entry (a shared future) and
// queues a job; a hit on a pending entry shares the same future, so
// concurrent requests for one spec compile it once. The handle
// (PendingGrammar) carries the deadline, compile_timeout after the ask;
// the job itself cannot be interrupted and finishes on its worker whatever
// the caller did, its result (success or refusal) staying in the cache.
//
// The queue is cheapest first: the spec's size plus its counted
// repetitions estimate the compilation's cost (compile_cost; the spec is
// not built into a grammar on the asking thread: for a large counted
// repetition that alone takes nearly all of the compilation's time). A worker takes
// the cheapest job, but a job that has
// waited half its compile_timeout first (oldest first), so a small schema
// never waits behind a queue of large ones and a large one is not starved
// by a stream of small ones (docs/structured-outputs.md).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <thread>

#include "base/check.h"
#include "base/log.h"
#include "grammar/cache.h"
#include "grammar/xgrammar_bridge.h"

namespace kvasir::grammar {
namespace {

struct Outcome {
  Status status;
  std::shared_ptr<const CompiledGrammar> grammar;
};

struct Entry {
  std::shared_future<Outcome> outcome;
  std::shared_ptr<std::atomic<bool>> started;  // a worker took the job
};

struct Job {
  GrammarSpec spec;
  std::shared_ptr<const Vocabulary> vocab;
  std::promise<Outcome> promise;
  std::shared_ptr<std::atomic<bool>> started;
  size_t cost = 0;  // compile_cost(spec)
  std::chrono::steady_clock::time_point asked;
};

// The upper bound of every counted repetition in `text` ("{m,n}", "{m}",
// "{m,}": the largest number written), which XGrammar expands into that
// many states: `[a-z]{1,2000}` is 13 bytes and about a second to compile.
size_t repetition_bounds(std::string_view text) {
  size_t sum = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '{') continue;
    size_t j = i + 1, bound = 0, n = 0;
    bool digits = false;
    for (; j < text.size() && (std::isdigit(uint8_t(text[j])) || text[j] == ','); ++j) {
      if (text[j] == ',') {
        n = 0;
        continue;
      }
      digits = true;
      n = std::min<size_t>(n * 10 + size_t(text[j] - '0'), size_t(1) << 32);
      bound = std::max(bound, n);
    }
    if (digits && j < text.size() && text[j] == '}') sum += bound;
  }
  return sum;
}

// A compilation's estimated cost, for the queue's order: what the spec
// says (its bytes, choices included) plus its counted repetitions.
size_t compile_cost(const GrammarSpec& s) {
  // (A schema's maxLength is not counted: XGrammar compiles maxLength 2000
  // in 10 ms, where the pattern [a-z]{1,2000} takes 320.)
  size_t cost = s.text.size() + repetition_bounds(s.text);
  for (const std::string& c : s.choices) cost += c.size() + 3;
  return cost;
}

// The cache key: what the compiled grammar depends on, each field length-
// prefixed so that no two specs share a key.
std::string cache_key(const GrammarSpec& s, const Vocabulary& v) {
  const bool strict = s.kind == GrammarKind::kJsonSchema && s.strict;
  const bool has_text = s.kind != GrammarKind::kJsonObject && s.kind != GrammarKind::kChoice;
  const std::string_view text = has_text ? std::string_view(s.text) : std::string_view();
  std::string key =
      fmt::format("{}:{}:{:016x}:{}:", int(s.kind), int(strict), v.fingerprint(), text.size());
  key += text;
  if (s.kind == GrammarKind::kChoice)
    for (const std::string& c : s.choices) key += fmt::format(":{}:", c.size()) + c;
  return key;
}

// root ::= "a" | "b" | ... with each choice a literal: quotes, backslashes
// and control bytes escaped (\u00XX: XGrammar's \x takes any number of hex
// digits), other bytes as they are (XGrammar reads the literal as UTF-8).
std::string choice_ebnf(const std::vector<std::string>& choices) {
  std::string g = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    g += i ? " | \"" : "\"";
    for (const unsigned char c : choices[i]) {
      if (c == '"' || c == '\\')
        g += {'\\', char(c)};
      else if (c < 0x20 || c == 0x7F)
        g += fmt::format("\\u{:04x}", c);
      else
        g.push_back(char(c));
    }
    g += '"';
  }
  return g;
}

xgrammar::Grammar to_xgrammar(const GrammarSpec& s, const CompilerOptions& o) {
  const std::optional<int> ws =
      o.json_max_whitespace > 0 ? std::optional<int>(o.json_max_whitespace) : std::nullopt;
  switch (s.kind) {
    case GrammarKind::kJsonObject:  // any object: a non-strict schema for one
      return xgrammar::Grammar::FromJSONSchema(R"({"type": "object"})", true, std::nullopt,
                                               std::nullopt, false, ws);
    case GrammarKind::kJsonSchema:
      return xgrammar::Grammar::FromJSONSchema(s.text, true, std::nullopt, std::nullopt, s.strict,
                                               ws);
    case GrammarKind::kRegex:
      return xgrammar::Grammar::FromRegex(s.text);
    case GrammarKind::kChoice:
      return xgrammar::Grammar::FromEBNF(choice_ebnf(s.choices));
    case GrammarKind::kEbnf:
      return xgrammar::Grammar::FromEBNF(s.text, "root");
    case GrammarKind::kStructuralTag: {
      auto g = xgrammar::Grammar::FromStructuralTag(s.text);
      if (auto* e = std::get_if<xgrammar::StructuralTagError>(&g))
        std::visit([](const auto& err) { throw std::invalid_argument(err.what()); }, *e);
      return std::get<xgrammar::Grammar>(std::move(g));
    }
  }
  throw std::invalid_argument("unknown grammar kind");
}

// The grammar XGrammar builds from the spec, within max_grammar_bytes: ok,
// or the spec's refusal (kInvalidArgument naming the kind). Every exception
// XGrammar throws for this spec is its refusal of the spec.
Status build_grammar(const GrammarSpec& spec, const CompilerOptions& o, xgrammar::Grammar* out) {
  const char* kind = kind_name(spec.kind);
  try {
    xgrammar::Grammar g = to_xgrammar(spec, o);
    if (const size_t n = g.ToString().size(); n > o.limits.max_grammar_bytes)
      return error_status(ErrorCode::kInvalidArgument,
                          "{}: the grammar it makes is {} bytes, over the limit of {}", kind, n,
                          o.limits.max_grammar_bytes);
    *out = std::move(g);
  } catch (const std::exception& e) {
    return error_status(ErrorCode::kInvalidArgument, "{}: {}", kind, detail::xgrammar_message(e));
  }
  return Status();
}

// One compilation, on a worker thread.
Outcome compile_now(const Job& job, const CompilerOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const char* kind = kind_name(job.spec.kind);
  detail::WarningCapture capture;
  auto impl = std::make_unique<CompiledGrammar::Impl>();
  xgrammar::Grammar g{xgrammar::NullObj{}};
  if (Status st = build_grammar(job.spec, o, &g); !st.ok()) return {std::move(st), nullptr};
  try {
    xgrammar::GrammarCompiler compiler(job.vocab->impl().info, std::max(1, o.threads_per_compile),
                                       /*cache_enabled=*/false);
    impl->compiled = compiler.CompileGrammar(g);
  } catch (const std::exception& e) {
    return {error_status(ErrorCode::kInvalidArgument, "{}: {}", kind, detail::xgrammar_message(e)),
            nullptr};
  }
  impl->spec = job.spec;
  impl->vocab = job.vocab;
  impl->warnings = capture.take();
  impl->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  KV_LOG_DEBUG("grammar", "compiled a {} grammar in {:.3f} s ({} warnings)", kind, impl->seconds,
               impl->warnings.size());
  return {Status(), std::make_shared<const CompiledGrammar>(std::move(impl))};
}

}  // namespace

CompiledGrammar::CompiledGrammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGrammar::~CompiledGrammar() = default;
const GrammarSpec& CompiledGrammar::spec() const {
  return impl_->spec;
}
const std::shared_ptr<const Vocabulary>& CompiledGrammar::vocabulary() const {
  return impl_->vocab;
}
size_t CompiledGrammar::memory_bytes() const {
  return impl_->compiled.MemorySizeBytes();
}
double CompiledGrammar::compile_seconds() const {
  return impl_->seconds;
}
const std::vector<std::string>& CompiledGrammar::warnings() const {
  return impl_->warnings;
}

struct GrammarCompiler::Impl {
  explicit Impl(size_t capacity) : cache(capacity) {}
  LruCache<Entry> cache;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;  // guarded by mu; taken cheapest first (take())
  bool stopping = false;  // guarded by mu
  std::vector<std::thread> workers;

  // The job to run next (mu held, queue not empty): the oldest of those
  // that have waited `patience`, else the cheapest (the oldest on a tie).
  Job take(std::chrono::steady_clock::duration patience) {
    const auto now = std::chrono::steady_clock::now();
    size_t best = 0;
    for (size_t i = 1; i < queue.size(); ++i) {
      const bool late_i = now - queue[i].asked >= patience;
      const bool late_b = now - queue[best].asked >= patience;
      if (late_i != late_b ? late_i
                           : (late_i ? queue[i].asked < queue[best].asked
                                     : queue[i].cost < queue[best].cost))
        best = i;
    }
    Job job = std::move(queue[best]);
    queue.erase(queue.begin() + std::ptrdiff_t(best));
    return job;
  }

  void work(const CompilerOptions& o) {
    while (true) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping) return;
      Job job = take(o.limits.compile_timeout / 2);
      lock.unlock();
      job.started->store(true);
      try {
        job.promise.set_value(compile_now(job, o));
      } catch (const std::exception& e) {  // out of memory, not the spec's fault
        job.promise.set_value({error_status(ErrorCode::kInternal, "{}: compiling failed: {}",
                                            kind_name(job.spec.kind), e.what()),
                               nullptr});
      }
    }
  }
};

GrammarCompiler::GrammarCompiler(CompilerOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>(options_.cache_capacity)) {
  KV_CHECK(options_.workers >= 1, "grammar compiler: workers must be at least 1, not {}",
           options_.workers);
  for (int i = 0; i < options_.workers; ++i)
    impl_->workers.emplace_back([this] { impl_->work(options_); });
}

GrammarCompiler::~GrammarCompiler() {
  std::deque<Job> dropped;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    dropped.swap(impl_->queue);
  }
  impl_->cv.notify_all();
  for (Job& job : dropped)
    job.promise.set_value({Status(ErrorCode::kStopping, "the grammar compiler stopped"), nullptr});
  for (std::thread& t : impl_->workers) t.join();
}

// What a PendingGrammar holds: the entry's outcome, its deadline, and what
// the refusals at the deadline say.
struct PendingGrammar::State {
  std::shared_future<Outcome> outcome;
  std::shared_ptr<std::atomic<bool>> started;  // null: the outcome was known at once
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
  GrammarKind kind = GrammarKind::kJsonObject;
};

bool PendingGrammar::ready() const {
  KV_CHECK(state_ != nullptr, "grammar: ready() on an empty PendingGrammar");
  return state_->outcome.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

Status PendingGrammar::wait(std::shared_ptr<const CompiledGrammar>* out) const {
  KV_CHECK(state_ != nullptr && out != nullptr, "grammar: wait() with no handle or no output");
  const State& s = *state_;
  if (s.outcome.wait_until(s.deadline) != std::future_status::ready) {
    if (s.started->load())
      return error_status(ErrorCode::kInvalidArgument,
                          "{}: compiling it took longer than the limit of {} ms (too complex)",
                          kind_name(s.kind), s.timeout.count());
    return error_status(ErrorCode::kQueueFull,
                        "{}: no grammar compiler was free within {} ms; try again later",
                        kind_name(s.kind), s.timeout.count());
  }
  const Outcome& outcome = s.outcome.get();
  if (outcome.status.ok()) *out = outcome.grammar;
  return outcome.status;
}

namespace {

PendingGrammar known(Status status) {
  std::promise<Outcome> p;
  p.set_value({std::move(status), nullptr});
  auto state = std::make_shared<PendingGrammar::State>();
  state->outcome = p.get_future().share();
  return PendingGrammar(std::move(state));
}

}  // namespace

Status check_grammar(const GrammarSpec& spec, const CompilerOptions& options,
                     std::vector<std::string>* warnings) {
  KV_RETURN_IF_ERROR(check_spec(spec, options.limits));
  detail::WarningCapture capture;
  xgrammar::Grammar g{xgrammar::NullObj{}};
  Status st = build_grammar(spec, options, &g);
  if (warnings) *warnings = capture.take();
  return st;
}

PendingGrammar GrammarCompiler::compile_async(const GrammarSpec& spec,
                                              const std::shared_ptr<const Vocabulary>& vocab) {
  KV_CHECK(vocab != nullptr, "grammar compile: no vocabulary");
  if (Status st = check_spec(spec, options_.limits); !st.ok()) return known(std::move(st));
  auto state = std::make_shared<PendingGrammar::State>();
  state->timeout = options_.limits.compile_timeout;
  state->deadline = std::chrono::steady_clock::now() + state->timeout;
  state->kind = spec.kind;
  Job job;
  auto [entry, hit] = impl_->cache.find_or_insert(cache_key(spec, *vocab), [&] {
    job.started = std::make_shared<std::atomic<bool>>(false);
    return Entry{job.promise.get_future().share(), job.started};
  });
  if (!hit) {
    job.spec = spec;
    job.vocab = vocab;
    job.asked = std::chrono::steady_clock::now();
    job.cost = compile_cost(spec);
    {
      std::lock_guard lock(impl_->mu);
      if (impl_->stopping) return known(Status(ErrorCode::kStopping, "the grammar compiler stopped"));
      impl_->queue.push_back(std::move(job));
    }
    impl_->cv.notify_one();
  }
  state->outcome = entry.outcome;
  state->started = entry.started;
  return PendingGrammar(std::move(state));
}

Status GrammarCompiler::compile(const GrammarSpec& spec,
                                const std::shared_ptr<const Vocabulary>& vocab,
                                std::shared_ptr<const CompiledGrammar>* out) {
  KV_CHECK(vocab != nullptr && out != nullptr, "grammar compile: no vocabulary or no output");
  return compile_async(spec, vocab).wait(out);
}

CacheStats GrammarCompiler::cache_stats() const {
  return impl_->cache.stats();
}

void GrammarCompiler::clear_cache() {
  impl_->cache.clear();
}

}  // namespace kvasir::grammar
