// daemon/engine/scheduler.h — the iteration-level scheduler (docs/scheduler.md).
//
// One decision per micro-batch, made by the bridge whenever a ring slot is
// free. The decision is split the way TensorRT-LLM's batch manager splits it,
// so each part can be read and tested alone:
//
//   CapacityScheduler  who may hold KV: admission (per policy), on-demand
//                      block growth, preemption when the pool runs dry.
//   BatchFormer        what goes in this micro-batch: decodes first, then
//                      prefill (whole or in chunks), under the token budget
//                      and a per-batch row cap that balances the ring.
//
// Blocks are taken as positions are scheduled, not reserved for
// prompt + max_tokens at admission: the cache holds what is really written.
// When a sequence cannot get its next block, the most recently admitted
// running sequence that has nothing in flight is preempted: its blocks go
// back and it returns to the head of the queue, to be recomputed from its
// prompt plus the tokens generated so far (nothing is re-sent to the
// client: the recompute only refills KV, and its last row samples the next
// position). The sampler's draw depends on (seed, position) only
// (stages/sampler.h), so the output is unchanged by preemption.
//
// A sequence whose next token is still unknown (its sampling row in flight)
// is never scheduled again until the result is back: that keeps a decode out
// of two in-flight micro-batches. Prefill chunks of one prompt may follow
// each other back to back (stages run batches in order).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <vector>

#include "daemon/engine/block_manager.h"
#include "daemon/engine/engine.h"

namespace kvasir {

enum class Policy {
  kNaive,       // one request at a time
  kStatic,      // a batch admitted together; the next only when all have finished
  kContinuous,  // iteration-level admission, whole prefills
  kChunked,     // "continuous+chunked": chunked prefill mixed with decodes (default)
};
std::optional<Policy> parse_policy(std::string_view name);
const char* policy_name(Policy p);

struct Sequence {
  RequestId id = 0;
  GenRequest req;
  EventSink sink;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  int64_t n_scheduled = 0;  // positions sent to the ring (KV written or being written)
  int32_t batches_in_flight = 0;
  bool awaiting = false;  // its sampling row is in flight
  bool cancelled = false;
  bool done = false;           // final event sent; free when batches_in_flight == 0
  bool running = false;        // in the running set (kept by the scheduler)
  uint64_t admitted = 0;       // admission order: the newest is preempted first
  int32_t preempted = 0;       // times it lost its blocks
  std::vector<int32_t> table;  // KV blocks
  // `static` padding (docs/scheduler.md): filler positions [pad_next,
  // pad_end) past its prompt still to be computed before its prefill, so
  // its prefill costs what the batch's longest prompt costs.
  int64_t pad_next = 0, pad_end = 0;
};

struct SchedRow {
  Sequence* seq = nullptr;
  int32_t pos0 = 0;
  int32_t n_tokens = 0;
  bool sample = false;
  // Padding (`static`): n_tokens filler tokens at [pos0, pos0 + n_tokens),
  // all past the sequence's tokens. Computed like any row, never sampled;
  // the KV they write is overwritten by the sequence's own decodes before
  // any row reads it (attention at position q reads positions <= q only).
  bool pad = false;
};

// The ring as the bridge sees it when it forms a batch.
struct RingLoad {
  int32_t free_slots = 0;        // free now, counting this batch's (<= 0: unknown)
  int64_t tokens_in_flight = 0;  // tokens of the batches in the busy slots
};

struct SchedLimits {
  int32_t max_rows = 32;
  int32_t max_tokens = 512;
  int32_t chunk_size = 512;
  int32_t max_num_seqs = 256;
  Policy policy = Policy::kChunked;
  int32_t inflight = 1;  // micro-batches the ring holds at once (the bridge sets it)
};

// Admission and preemption: who holds KV blocks.
class CapacityScheduler {
 public:
  explicit CapacityScheduler(const SchedLimits& lim) : lim_(lim) {}

  // Whether the policy lets `waiting.front()` in now (blocks aside).
  bool may_admit(const std::deque<Sequence*>& waiting, const std::vector<Sequence*>& running,
                 int32_t admitted_this_batch) const;
  void admit(Sequence* s, std::deque<Sequence*>& waiting, std::vector<Sequence*>& running);

  // Grows s's table to cover `tokens` positions. If the pool is short,
  // preempts the newest running sequence with nothing in flight and not in
  // `taken` (this batch's rows), until it fits. With `may_preempt` false
  // (admission) nothing is preempted. Returns false when s cannot grow now;
  // s itself may have been preempted then (check s->running).
  bool grow(Sequence* s, int64_t tokens, BlockManager& blocks, std::deque<Sequence*>& waiting,
            std::vector<Sequence*>& running, const std::vector<SchedRow>& taken, bool may_preempt);

  int64_t preemptions() const { return preemptions_; }

 private:
  void preempt(Sequence* v, BlockManager& blocks, std::deque<Sequence*>& waiting,
               std::vector<Sequence*>& running);

  const SchedLimits& lim_;
  uint64_t next_admit_ = 1;
  int64_t preemptions_ = 0;
};

// Micro-batch forming: token budget, chunking, row cap.
class BatchFormer {
 public:
  explicit BatchFormer(const SchedLimits& lim) : lim_(lim) {}

  // Starts a batch. Ring known (load.free_slots > 0): the token budget
  // becomes min(ceil(work / free_slots), ceil((work + tokens_in_flight) /
  // inflight)), `work` being the tokens the running sequences could send
  // now, so every micro-batch in the ring carries a similar token count;
  // `floor` = the largest piece
  // that cannot be cut (a whole prefill), below which the budget never
  // drops, or that piece would never go. Unknown: rows are capped at
  // ceil(active / inflight), `active` = running sequences that want the ring.
  void begin(int64_t active, int64_t work = 0, RingLoad load = {}, int64_t floor = 0);
  // Tokens s would put in this batch now (0: not now).
  int32_t want(const Sequence& s) const;
  void add(std::vector<SchedRow>& rows, Sequence* s, int32_t n);
  bool full(const std::vector<SchedRow>& rows) const {
    return int32_t(rows.size()) >= row_cap_ || budget_ <= 0;
  }

 private:
  const SchedLimits& lim_;
  int32_t budget_ = 0;
  int32_t row_cap_ = 0;
};

class Scheduler {
 public:
  explicit Scheduler(SchedLimits lim) : lim_(lim), cap_(lim_), form_(lim_) {}

  // Builds the next micro-batch: admits waiting sequences, grows block
  // tables (preempting when needed), marks the chosen positions scheduled.
  // Empty when there is nothing to run. `load`: the ring now (free_slots
  // <= 0: unknown, no token balancing); the work, ready and in flight, is
  // spread evenly over the ring's slots.
  std::vector<SchedRow> next(std::deque<Sequence*>& waiting, std::vector<Sequence*>& running,
                             BlockManager& blocks, RingLoad load = {});

  int64_t preemptions() const { return cap_.preemptions(); }
  const SchedLimits& limits() const { return lim_; }

 private:
  bool take(std::vector<SchedRow>& rows, Sequence* s, BlockManager& blocks,
            std::deque<Sequence*>& waiting, std::vector<Sequence*>& running);

  SchedLimits lim_;
  CapacityScheduler cap_;
  BatchFormer form_;
};

}  // namespace kvasir
