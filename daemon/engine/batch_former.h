// daemon/engine/batch_former.h — what goes into one micro-batch: the token
// budget, chunking, the row cap (docs/scheduler.md). Internal to the
// Scheduler.
//
// The micro-batch half of TensorRT-LLM's split (the other half, who holds
// KV, is capacity.h). Decodes go first, then prefill, whole or in chunks.
// It decides sizes only: blocks are the capacity scheduler's business.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/engine/policy.h"
#include "daemon/engine/sequence.h"

namespace kvasir {

class BatchFormer {
 public:
  explicit BatchFormer(const SchedLimits& lim) : lim_(lim) {}

  // Starts a batch. Ring known (load.free_slots > 0): the token budget
  // becomes min(ceil(work / free_slots), ceil((work + tokens_in_flight) /
  // inflight)), `work` being the tokens the running sequences could send
  // now, so every micro-batch in the ring carries a similar token count;
  // `floor` = the largest piece that cannot be cut (a whole prefill), below
  // which the budget never drops, or that piece would never go. Unknown:
  // rows are capped at ceil(active / inflight), `active` = running
  // sequences that want the ring.
  void begin(int64_t active, int64_t work = 0, RingLoad load = {}, int64_t floor = 0);
  // Tokens s would put in this batch now (0: not now).
  int32_t want(const Sequence& s) const;
  // Appends s's next n positions (its padding first, if any) to `rows` and
  // marks them scheduled.
  void add(std::vector<SchedRow>& rows, Sequence* s, int32_t n);
  bool full(const std::vector<SchedRow>& rows) const {
    return int32_t(rows.size()) >= row_cap_ || budget_ <= 0;
  }

 private:
  const SchedLimits& lim_;
  int32_t budget_ = 0;
  int32_t row_cap_ = 0;
};

}  // namespace kvasir
