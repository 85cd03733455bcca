// daemon/engine/scheduler.h — the iteration-level scheduler (docs/scheduler.md).
//
// The Scheduler owns the request lifecycle, the shape of nano-vllm's and
// vLLM v1's: every sequence, the waiting queue, the running set and the KV
// block manager are its own, and the bridge (bridge.h) only talks to it
// through the five calls below. The bridge keeps the ring; the scheduler
// keeps the requests:
//
//   add       a new request (the bridge has validated it) joins the queue;
//   abort     a client cancel: a final kAbort event;
//   schedule  the next micro-batch, as plain rows the bridge encodes as is;
//   update    a finished batch: tokens appended, stop rules, events, frees
//             (a drafting row's several tokens one by one, docs/speculative.md);
//   requeue_all  a stage was lost: every batch in flight is gone and every
//             running sequence is recomputed (the same rule as preemption).
//
// Inside, the decision is split the way TensorRT-LLM's batch manager splits
// it, so each part can be read and tested alone:
//
//   CapacityScheduler  who may hold KV: admission (per policy), on-demand
//   (capacity.h)       block growth, preemption when the pool runs dry.
//   BatchFormer        what goes in this micro-batch: decodes first, then
//   (batch_former.h)   prefill (whole or in chunks), under the token budget,
//                      the time budget (an ITL target, by the CostModel,
//                      cost_model.h, fitted from the stages' timings that
//                      update() brings) and a per-batch row cap that
//                      balances the ring.
//
// A sequence whose next token is still unknown (its sampling row in flight)
// is never scheduled again until the result is back: that keeps a decode out
// of two in-flight micro-batches. Prefill chunks of one prompt may follow
// each other back to back (stages run batches in order).
//
// Not thread-safe: the bridge's engine thread makes every call. Events go
// out through each request's sink from inside abort, update and end_all.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "daemon/engine/batch_former.h"
#include "daemon/engine/block_manager.h"
#include "daemon/engine/capacity.h"
#include "daemon/engine/cost_model.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/hybrid_cache.h"
#include "daemon/engine/policy.h"
#include "daemon/engine/sequence.h"
#include "daemon/engine/sliding_group.h"
#include "daemon/engine/time_budget.h"
#include "ipc/sampling.h"

