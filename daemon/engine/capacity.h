// daemon/engine/capacity.h — who holds KV: admission, on-demand block
// growth, preemption (docs/scheduler.md). Internal to the Scheduler.
//
// The capacity half of TensorRT-LLM's split (the other half, what goes into
// one micro-batch, is batch_former.h). It works on the Scheduler's queues
// and block manager, which it is given by reference and never owns.
//
// Blocks are taken as positions are scheduled, not reserved for
// prompt + max_tokens at admission: the cache holds what is really written.
// When a sequence cannot get its next block, the most recently admitted
// running sequence that has nothing in flight is preempted (preempt below).
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/engine/block_manager.h"
#include "daemon/engine/hybrid_cache.h"
#include "daemon/engine/policy.h"
#include "daemon/engine/sequence.h"
#include "daemon/engine/sliding_group.h"

namespace kvasir {

// Why a sequence loses its blocks. The rule is the same; only the counter
// differs: EngineStats::preemptions means "the pool ran dry" (kvasir top
// reads it as KV-bound), EngineStats::requeued means "a stage was lost" or
// "a cached block it reused was lost with a failed batch" (kBlockLost).
enum class PreemptCause { kKvPressure, kStageLost, kBlockLost };

class CapacityScheduler {
 public:
  // swa: the sliding-window group's blocks (off for most models): every
  // count below is made per group, and a sequence fits only when both do.
  // cache: prefix caching over both (hybrid_cache.h).
  CapacityScheduler(const SchedLimits& lim, SeqQueues& q, BlockManager& blocks, SlidingGroup& swa,
                    HybridCache& cache)
      : lim_(lim), q_(q), blocks_(blocks), swa_(swa), cache_(cache) {}

  // One decision's admission: moves sequences from the head of the waiting
  // queue to the running set while the policy and the pool allow. Blocks
  // are promised, not taken (grow takes them). Under `static` the admitted
  // batch is padded to its longest prompt. Returns how many were admitted.
  int32_t admit_waiting();

  // Grows s's table to cover `tokens` positions. If the pool is short,
  // preempts the newest running sequence with nothing in flight and not in
  // `taken` (the rows of the batch being formed) until it fits. A sequence
  // holding no blocks yet never preempts. Returns false when s cannot grow
  // now; s itself may have been preempted then (check s->running()).
  // First, s's sliding table gives back what its window has passed.
  bool grow(Sequence* s, int64_t tokens, const std::vector<SchedRow>& taken);
  // Grows both of s's tables to cover `tokens` positions from the free
  // blocks alone (no preemption): all or nothing.
  bool ensure(Sequence* s, int64_t tokens);
  // Positions past `end` s's tables could grow to now without preempting.
  int64_t room(const Sequence* s, int64_t end) const;
  // Gives back every block of both of s's tables, and the blocks past
  // those covering `tokens` (trim).
  void release(Sequence* s);
  void trim(Sequence* s, int64_t tokens);

  // THE requeue rule, for KV pressure and for a lost stage alike: s's
  // blocks go back (Sequence::reset_for_recompute does the rest), it is to
  // be recomputed from its prompt plus the tokens
  // generated so far (n_scheduled = 0; nothing is re-sent to the client,
  // and the sampler's draw depends on (seed, position) only, so the text
  // continues exactly), its `static` padding is dropped (its next batch
  // pads it afresh), it goes to the head of the waiting queue, and it is
  // counted (per sequence, and by `why`). s must be running with nothing
  // in flight.
  void preempt(Sequence* s, PreemptCause why);

  // Prefix caching (docs/scheduler.md). A sequence about to get its first
  // row (it holds nothing) starts from the longest cached run of whole
  // blocks of its tokens: they enter its table shared and read-only, and
  // count as scheduled. Returns the tokens reused (0 without caching).
  int64_t reuse_prefix(Sequence* s);
  // Gives a reuse back when the first row could not be formed after all
  // (no room): s holds nothing again, as a waiter for room must.
  void undo_reuse(Sequence* s);
  // The first row went: counts the lookup (`hit` tokens of s's tokens).
  void count_lookup(Sequence* s, int64_t hit);
  // Caches the blocks s's scheduled positions fill, written by batch `writer`.
  void cache_written(Sequence* s, uint64_t writer);
  // The tokens reuse_prefix would reuse for s now (0 unless it is about
  // to start).
  int64_t reusable(const Sequence* s) const;
  // Whether s may start past a cached prefix (caching on, and no penalty
  // that needs the tail to see every position: penalties_active).
  bool may_reuse(const Sequence* s) const;

  int64_t preemptions() const { return preemptions_; }
  int64_t requeued() const { return requeued_; }
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }

 private:
  // Whether the policy lets the head of the queue in now (blocks aside).
  bool may_admit(int32_t admitted_this_batch) const;
  // Blocks s's first piece would use up: new blocks, plus reused ones that
  // are evictable now (taking them costs capacity too); and in the sliding
  // group (swa_need).
  int32_t first_need(const Sequence* s, int32_t* swa_need) const;
  // Whether growing s to `tokens` positions is short of blocks in a group.
  bool short_of_blocks(const Sequence* s, int64_t tokens) const;
  void admit(Sequence* s);
  void pad_static_batch(int32_t admitted, int64_t longest);
  Sequence* victim(const std::vector<SchedRow>& taken) const;

  const SchedLimits& lim_;
  SeqQueues& q_;
  BlockManager& blocks_;
  SlidingGroup& swa_;
  HybridCache& cache_;
  uint64_t next_admit_ = 1;
  int64_t preemptions_ = 0;
  int64_t requeued_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace kvasir
