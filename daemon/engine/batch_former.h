// daemon/engine/batch_former.h — what goes into one micro-batch: the token
// budget, the time budget, chunking, the row cap (docs/scheduler.md).
// Internal to the Scheduler.
//
// The micro-batch half of TensorRT-LLM's split (the other half, who holds
// KV, is capacity.h). Decodes go first, then prefill, whole or in chunks.
// It decides sizes only: blocks are the capacity scheduler's business.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/engine/cost_model.h"
#include "daemon/engine/policy.h"
#include "daemon/engine/sequence.h"

namespace kvasir {

// The time budget of one micro-batch under `continuous+chunked` with an ITL
// target (docs/scheduler.md, "Scheduling by time"): its predicted step (the
// slowest stage's busy time, CostModel::step) stays within `step_s`, the
// decodes first and prefill in what is left. The first prefill piece of
// the batch (the oldest admission's) always gets its aging floor, even past
// the budget: floor_tokens until it has been starved for `aging_steps`
// micro-batches (the decodes left prefill under a quarter of the step
// budget), then kAgedFloor doubled for every `aging_steps` more, so a long
// prompt under steady decode load still gets through.
struct StepBudget {
  static constexpr int32_t kAgedFloor = 16;
  double step_s = 0;  // 0: no time budget (tokens only, as without a target)
  // The floor of a prefill the budget has not starved: one position once
  // the cost model can size pieces (the aim, not the floor, then decides
  // how much goes: a 16-token floor cost ~40 ms a stage on a CPU and alone
  // broke a 72 ms target); 16 while it cannot (a cold start).
  int32_t floor_tokens = 16;
  int32_t aging_steps = 8;    // starved micro-batches per doubling of the floor
  // The step the target itself allows (target / depth), before the aim
  // lowers it (docs/scheduler.md, "Aiming below the target"): starvation is
  // judged against it, so aiming lower does not by itself age the floor.
  // 0: step_s.
  double target_step_s = 0;
};

// What the time budget did, counted over the scheduler's life.
struct BudgetCounts {
  int64_t cut = 0;   // prefill pieces the time budget made smaller
  int64_t aged = 0;  // pieces the aging floor made larger than the budget allowed
};

class BatchFormer {
 public:
  BatchFormer(const SchedLimits& lim, const CostModel& cost) : lim_(lim), cost_(cost) {}

  // Starts a batch. Ring known (load.free_slots > 0): the token budget
  // becomes min(ceil(work / free_slots), ceil((work + tokens_in_flight) /
  // inflight)), `work` being the tokens the running sequences could send
  // now, so every micro-batch in the ring carries a similar token count;
  // `floor` = the largest piece that cannot be cut (a whole prefill), below
  // which the budget never drops, or that piece would never go. Unknown:
  // rows are capped at ceil(active / inflight), `active` = running
  // sequences that want the ring. `time`: the step budget, if any.
  void begin(int64_t active, int64_t work = 0, RingLoad load = {}, int64_t floor = 0,
             StepBudget time = {});
  // Caps this batch's token budget at `tokens` (<= 0: no cap); after begin().
  void cap_tokens(int64_t tokens) {
    if (tokens > 0 && tokens < budget_) budget_ = int32_t(tokens);
  }
  // Tokens s would put in this batch now (0: not now).
  int32_t want(const Sequence& s) const;
  // Appends s's next n positions (its padding first, if any) to `rows` and
  // marks them scheduled.
  void add(std::vector<SchedRow>& rows, Sequence* s, int32_t n);
  bool full(const std::vector<SchedRow>& rows) const {
    return int32_t(rows.size()) >= row_cap_ || budget_ <= 0;
  }
  // The shape of the rows added since begin().
  const BatchShape& shape() const { return shape_; }
  const BudgetCounts& counts() const { return counts_; }

 private:
  // The most of the n positions s may add within the step budget, the aging
  // floor applied to the batch's first prefill piece.
  int32_t within_time(const Sequence& s, int32_t n) const;
  int32_t aging_floor(const Sequence& s) const;
  void count_piece(Sequence& s, int32_t n);

  const SchedLimits& lim_;
  const CostModel& cost_;
  int32_t budget_ = 0;
  int32_t row_cap_ = 0;
  StepBudget time_;
  BatchShape shape_;
  bool prefill_taken_ = false;  // a prefill piece is in the batch already
  BudgetCounts counts_;
};

}  // namespace kvasir
