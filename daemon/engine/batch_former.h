// daemon/engine/batch_former.h — what goes into one micro-batch: the token
// budget, the time budget, chunking, the row cap (docs/scheduler.md).
// Internal to the Scheduler.
//
// The micro-batch half of TensorRT-LLM's split (the other half, who holds
// KV, is capacity.h). Decodes go first, then prefill, whole or in chunks.
// It decides sizes only: blocks are the capacity scheduler's business.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "daemon/engine/cost_model.h"
#include "daemon/engine/policy.h"
#include "daemon/engine/sequence.h"
#include "daemon/engine/time_budget.h"  // StepBudget

namespace kvasir {

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
  // Speculative decoding: `row`, a decode row already added, carries n
  // draft tokens after its own (row.draft, set by the caller): they count
  // against the token budget (down to 0) and the shape like any token.
  void add_drafts(SchedRow& row, int32_t n);
  int32_t budget_left() const { return budget_; }
  // Positions the plan's max_tokens leaves this batch: what adaptive drafts
  // may take (the balancing share above counts only what decodes and
  // prefills send; a draft taken past it leaves prefill nothing).
  int64_t draft_room() const { return std::max<int64_t>(0, lim_.max_tokens - shape_.tokens); }
  // The step budget's limit on the batch's predicted step (0: none).
  double step_limit() const { return time_.step_s; }
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
