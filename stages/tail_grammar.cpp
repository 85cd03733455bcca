// stages/tail_grammar.cpp — see tail_grammar.h.
#include "stages/tail_grammar.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "base/log.h"
#include "grammar/grammar.h"
#include "ipc/segment.h"
#include "model/model_file.h"
#include "model/tokenizer.h"

namespace kvasir {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t ns_since(Clock::time_point t0) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

// A few threads running jobs in order of arrival.
class JobPool {
 public:
  explicit JobPool(int n) {
    for (int i = 0; i < std::max(n, 1); ++i) threads_.emplace_back([this] { run(); });
  }
  ~JobPool() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  std::shared_future<void> post(std::function<void()> fn) {
    std::packaged_task<void()> task(std::move(fn));
    std::shared_future<void> f = task.get_future().share();
    {
      std::lock_guard lk(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return f;
  }

 private:
  void run() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

using Compiled = std::pair<Status, std::shared_ptr<const grammar::CompiledGrammar>>;

// A spec met in the grammar table, by entry id.
struct Spec {
  std::string bytes;  // the wire form, as read
  std::shared_future<Compiled> compiled;
  uint64_t last_batch = 0;
};

// One constrained sequence's record (tail_grammar.h).
struct Seq {
  uint64_t id = 0;  // the sequence's
  std::shared_ptr<Spec> spec;
  int32_t n_prompt = 0;
  std::vector<int32_t> want;  // its output by position - n_prompt (tail thread)
  uint64_t edits = 0;         // bumped when `want` changes other than by growing
  uint64_t last_batch = 0;
  std::string error;  // why its grammar failed ("" while fine)
  // Owned by the mask job while one runs (`job` not ready).
  std::optional<grammar::Matcher> matcher;
  std::vector<int32_t> accepted;  // what the matcher accepted, then past_end stop tokens
  // Stop tokens after the output ended (a request that ignores EOS goes on
  // drawing them): the matcher refuses anything once terminated, so they
  // are kept here, at the end of `accepted`, and never given to it.
  size_t past_end = 0;
  std::vector<uint32_t> mask;
  size_t mask_len = SIZE_MAX;  // the (want.size(), edits) the mask is for
  uint64_t mask_edits = 0;
  std::shared_future<void> job;
};

class TailGrammarImpl final : public TailGrammar {
 public:
  TailGrammarImpl(std::shared_ptr<const grammar::Vocabulary> vocab, const ipc::GrammarTable& table,
                  const TailGrammarOptions& o)
      : vocab_(std::move(vocab)),
        table_(table),
        opt_(o),
        compiler_(compiler_options(o, table)),
        pool_(o.mask_workers) {}

  ~TailGrammarImpl() override {
    for (auto& [id, s] : seqs_) wait(s);
  }

  size_t mask_words() const override { return vocab_->mask_words(); }
  void prepare(const ipc::Batch& b, int32_t n_rows, uint64_t batch_id) override;
  const uint32_t* mask(int32_t r, std::string* error) override;
  void accept(int32_t r, int32_t token) override;
  TailGrammarStats stats() const override {
    std::lock_guard lk(stats_mu_);
    TailGrammarStats s = stats_;
    s.sequences = seqs_.size();
    return s;
  }

 private:
  static grammar::CompilerOptions compiler_options(const TailGrammarOptions& o,
                                                   const ipc::GrammarTable& table) {
    grammar::CompilerOptions c;
    c.workers = std::max(o.compile_workers, 1);
    c.cache_capacity = o.cache_capacity;
    c.limits.compile_timeout = o.compile_timeout;
    // The daemon checked the spec under its own limits; the entry bounds it here.
    c.limits.max_text_bytes = std::max<size_t>(c.limits.max_text_bytes, table.capacity());
    return c;
  }

  std::shared_ptr<Spec> spec_for(const SamplingParams& sp, uint64_t batch, std::string* error);
  Seq* seq_for(const ipc::DescRow& row, const SamplingParams& sp, uint64_t batch);
  void feed(Seq& s, const ipc::DescRow& row, const int32_t* tokens);
  void start_job(Seq& s);
  void run_job(Seq& s);
  void sync_matcher(Seq& s, const std::shared_ptr<const grammar::CompiledGrammar>& g);
  void fill(Seq& s);
  void wait(Seq& s) {
    if (s.job.valid()) s.job.wait();
  }
  void fail(Seq& s, std::string why);
  void evict(uint64_t batch);

  std::shared_ptr<const grammar::Vocabulary> vocab_;
  ipc::GrammarTable table_;
  TailGrammarOptions opt_;
  grammar::GrammarCompiler compiler_;
  std::unordered_map<uint64_t, std::shared_ptr<Spec>> specs_;  // by entry id
  std::unordered_map<uint64_t, Seq> seqs_;                     // by sequence id (nodes stay put)
  struct Row {
    Seq* seq = nullptr;
    uint64_t seq_id = 0;
    bool sample = false;
  };
  std::vector<Row> rows_;  // the batch being prepared
  mutable std::mutex stats_mu_;
  TailGrammarStats stats_;
  JobPool pool_;  // last: its threads stop first
};

std::shared_ptr<Spec> TailGrammarImpl::spec_for(const SamplingParams& sp, uint64_t batch,
                                                std::string* error) {
  if (auto it = specs_.find(sp.grammar_id); it != specs_.end()) {
    it->second->last_batch = batch;
    return it->second;
  }
  auto spec = std::make_shared<Spec>();
  spec->last_batch = batch;
  if (Status st = table_.read(int32_t(sp.grammar_entry) - 1, sp.grammar_id, &spec->bytes);
      !st.ok()) {
    *error = st.message();
    return nullptr;
  }
  grammar::GrammarSpec gs;
  if (Status st = grammar::decode_spec(spec->bytes, &gs); !st.ok()) {
    *error = st.message();
    return nullptr;
  }
  // A spec seen before under another id shares its compilation.
  for (const auto& [id, other] : specs_)
    if (other->bytes == spec->bytes) spec->compiled = other->compiled;
  if (!spec->compiled.valid())
    spec->compiled = std::async(std::launch::async, [this, gs = std::move(gs)] {
                       std::shared_ptr<const grammar::CompiledGrammar> g;
                       Status st = compiler_.compile(gs, vocab_, &g);
                       return Compiled{std::move(st), std::move(g)};
                     }).share();
  specs_[sp.grammar_id] = spec;
  return spec;
}

// The record of the row's sequence; a new one for a sequence not seen, or
// whose spec differs (the same spec under a new entry id keeps its record).
Seq* TailGrammarImpl::seq_for(const ipc::DescRow& row, const SamplingParams& sp, uint64_t batch) {
  std::string error;
  std::shared_ptr<Spec> spec = spec_for(sp, batch, &error);
  Seq& s = seqs_[row.seq_id];
  wait(s);
  s.id = row.seq_id;
  s.last_batch = batch;
  if (!spec) {
    fail(s, error);
    return &s;
  }
  if (s.spec && s.spec->bytes == spec->bytes && s.n_prompt == row.n_prompt) {
    s.spec = spec;
    return &s;
  }
  s = Seq{};
  s.id = row.seq_id;
  s.spec = std::move(spec);
  s.n_prompt = row.n_prompt;
  s.last_batch = batch;
  return &s;
}

// The row's generated positions into `want`; a sampled row cuts `want` to
// the positions before the one it samples.
void TailGrammarImpl::feed(Seq& s, const ipc::DescRow& row, const int32_t* tokens) {
  if (!s.error.empty()) return;
  const int64_t end = int64_t(row.pos0) + row.n_tokens;
  const int64_t g0 = std::max<int64_t>(row.pos0, s.n_prompt) - s.n_prompt;
  const int64_t g1 = std::max<int64_t>(end - s.n_prompt, 0);
  if (g0 < g1 && g0 > int64_t(s.want.size())) {
    fail(s, fmt::format("the tail has no record of output positions {}..{} (restarted or "
                        "evicted, and the batch does not resend them)",
                        s.want.size(), g0 - 1));
    return;
  }
  bool changed = false;
  for (int64_t i = g0; i < g1; ++i) {
    const int32_t t = tokens[s.n_prompt + i - row.pos0];
    if (i < int64_t(s.want.size())) {
      changed |= s.want[size_t(i)] != t;
      s.want[size_t(i)] = t;
    } else {
      s.want.push_back(t);
    }
  }
  // What follows a changed position is not this output any more; a
  // sampled row's output ends where it samples.
  if ((changed || row.sample) && int64_t(s.want.size()) > g1) {
    s.want.resize(size_t(g1));
    changed = true;
  }
  if (changed) ++s.edits;
}

void TailGrammarImpl::prepare(const ipc::Batch& b, int32_t n_rows, uint64_t batch_id) {
  rows_.assign(size_t(n_rows), Row{});
  int64_t off = 0;
  for (int32_t r = 0; r < n_rows; ++r) {
    const ipc::DescRow& row = b.rows[r];
    const SamplingParams& sp = b.sampling[r];
    const int32_t* tokens = b.tokens.data() + off;
    off += row.n_tokens;
    if (sp.grammar_entry == 0 || row.pad) continue;
    Seq* s = seq_for(row, sp, batch_id);
    rows_[size_t(r)] = Row{s, row.seq_id, row.sample != 0};
    feed(*s, row, tokens);
    if (row.sample && s->error.empty() &&
        (s->mask_len != s->want.size() || s->mask_edits != s->edits))
      start_job(*s);
  }
  if ((batch_id & 255) == 0) evict(batch_id);
}

void TailGrammarImpl::start_job(Seq& s) {
  s.mask_len = s.want.size();
  s.mask_edits = s.edits;
  s.job = pool_.post([this, &s] { run_job(s); });
}

void TailGrammarImpl::run_job(Seq& s) {
  const Compiled& c = s.spec->compiled.get();  // waits for its compilation
  if (!c.first.ok())
    return fail(s, "its grammar did not compile at the tail: " + c.first.message());
  try {
    sync_matcher(s, c.second);
    if (s.error.empty()) fill(s);
  } catch (const std::exception& e) {
    fail(s, std::string("grammar matcher: ") + e.what());
  }
}

// Rolls the matcher back to the longest common prefix of what it accepted
// and `want`, then accepts the rest of `want` (stop tokens past the end
// aside: Seq::past_end).
void TailGrammarImpl::sync_matcher(Seq& s,
                                   const std::shared_ptr<const grammar::CompiledGrammar>& g) {
  if (!s.matcher) {
    s.matcher.emplace(g);
    s.accepted.clear();
    s.past_end = 0;
  }
  size_t p = 0;
  while (p < s.accepted.size() && p < s.want.size() && s.accepted[p] == s.want[p]) ++p;
  const size_t back = s.accepted.size() - p, ahead = s.want.size() - p;
  if (back > 0) {
    const size_t kept = std::min(back, s.past_end);  // the matcher never saw those
    s.past_end -= kept;
    KV_CHECK(back == kept || s.matcher->rollback(back - kept), "rollback of {} tokens refused",
             back - kept);
    s.accepted.resize(p);
  }
  const std::vector<int32_t>& stops = vocab_->stop_ids();
  for (size_t i = p; i < s.want.size(); ++i) {
    const int32_t t = s.want[i];
    if (s.matcher->is_terminated() && std::find(stops.begin(), stops.end(), t) != stops.end()) {
      ++s.past_end;
    } else if (!s.matcher->accept(t)) {
      return fail(s, fmt::format("token {} at output position {} breaks the grammar", t, i));
    }
    s.accepted.push_back(t);
  }
  std::lock_guard lk(stats_mu_);
  stats_.rollbacks += back;
  if (ahead > 1) stats_.fast_forwards += ahead - 1;  // one per step is the normal accept
}

// The next token's mask; once the output has ended (a stop token accepted:
// a request that ignores EOS goes on), only stop tokens.
void TailGrammarImpl::fill(Seq& s) {
  const auto t0 = Clock::now();
  s.mask.assign(vocab_->mask_words(), 0);
  if (s.matcher->is_terminated()) {
    for (int32_t id : vocab_->stop_ids()) s.mask[size_t(id) / 32] |= uint32_t(1) << (id % 32);
  } else {
    s.matcher->fill_next_token_bitmask(s.mask);
  }
  std::lock_guard lk(stats_mu_);
  stats_.masks++;
  stats_.mask_ns += ns_since(t0);
}

const uint32_t* TailGrammarImpl::mask(int32_t r, std::string* error) {
  if (r < 0 || size_t(r) >= rows_.size() || !rows_[size_t(r)].seq || !rows_[size_t(r)].sample)
    return nullptr;
  Seq& s = *rows_[size_t(r)].seq;
  if (s.job.valid() && s.job.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    const auto t0 = Clock::now();
    s.job.wait();
    std::lock_guard lk(stats_mu_);
    stats_.waits++;
    stats_.wait_ns += ns_since(t0);
  }
  if (!s.error.empty()) {
    *error = s.error;
    return nullptr;
  }
  return s.mask.data();
}

void TailGrammarImpl::accept(int32_t r, int32_t token) {
  if (r < 0 || size_t(r) >= rows_.size() || !rows_[size_t(r)].seq) return;
  Seq& s = *rows_[size_t(r)].seq;
  wait(s);
  if (!s.error.empty()) return;
  s.want.push_back(token);
  start_job(s);
}

// Logged once per sequence. Runs on the tail thread or on the sequence's job.
void TailGrammarImpl::fail(Seq& s, std::string why) {
  if (!s.error.empty()) return;
  KV_LOG_ERROR("agent", "sequence {}: structured output failed: {}", s.id, why);
  s.error = std::move(why);
  std::lock_guard lk(stats_mu_);
  stats_.failures++;
}

// Sequences (finished ones: the tail is never told) and specs not seen for
// evict_age batches.
void TailGrammarImpl::evict(uint64_t batch) {
  if (batch < opt_.evict_age) return;
  const uint64_t before = batch - opt_.evict_age;
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    if (it->second.last_batch < before) {
      wait(it->second);
      it = seqs_.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(specs_, [&](const auto& kv) { return kv.second->last_batch < before; });
}

}  // namespace

std::unique_ptr<TailGrammar> TailGrammar::create(std::shared_ptr<const grammar::Vocabulary> vocab,
                                                 const ipc::GrammarTable& table,
                                                 const TailGrammarOptions& options) {
  KV_CHECK(vocab != nullptr, "tail grammar: no vocabulary");
  return std::make_unique<TailGrammarImpl>(std::move(vocab), table, options);
}

std::unique_ptr<TailGrammar> TailGrammar::create(const ModelFile& model, int32_t logits_width,
                                                 const ipc::GrammarTable& table,
                                                 const TailGrammarOptions& options) {
  if (table.entries() <= 0) return nullptr;
  if (!model.gguf()) {
    KV_LOG_WARN("stage", "structured outputs off: the model has no GGUF tokenizer");
    return nullptr;
  }
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*model.gguf());
  return create(grammar::Vocabulary::from_tokenizer(*tok, logits_width), table, options);
}

}  // namespace kvasir