namespace kvasir {

// One row of a micro-batch, complete: the bridge writes it into the ring
// descriptor without asking the scheduler anything more.
struct ScheduledRow {
  RequestId id = 0;
  int32_t index = 0;     // the request's choice (n > 1); the descriptor names it by sequence_key
  int32_t pos0 = 0;      // first position
  int32_t n_tokens = 0;  // positions [pos0, pos0 + n_tokens)
  bool sample = false;   // the tail samples the row's last position
  // `static` padding: filler positions, computed and never sampled
  // (docs/scheduler.md, "What `static` pads").
  bool pad = false;
  int32_t n_prompt = 0;  // the tail's penalties tell prompt from output by it
  // Prompt logprobs (ipc DescRow): -1 = off, else the alternatives wanted;
  // set on the rows that hold a prompt position followed by a prompt token. next_token: the prompt
  // token after the row's last position, or -1.
  int32_t prompt_logprobs = -1;
  int32_t next_token = -1;
  // Copy-on-write before the batch runs (parallel sampling): every stage
  // copies block copy_src to copy_dst, this row's own (-1: none).
  int32_t copy_src = -1, copy_dst = -1;
  // Speculative decoding: the last n_draft of `tokens` are drafts (a
  // decode row's guesses, docs/speculative.md); the result says which the
  // target accepted (RowResult::more).
  int32_t n_draft = 0;
  std::vector<int32_t> tokens;  // n_tokens ids (for padding, a filler id)
  std::vector<int32_t> table;   // the request's KV blocks, covering pos0 + n_tokens
  // Its sliding-window group's (empty without one): as long as `table`,
  // the entries before the window of pos0 unmapped (-1).
  std::vector<int32_t> swa_table;
  SamplingParams sampling;      // its seed always set
  // The request's structured-output spec (GenRequest::grammar), or null.
  std::shared_ptr<const std::string> grammar;
  // Its logit biases (GenRequest::logit_bias), or null.
  std::shared_ptr<const std::vector<LogitBias>> logit_bias;
};

struct SchedulerOutput {
  uint64_t id = 0;  // names the batch in BatchResult::batch (0: empty)
  std::vector<ScheduledRow> rows;
  bool empty() const { return rows.empty(); }
  int64_t n_tokens() const {
    int64_t n = 0;
    for (const ScheduledRow& r : rows) n += r.n_tokens;
    return n;
  }
};

// A token the tail sampled, with its raw logprob and top alternatives.
struct SampledToken {
  int32_t token = -1;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// What came back for one row (read only for rows with `sample` or prompt_logprobs).
struct RowResult {
  int32_t token = -1;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top_logprobs;
  // A row with drafts: the tokens emitted after `token`, in order: one per
  // accepted draft (token equals the row's first draft, more[0] its second,
  // ..., each checked by the bridge), the last the target's own.
  std::vector<SampledToken> more;
  // A constrained row: the grammar-forced tokens after the last one
  // emitted (ipc::ForcedRecord), the sequence's next drafts.
  std::vector<int32_t> forced;
  Status error;  // not ok: the result is unusable (kBadResult): the request fails with it
  // Rows with prompt_logprobs (sampled or not): the positions they scored.
  std::vector<PromptLogprob> prompt;
};

struct BatchResult {
  uint64_t batch = 0;  // the SchedulerOutput::id it answers
  // Not ok: the whole batch failed (a stage refused or failed it, or its
  // result slot was inconsistent); every request in it ends with kError.
  Status status;
  std::vector<RowResult> rows;  // with status ok: one per row of the output, in order
  // Each stage's busy time on the batch (seconds; empty or <= 0: unknown),
  // from the result slot: what the cost model is fitted from.
  std::vector<double> stage_busy_s;
  // Its time in the ring, from submission to result (seconds; 0: unknown):
  // the gap its decodes saw. Over the step (its slowest stage's busy time)
  // it is the ring's depth as it really is (docs/scheduler.md).
  double cycle_s = 0;
  // When the bridge read it (seconds on a monotonic clock; 0: unknown): the
  // instant its rows' tokens were born, so the gap since a row's previous
  // token is a real inter-token latency (the time budget's aim learns
  // from those, docs/scheduler.md "Aiming below the target").
  double done_s = 0;
};

struct SchedulerStats {
  int32_t waiting = 0, running = 0;
  int64_t blocks_total = 0, blocks_free = 0;
  // KV positions held by running sequences, and internal waste: allocated
  // slots past each sequence's last position (the tail of its last block).
  int64_t kv_slots_used = 0, kv_waste = 0;
  int64_t preemptions = 0;  // for lack of KV blocks
  int64_t requeued = 0;     // recomputed after a lost stage (or a lost cached block)
  int64_t tokens_generated = 0, tokens_prompt = 0;
  SchedTiming timing;
  std::vector<StageCost> cost;  // per stage
  // Prefix caching: blocks_free counts evictable blocks as free.
  int64_t blocks_cached = 0, blocks_evictable = 0;
  int64_t prefix_queries = 0, prefix_hits = 0;  // tokens looked up, and found
  int64_t prefix_resets = 0;                    // the cache emptied (requeue_all)
  // The sliding-window group (0 and 0 without one): its own pool, and of
  // it, like blocks_cached / blocks_evictable, the cached blocks and the
  // unheld ones among them (counted as free).
  int64_t blocks_swa_total = 0, blocks_swa_free = 0;
  int64_t blocks_swa_cached = 0, blocks_swa_evictable = 0;
  // Speculative decoding: its method's name and what it did.
  const char* spec_method = "none";
  SpecCounts spec;
};

class Scheduler {
 public:
  // eos_ids: the model's end-of-generation ids (a request may ignore them).
  // sliding: the sliding-window group's window and pool (sliding_group.h);
  // {0, 0}: none. With one, prefix caching finds no hits
  // (docs/scheduler.md, "Sliding-window groups").
  Scheduler(SchedLimits lim, int32_t n_blocks, int32_t block_size,
            std::vector<int32_t> eos_ids = {}, SlidingKv sliding = {});
  Scheduler(const Scheduler&) = delete;  // its parts hold references into it
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request at the tail: req.n sequences, one per choice, choice
  // i sampled with seed + i. `req` has been validated (check_request in the
  // bridge: ids in the vocabulary, prompt + max_tokens within the pool, n in
  // range, sampling seeded); `id` is new.
  void add(RequestId id, GenRequest req, EventSink sink);

