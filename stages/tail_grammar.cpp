// stages/tail_grammar.cpp — see tail_grammar.h.
#include "stages/tail_grammar.h"

#include <algorithm>
#include <atomic>
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
#include "model/hf_folder.h"
#include "model/model_file.h"
#include "model/tokenizer.h"

namespace kvasir {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t ns_since(Clock::time_point t0) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

// A few threads filling masks, jobs in order of arrival. A job never waits
// for a compilation (start_job posts one only once its grammar is compiled).
class MaskWorkers {
 public:
  explicit MaskWorkers(int n) {
    for (int i = 0; i < std::max(n, 1); ++i) threads_.emplace_back([this] { run(); });
  }
  ~MaskWorkers() {
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

// A spec met in the grammar table, by entry id. Tail thread only.
struct Spec {
  std::string bytes;               // the wire form, as read
  grammar::PendingGrammar pending;  // its compilation, started when met
  Status status;                   // once resolved: the compilation's outcome
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  bool resolved = false;
  uint64_t last_batch = 0;
};

// The grammar's part of a sequence's record (stages/tail_sequences.h).
struct GrammarPart final : TailSequence::Part {
  explicit GrammarPart(std::shared_ptr<std::atomic<size_t>> live) : live(std::move(live)) {
    ++*this->live;
  }
  ~GrammarPart() override {
    if (job.valid()) job.wait();
    --*live;
  }
  std::shared_ptr<std::atomic<size_t>> live;  // the grammar's count of parts
  uint64_t id = 0;                            // the sequence's
  std::shared_ptr<Spec> spec;
  Status error;  // why its grammar failed (ok while fine)
  // The mask wanted: for the output of this length and the record's edits.
  size_t mask_len = SIZE_MAX;
  uint64_t mask_edits = 0;
  bool deferred = false;  // wanted before its grammar compiled: mask() runs the job
  // Owned by the mask job while one runs (`job` not ready).
  std::vector<int32_t> want;  // the output the job brings the matcher to (a copy)
  std::optional<grammar::Matcher> matcher;
  std::vector<int32_t> accepted;  // what the matcher accepted
  size_t past_end = 0;            // of which the last past_end: stop tokens after its end
  std::vector<uint32_t> mask;
  // The grammar-forced tokens after `want` (options.forced_drafts), found
  // by the job before it fills the mask when the job was asked for them
  // (want_forced): forced_ready is then set once they are known (or the
  // job failed), so the tail takes them without waiting for the mask.
  std::vector<int32_t> forced;
  bool want_forced = false;
  bool forced_pending = false;  // forced_promise not set yet
  std::promise<void> forced_promise;
  std::shared_future<void> forced_ready;
  std::shared_future<void> job;
};

class TailGrammarImpl final : public TailGrammar {
 public:
  TailGrammarImpl(std::shared_ptr<const grammar::Vocabulary> vocab, const ipc::GrammarTable& table,
                  const TailGrammarOptions& o, std::shared_ptr<const Tokenizer> tok = nullptr)
      : vocab_(std::move(vocab)),
        table_(table),
        opt_(o),
        compiler_(compiler_options(o, table)),
        pool_(o.mask_workers) {
    // Forced strings are cut as the model's byte-level BPE would cut them
    // (its likeliest tokens there); other tokenizers (SentencePiece adds a
    // space prefix to a text it encodes alone) get XGrammar's greedy cut.
    if (o.forced_drafts > 0 && tok && tok->data().model == TokenizerData::Model::kBpe) {
      tok_ = std::move(tok);
      for (int32_t id = 0; id < vocab_->size(); ++id)
        if (!vocab_->token_bytes(id).empty()) sorted_.push_back(vocab_->token_bytes(id));
      std::sort(sorted_.begin(), sorted_.end());
    }
  }

  size_t mask_words() const override { return vocab_->mask_words(); }
  void prepare(const ipc::Batch& b, int32_t n_rows, uint64_t batch_id,
               TailSequences& seqs) override;
  Status mask(int32_t r, const uint32_t** out) override;
  void accept(int32_t r, bool row_ends) override;
  std::span<const int32_t> forced(int32_t r) override;
  TailGrammarStats stats() const override {
    std::lock_guard lk(stats_mu_);
    TailGrammarStats s = stats_;
    s.sequences = live_->load();
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

  Status spec_for(const SamplingParams& sp, uint64_t batch, std::shared_ptr<Spec>* out);
  GrammarPart& part_for(TailSequence& rec, const SamplingParams& sp, uint64_t batch);
  Status resolve(Spec& spec);
  void start_job(const TailSequence& rec, GrammarPart& g, bool want_forced);
  static void release_forced(GrammarPart& g);
  void run_job(GrammarPart& g, const std::shared_ptr<const grammar::CompiledGrammar>& grammar);
  void sync_matcher(GrammarPart& g, const std::shared_ptr<const grammar::CompiledGrammar>& grammar);
  void fill(GrammarPart& g);
  std::vector<int32_t> forced_tokens(grammar::Matcher& m) const;
  bool extended(const std::string& bytes) const;
  static void wait(GrammarPart& g) {
    if (g.job.valid()) g.job.wait();
  }
  void fail(GrammarPart& g, Status why);
  void evict_specs(uint64_t batch);

  std::shared_ptr<const grammar::Vocabulary> vocab_;
  std::shared_ptr<const Tokenizer> tok_;  // forced strings' tokenizer (or null)
  std::vector<std::string> sorted_;       // with tok_: every token's bytes, sorted
  ipc::GrammarTable table_;
  TailGrammarOptions opt_;
  grammar::GrammarCompiler compiler_;
  std::unordered_map<uint64_t, std::shared_ptr<Spec>> specs_;  // by entry id
  std::shared_ptr<std::atomic<size_t>> live_ = std::make_shared<std::atomic<size_t>>(0);
  struct Row {
    TailSequence* rec = nullptr;
    bool sample = false;
  };
  std::vector<Row> rows_;  // the batch being prepared
  mutable std::mutex stats_mu_;
  TailGrammarStats stats_;
  MaskWorkers pool_;  // last: its threads finish their jobs first
};

// The spec of the row's entry: read, decoded and its compilation started
// the first time the entry id is met (overlapped with the forward pass).
Status TailGrammarImpl::spec_for(const SamplingParams& sp, uint64_t batch,
                                 std::shared_ptr<Spec>* out) {
  if (auto it = specs_.find(sp.grammar_id); it != specs_.end()) {
    it->second->last_batch = batch;
    *out = it->second;
    return Status();
  }
  auto spec = std::make_shared<Spec>();
  spec->last_batch = batch;
  KV_RETURN_IF_ERROR(table_.read(int32_t(sp.grammar_entry) - 1, sp.grammar_id, &spec->bytes));
  grammar::GrammarSpec gs;
  KV_RETURN_IF_ERROR(grammar::decode_spec(spec->bytes, &gs));
  spec->pending = compiler_.compile_async(gs, vocab_);
  specs_[sp.grammar_id] = spec;
  *out = std::move(spec);
  return Status();
}

// The row's record's grammar part; a new one for a sequence not seen, or
// whose spec differs (the same spec under a new entry id keeps its part).
GrammarPart& TailGrammarImpl::part_for(TailSequence& rec, const SamplingParams& sp,
                                       uint64_t batch) {
  std::shared_ptr<Spec> spec;
  const Status st = spec_for(sp, batch, &spec);
  auto* g = static_cast<GrammarPart*>(rec.grammar.get());
  if (g) wait(*g);
  if (!g || (st.ok() && g->spec && g->spec->bytes != spec->bytes)) {
    rec.grammar = std::make_unique<GrammarPart>(live_);  // the old one waits for its job
    g = static_cast<GrammarPart*>(rec.grammar.get());
    g->id = rec.id;
  }
  if (!st.ok()) {
    fail(*g, st);
  } else {
    g->spec = std::move(spec);
  }
  return *g;
}

// The spec's compilation outcome, waiting for it (its deadline) if needed.
Status TailGrammarImpl::resolve(Spec& spec) {
  if (!spec.resolved) {
    spec.status = spec.pending.wait(&spec.grammar);
    spec.resolved = true;
    if (!spec.status.ok())
      spec.status = Status(spec.status.code(),
                           "its grammar did not compile at the tail: " + spec.status.message());
  }
  return spec.status;
}

void TailGrammarImpl::prepare(const ipc::Batch& b, int32_t n_rows, uint64_t batch_id,
                              TailSequences& seqs) {
  rows_.assign(size_t(n_rows), Row{});
  for (int32_t r = 0; r < n_rows; ++r) {
    const ipc::DescRow& row = b.rows[r];
    const SamplingParams& sp = b.sampling[r];
    if (sp.grammar_entry == 0) continue;
    TailSequence* rec = seqs.find(row.seq_id);
    KV_CHECK(rec != nullptr, "tail grammar: sequence {} was not fed before prepare", row.seq_id);
    rows_[size_t(r)] = Row{rec, row.sample != 0};
    GrammarPart& g = part_for(*rec, sp, batch_id);
    if (!row.sample || !rec->lost.ok() || !g.error.ok()) continue;
    if (g.mask_len != rec->output().size() || g.mask_edits != rec->edits)
      start_job(*rec, g, /*want_forced=*/false);
  }
  if ((batch_id & 255) == 0) evict_specs(batch_id);
}

// The mask for the record's output as it is now: on a worker once the
// grammar is compiled; until then deferred to mask().
void TailGrammarImpl::start_job(const TailSequence& rec, GrammarPart& g, bool want_forced) {
  const std::span<const int32_t> out = rec.output();
  g.mask_len = out.size();
  g.mask_edits = rec.edits;
  g.want.assign(out.begin(), out.end());
  g.forced.clear();
  g.want_forced = want_forced && opt_.forced_drafts > 0;
  g.forced_pending = g.want_forced;
  if (g.want_forced) {
    g.forced_promise = std::promise<void>();
    g.forced_ready = g.forced_promise.get_future().share();
  } else {
    g.forced_ready = {};
  }
  g.deferred = !g.spec->resolved && !g.spec->pending.ready();
  if (g.deferred) return;
  if (Status st = resolve(*g.spec); !st.ok()) return fail(g, st);
  g.job = pool_.post([this, &g, grammar = g.spec->grammar] { run_job(g, grammar); });
}

void TailGrammarImpl::run_job(GrammarPart& g,
                              const std::shared_ptr<const grammar::CompiledGrammar>& grammar) {
  try {
    sync_matcher(g, grammar);
    if (g.error.ok() && g.want_forced) g.forced = forced_tokens(*g.matcher);
    release_forced(g);
    if (g.error.ok()) fill(g);
  } catch (const std::exception& e) {
    fail(g, Status(ErrorCode::kInternal, std::string("grammar matcher: ") + e.what()));
  }
  release_forced(g);
}

// Lets forced() go on: the forced tokens are known, or none will be.
void TailGrammarImpl::release_forced(GrammarPart& g) {
  if (!g.forced_pending) return;
  g.forced_pending = false;
  g.forced_promise.set_value();
}

// Rolls the matcher back to the longest common prefix of what it accepted
// and `want`, then accepts the rest of `want`. Once the matcher has ended
// (a stop token accepted), the stop tokens a request that goes on draws
// (fill() allows nothing else) are output the matcher never sees: they are
// kept in `accepted` and counted in past_end, and roll back first.
void TailGrammarImpl::sync_matcher(GrammarPart& g,
                                   const std::shared_ptr<const grammar::CompiledGrammar>& grammar) {
  if (!g.matcher) {
    g.matcher.emplace(grammar);
    g.accepted.clear();
    g.past_end = 0;
  }
  size_t p = 0;
  while (p < g.accepted.size() && p < g.want.size() && g.accepted[p] == g.want[p]) ++p;
  const size_t back = g.accepted.size() - p, ahead = g.want.size() - p;
  if (back > 0) {
    const size_t extra = std::min(back, g.past_end);
    g.past_end -= extra;
    KV_CHECK(g.matcher->rollback(back - extra), "rollback of {} tokens refused", back - extra);
    g.accepted.resize(p);
  }
  const std::vector<int32_t>& stops = vocab_->stop_ids();  // sorted
  for (size_t i = p; i < g.want.size(); ++i) {
    if (g.matcher->is_terminated() && std::binary_search(stops.begin(), stops.end(), g.want[i])) {
      g.accepted.push_back(g.want[i]);
      ++g.past_end;
      continue;
    }
    if (!g.matcher->accept(g.want[i]))
      return fail(g, error_status(ErrorCode::kInvalidArgument,
                                  "token {} at output position {} breaks the grammar", g.want[i],
                                  i));
    g.accepted.push_back(g.want[i]);
  }
  std::lock_guard lk(stats_mu_);
  stats_.rollbacks += back;
  if (ahead > 1) stats_.fast_forwards += ahead - 1;  // one per step is the normal accept
}

// The next token's mask; once the output has ended (a stop token accepted:
// a request that ignores EOS goes on), only stop tokens.
void TailGrammarImpl::fill(GrammarPart& g) {
  const auto t0 = Clock::now();
  g.mask.assign(vocab_->mask_words(), 0);
  if (g.matcher->is_terminated()) {
    for (int32_t id : vocab_->stop_ids()) g.mask[size_t(id) / 32] |= uint32_t(1) << (id % 32);
  } else {
    g.matcher->fill_next_token_bitmask(g.mask);
  }
  std::lock_guard lk(stats_mu_);
  stats_.masks++;
  stats_.mask_ns += ns_since(t0);
}

Status TailGrammarImpl::mask(int32_t r, const uint32_t** out) {
  *out = nullptr;
  if (r < 0 || size_t(r) >= rows_.size() || !rows_[size_t(r)].rec || !rows_[size_t(r)].sample)
    return Status();
  TailSequence& rec = *rows_[size_t(r)].rec;
  if (!rec.lost.ok()) return rec.lost;
  auto& g = static_cast<GrammarPart&>(*rec.grammar);
  const auto t0 = Clock::now();
  bool waited = false;
  if (g.deferred && g.error.ok()) {  // its first mask: wait for the compilation, then fill here
    g.deferred = false;
    waited = true;
    if (Status st = resolve(*g.spec); !st.ok())
      fail(g, st);
    else
      run_job(g, g.spec->grammar);
  }
  if (g.job.valid() && g.job.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    g.job.wait();
    waited = true;
  }
  if (waited) {
    std::lock_guard lk(stats_mu_);
    stats_.waits++;
    stats_.wait_ns += ns_since(t0);
  }
  if (!g.error.ok()) return g.error;
  *out = g.mask.data();
  return Status();
}

void TailGrammarImpl::accept(int32_t r, bool row_ends) {
  if (r < 0 || size_t(r) >= rows_.size() || !rows_[size_t(r)].rec) return;
  TailSequence& rec = *rows_[size_t(r)].rec;
  if (!rec.lost.ok() || !rec.grammar) return;
  auto& g = static_cast<GrammarPart&>(*rec.grammar);
  wait(g);
  if (!g.error.ok()) return;
  start_job(rec, g, row_ends);
}

// The forced string in the tokens the model would likeliest write it in:
// its BPE encoding, less a last token some longer token extends (the text
// after the string may merge with it: XGrammar drops it for the same
// reason), then only ids the sampler can emit.
std::vector<int32_t> TailGrammarImpl::forced_tokens(grammar::Matcher& m) const {
  const auto max = size_t(opt_.forced_drafts);
  if (!tok_) return m.forced_tokens(max);
  const std::string s = m.forced_string();
  if (s.empty()) return {};
  std::vector<int32_t> ids = tok_->encode(s, false, false);
  if (!ids.empty() &&
      (ids.back() < 0 || ids.back() >= vocab_->size() || extended(vocab_->token_bytes(ids.back()))))
    ids.pop_back();
  size_t n = 0;
  while (n < ids.size() && n < max && ids[n] >= 0 && ids[n] < vocab_->size() &&
         !vocab_->token_bytes(ids[n]).empty())
    ++n;
  ids.resize(n);
  return ids;
}

// Whether some token's bytes start with `bytes` and go on.
bool TailGrammarImpl::extended(const std::string& bytes) const {
  auto it = std::upper_bound(sorted_.begin(), sorted_.end(), bytes);
  return it != sorted_.end() && it->size() > bytes.size() && it->starts_with(bytes);
}

std::span<const int32_t> TailGrammarImpl::forced(int32_t r) {
  if (opt_.forced_drafts <= 0 || r < 0 || size_t(r) >= rows_.size() || !rows_[size_t(r)].rec)
    return {};
  TailSequence& rec = *rows_[size_t(r)].rec;
  if (!rec.lost.ok() || !rec.grammar) return {};
  auto& g = static_cast<GrammarPart&>(*rec.grammar);
  if (g.deferred) return {};  // no job ran for this output: no forced tokens known
  if (!g.forced_ready.valid() || g.mask_len != rec.output().size() || g.mask_edits != rec.edits)
    return {};  // the last job was not asked for them
  // Only until the job has found them: its mask fill goes on meanwhile
  // (g.error may still change: g.forced is empty wherever it is not ok).
  g.forced_ready.wait();
  return g.forced;
}

// Logged once per sequence. Runs on the tail thread or on the sequence's job.
void TailGrammarImpl::fail(GrammarPart& g, Status why) {
  release_forced(g);  // none will be found
  if (!g.error.ok()) return;
  KV_LOG_ERROR("agent", "sequence {}: structured output failed: {}", g.id, why.message());
  g.error = std::move(why);
  std::lock_guard lk(stats_mu_);
  stats_.failures++;
}

// Specs not seen for evict_age batches (their sequences' parts keep theirs).
void TailGrammarImpl::evict_specs(uint64_t batch) {
  if (batch < opt_.evict_age) return;
  const uint64_t before = batch - opt_.evict_age;
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
  // The same tokenizer the daemon loads: the GGUF file's, or a folder's
  // tokenizer.json (with its tokenizer_config.json and end ids).
  std::shared_ptr<const Tokenizer> tok;
  try {
    tok = model.gguf() ? Tokenizer::from_gguf(*model.gguf()) : hf_folder_tokenizer(model.path());
  } catch (const Error& e) {
    KV_LOG_WARN("stage", "structured outputs off: {}", e.message());
    return nullptr;
  }
  return std::make_unique<TailGrammarImpl>(grammar::Vocabulary::from_tokenizer(*tok, logits_width),
                                           table, options, tok);
}

}  // namespace kvasir
