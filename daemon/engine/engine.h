// daemon/engine/engine.h — the engine as the rest of the daemon sees it.
//
// The engine owns the scheduler loop: it admits requests, forms micro-batches,
// submits them to the head stage's ring and reads sampled token ids from the
// tail's. The HTTP layer only calls submit/cancel and receives events.
//
// Events are delivered on the engine's own thread: a callback must not block
// (post the event to your own executor and return).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "daemon/engine/ring_health.h"
#include "ipc/sampling.h"

namespace kvasir {

// The most choices one request may ask for (GenRequest::n), and the
// longest cache_salt.
constexpr int32_t kMaxChoices = 16;
constexpr size_t kMaxCacheSalt = 1024;

struct GenRequest {
  std::vector<int32_t> prompt;  // token ids, checked against the vocabulary
  int32_t max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // besides the model's end-of-generation ids
  bool ignore_eos = false;        // benchmarks: generate exactly max_tokens
  // false: its rows carry no drafts even where [speculative] is on.
  bool speculative = true;
  // Parallel sampling: n continuations of the one prompt (1..kMaxChoices),
  // choice i sampled with seed + i; each event names its choice
  // (TokenEvent::index). With prefix caching the prompt is computed once
  // and the choices share its blocks (docs/scheduler.md).
  int32_t n = 1;
  // Prefix caching isolation: blocks are shared only between requests with
  // the same salt (empty: the default pool every unsalted request shares).
  std::string cache_salt;
  // Structured outputs: the spec the output must match, in grammar/'s wire
  // form (grammar::encode_spec), already compiled once by the API; null =
  // unconstrained. Opaque to the engine: the bridge puts it into the
  // segment's grammar table and the tail stage compiles and applies it.
  std::shared_ptr<const std::string> grammar;
  // logit_bias: at most kMaxLogitBias (token, bias) pairs, each token in the
  // vocabulary and bias in [-100, 100] (ipc/sampling.h); null or empty =
  // none. Every row of the request carries them to the tail's sampler
  // (encode_batch sets sampling.n_logit_bias from it).
  std::shared_ptr<const std::vector<LogitBias>> logit_bias;
  // Prompt logprobs (docs/api.md): -1 = off; k in [0, kMaxLogprobs] = the
  // logprob of every prompt token after the first, each with its k most
  // likely alternatives, in each choice's events before its first
  // generated token. Such a request never starts past a cached prefix
  // (its choices share none): the tail needs every position's logits.
  int32_t prompt_logprobs = -1;
};

// One prompt token's logprob (GenRequest::prompt_logprobs): the token at
// `position` (>= 1) given those before it; rank 1 = the most likely.
struct PromptLogprob {
  int32_t position = 0;
  int32_t token = 0;
  float logprob = 0.f;
  int32_t rank = 0;
  std::vector<std::pair<int32_t, float>> top;  // highest first
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

struct TokenEvent {
  int32_t token = -1;  // -1 when the event only carries an end
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top_logprobs;  // when asked
  FinishReason finish = FinishReason::kNone;
  Status error;       // with kError: what went wrong (the API picks the HTTP status by its code)
  int32_t index = 0;  // the choice (0..n-1) the event is for
  // Prompt tokens this choice's first admission found in the prefix cache
  // (usage.prompt_tokens_details.cached_tokens); on every event.
  int32_t cached_tokens = 0;
  // Prompt logprobs of the positions a prefill chunk covered, in position
  // order (with token -1: the event carries nothing else). A recompute
  // after a preemption may send positions again.
  std::vector<PromptLogprob> prompt_logprobs;
};

using RequestId = uint64_t;
using EventSink = std::function<void(const TokenEvent&)>;

// ok: serving. recovering: a lost stage is being restarted (requests wait).
// failed: the restart limit was hit; work is refused (EngineStats::failure).
enum class EngineState { kOk, kRecovering, kFailed };
inline const char* engine_state_name(EngineState s) {
  switch (s) {
    case EngineState::kRecovering:
      return "recovering";
    case EngineState::kFailed:
      return "failed";
    case EngineState::kOk:
      break;
  }
  return "ok";
}

// How the scheduler budgets micro-batches by time (docs/scheduler.md,
// "Scheduling by time"), and what it measured doing so.
struct SchedTiming {
  double itl_target_ms = 0;  // the target in force now (auto: its current value); 0: none
  bool itl_target_auto = false;
  double step_budget_ms = 0;    // the step budget of the last micro-batch formed; 0: none
  bool cost_ready = false;      // the cost model has seen enough batches to budget with
  int64_t batches = 0;          // micro-batches back from the ring
  int64_t prefill_batches = 0;  // ... of which carried prefill (chunks, recomputes, padding)
  int64_t decode_rows = 0;      // decode rows back from the ring
  int64_t decode_rows_with_prefill = 0;  // ... of which rode in a batch carrying prefill
  // Recent means (the last ~20 batches of each kind) of the measured step:
  // the slowest stage's busy time on the batch.
  double step_ms_decode = 0;              // batches of decodes only
  double step_ms_prefill = 0;             // batches carrying prefill and decodes
  double mean_rows = 0, mean_tokens = 0;  // recent mean micro-batch
  // The ring's depth as measured: a batch's time in the ring over its step
  // (recent mean). max(stages, max_inflight) when each stage has a core; more
  // when the stages share cores and take turns. 0: not measured yet.
  double ring_depth = 0;
  // The time budget's aim: the step budget is target / depth x aim (1 =
  // at the target), lowered while more than 3% of recent gaps exceed it;
  // over_target: that recent share (docs/scheduler.md, "Aiming below").
  double aim = 1;
  double over_target = 0;
  int64_t prefill_cut = 0;                // prefill pieces the time budget made smaller
  int64_t prefill_aged = 0;               // pieces the aging floor let past the budget
  int64_t admission_waits = 0;  // decisions where a waiting request found no room (KV or seqs)
};

struct EngineStats {
  int32_t waiting = 0, running = 0;
  int64_t blocks_total = 0, blocks_free = 0;
  // The sliding-window group's own pool (docs/scheduler.md; 0 and 0
  // without one): blocks_total/free above are the full group's.
  int64_t blocks_swa_total = 0, blocks_swa_free = 0;
  int64_t preemptions = 0;
  int64_t tokens_generated = 0, tokens_prompt = 0;
  // KV positions held by running sequences, and internal waste: allocated
  // slots past each sequence's last position (the tail of its last block).
  int64_t kv_slots_used = 0, kv_waste = 0;
  // Stage crash recovery (docs/recovery.md). While a lost stage is being
  // restarted the engine is degraded: requests wait (none fails), then every
  // running sequence is recomputed. kFailed: the restart limit was hit; the
  // engine refuses work and `failure` says why.
  int64_t restarts = 0;        // stage processes restarted
  int64_t faults = 0;          // stage losses (deaths and watchdog kills)
  int64_t requeued = 0;        // sequences recomputed after a loss
  bool degraded = false;       // recovering right now
  double last_recovery_s = 0;  // last loss seen → ring serving again
  EngineState state = EngineState::kOk;
  std::string failure;  // with kFailed: why
  std::string last_fault;  // what the last loss was ("" before any)
  // The links to worker hosts (docs/multi-host.md): their state, bytes and
  // round trip. Empty on one host.
  std::vector<LinkHealth> links;
  // Prefix caching (docs/scheduler.md). blocks_free above counts evictable
  // blocks as free (they are capacity); blocks_cached are those whose KV a
  // later prompt may reuse, held or not, blocks_evictable the unheld ones.
  bool prefix_caching = false;
  int64_t blocks_cached = 0, blocks_evictable = 0;
  // The same two counts in the sliding-window group's pool (0 without one;
  // its blocks are cached under the full group's entries, hybrid_cache.h).
  int64_t blocks_swa_cached = 0, blocks_swa_evictable = 0;
  // Tokens looked up in the cache when sequences started (or restarted
  // after a preemption), and of those, tokens found: hits / queries is the
  // hit rate.
  int64_t prefix_queries = 0, prefix_hits = 0;
  int64_t prefix_resets = 0;  // the cache emptied for a new epoch (a lost stage)
  // Speculative decoding (docs/speculative.md): the drafter's name ("none":
  // off), rows that carried drafts (results applied), their draft tokens,
  // and those the target accepted. Mean accepted length: 1 +
  // spec_accepted / spec_drafts tokens per drafting row.
  std::string spec_method = "none";
  int64_t spec_drafts = 0, spec_proposed = 0, spec_accepted = 0;
  // The adaptive draft length: decode rows that could have drafted and
  // drafted nothing, because their acceptance turned them down or because
  // the step's cost did; and probes of resting sequences (SpecCounts).
  int64_t spec_zero_by_acceptance = 0, spec_zero_by_cost = 0, spec_probes = 0;
  // Of spec_drafts / _proposed / _accepted, the grammar-forced ones
  // (structured outputs).
  int64_t spec_forced_drafts = 0, spec_forced_proposed = 0, spec_forced_accepted = 0;
  SchedTiming timing;
};

// A stage's cost model (daemon/engine/cost_model.h): its busy time on a
// micro-batch ≈ fixed + per_token · tokens + per_kctx · context / 1024 +
// per_sample · sampled rows.
struct StageCost {
  double fixed_ms = 0, per_token_ms = 0, per_kctx_ms = 0, per_sample_ms = 0;
  double rms_ms = 0;        // the fit's recent error
  double mean_busy_ms = 0;  // recent mean busy time per micro-batch
  int64_t samples = 0;      // micro-batches fitted
};

// One stage as the engine reports it: its slice of the plan and its
// counters. busy + starved + blocked is the time since it began serving,
// as of the moment of the report: the phase it is in counts up to then.
struct StageReport {
  int32_t index = 0;
  int32_t first_layer = 0, last_layer = 0;  // inclusive
  std::string device;                       // "cpu", "cuda:N"
  double busy_s = 0, starved_s = 0, blocked_s = 0;
  uint64_t batches = 0, tokens = 0, refused = 0;
  std::string state = "down";  // busy, starved, blocked, or down (not serving)
  double state_s = 0;          // how long it has been in it
  StageCost cost;
  // What runs its kernels, as the stage published it (ipc::read_stage_simd):
  // a CPU stage's SIMD summary ("cpu:avx512_vnni amx:no q4_1/decode:avx2
  // ..."), a GPU stage's device; "" until the stage has said.
  std::string simd;
  // The expert load, as the stage published it (ipc::read_stage_experts):
  // its model's experts (0: dense), and the tokens routed to each since
  // start over the MoE layers it holds, experts_per_slot consecutive
  // experts per entry (base/expert_load.h: 1 up to 256 experts).
  int32_t n_experts = 0, experts_per_slot = 1;
  std::vector<uint64_t> routed;
  // An expert group's leader (docs/expert-groups.md): the first expert of
  // each of its processes, itself (0) then its members in order; empty
  // for a stage outside a group. Splits `routed` into the members' shares.
  std::vector<int32_t> group_firsts;
  // Handoffs into the stage (ipc StageStats::handoff_ns): from the later of
  // the upstream push and the stage being free, to the stage holding the
  // batch. handoff_s over handoffs is the ring's own latency per hop.
  double handoff_s = 0;
  uint64_t handoffs = 0;
  // Its place: the ring position, and 0 for a stage (an expert group's
  // leader included) or k >= 1 for member k of that position's group
  // (docs/expert-groups.md). index counts every process, members last.
  int32_t position = 0, member = 0;
};

struct RingReport {
  int32_t inflight = 0;  // micro-batches the ring may hold at once (its capacity)
  int32_t in_ring = 0;   // micro-batches in the ring now
  // The last hop, tail to bridge: from the tail's push to the bridge's read
  // of each result (including any time the bridge spent on other work).
  double return_s = 0;
  uint64_t returns = 0;
  std::vector<StageReport> stages;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues a request. Returns its id; a refused request (bad ids, too long,
  // queue full) gets exactly one event with kError and its Status, and 0 is
  // returned. Thread-safe.
  virtual RequestId submit(GenRequest req, EventSink sink) = 0;
  // Aborts at the next iteration; frees its blocks; a final kAbort event follows.
  virtual void cancel(RequestId id) = 0;
  // Ends one choice of an n > 1 request (a stop string matched it): a
  // final kAbort event for that choice, the others go on. An engine that
  // cannot generates it to its end; the caller ignores the rest.
  virtual void stop_choice(RequestId id, int32_t index) {
    (void)id;
    (void)index;
  }
  virtual EngineStats stats() const = 0;
  // The ring's stages and their counters (none before the ring is up).
  virtual RingReport ring_report() const { return {}; }
  virtual bool ready() const = 0;
  // The most tokens (prompt + output) one sequence may reach: the model's
  // context, or less where the KV pool or a row's table cannot hold that
  // much. 0: not known yet (the stages are still loading).
  virtual int32_t max_sequence_tokens() const { return 0; }
};

}  // namespace kvasir