  // A client cancel: a final kAbort event now for each choice not finished
  // (nothing if `id` is unknown or already finished). Its blocks go back
  // once no batch in flight names them; any token still to come is dropped.
  void abort(RequestId id);
  // The same for one choice (a stop string matched it); the others go on.
  void abort_choice(RequestId id, int32_t index);

  // The next micro-batch: admits waiting sequences, grows block tables
  // (preempting when the pool runs dry), marks the chosen positions
  // scheduled and the batch in flight until update() or requeue_all().
  // Empty when there is nothing to run. `load`: the ring now (free_slots
  // <= 0: unknown, rows balanced instead of tokens); the work, ready and in
  // flight, is spread evenly over the ring's slots.
  SchedulerOutput schedule(RingLoad load = {});

  // Applies a finished batch. Per sampled row: the token is appended and
  // sent as an event, and the stop rules run (an EOS id unless ignore_eos,
  // a stop id: kStop; max_tokens reached: kLength). A failed batch or row
  // ends its requests with kError and that Status. Finished requests' blocks
  // go back. A batch that is not in flight (one lost to requeue_all) is
  // ignored.
  void update(const BatchResult& result);

  // A stage was lost: every batch in flight is forgotten (its results will
  // never be applied), and every running sequence is preempted by the same
  // rule as for KV pressure (CapacityScheduler::preempt), newest first, so
  // the oldest admission ends at the head of the queue. Counted as requeued.
  // The prefix cache is emptied: a restarted stage's KV holds nothing.
  void requeue_all();

  // Ends every request (shutdown: kAbort; the engine failed: kError and
  // why): a final event to each not yet finished, then all are forgotten and
  // their blocks go back. Nothing in flight will be applied.
  void end_all(FinishReason why, const Status& error = {});

  SchedulerStats stats() const;

 private:
  struct InFlight {  // a batch in the ring: its rows, to apply a result to, and its shape
    std::vector<SchedRow> rows;
    BatchShape shape;
  };

  void begin_batch(RingLoad load);
  bool take(std::vector<SchedRow>& rows, Sequence* s);
  bool waits_for_leader(const Sequence* s) const;
  // Where a starting choice > 0 copies choice 0's last prompt block from.
  struct Fork {
    int32_t src = -1;     // choice 0's block
    int32_t index = -1;   // its place in the tables
    uint64_t writer = 0;  // choice 0's batch that finished writing it
  };
  Fork fork_from_leader(Sequence* s) const;
  SchedulerOutput emit(std::vector<SchedRow> rows);
  void learn_from(const InFlight& batch, const BatchResult& result);
  void add_drafts(std::vector<SchedRow>& rows);
  void add_drafts(SchedRow& row, Sequence* s, double& emitted, double ceiling);
  int32_t draft_length(const SchedRow& row, DraftEstimate& e, int64_t k_max, double emitted,
                       double ceiling);
  double step_cost(const BatchShape& shape) const;
  void apply_row(const SchedRow& row, const RowResult& res);
  void count_drafts(const SchedRow& row, const RowResult& res);
  FinishReason append_token(Sequence* s, const SampledToken& t);
  void end(Sequence* s, FinishReason why);
  static void mark_prompt_logprobs(const Sequence& s, ScheduledRow& o);
  void lose_pending_blocks(uint64_t failed_batch);
  void requeue_tainted();
  void send(Sequence* s, TokenEvent ev);
  void finish(Sequence* s, FinishReason why, Status error = {});
  void reap();

  SchedLimits lim_;
  BlockManager blocks_;
  SlidingGroup swa_;
  HybridCache cache_;  // refers to blocks_ and swa_ above
  std::set<int32_t> eos_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;  // by sequence_key
  SeqQueues q_;
  CapacityScheduler cap_;  // refers to lim_, q_, blocks_, swa_ and cache_ above
  TimeBudget time_;
  BatchFormer form_;  // refers to lim_ and time_'s cost model
  std::unordered_map<uint64_t, InFlight> inflight_;
  uint64_t next_batch_ = 1;
  int64_t tokens_generated_ = 0, tokens_prompt_ = 0;
  int64_t admission_waits_ = 0;
  int64_t prefix_resets_ = 0;
  std::unique_ptr<Drafter> drafter_;  // null: no speculation
  SpecCounts spec_;
};

}  // namespace kvasir
