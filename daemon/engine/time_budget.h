// daemon/engine/time_budget.h — how long the next micro-batch may take
// (docs/scheduler.md, "Scheduling by time"). Internal to the Scheduler.
//
// The feedback controller, kept apart from the request lifecycle: it owns
// the cost model (fitted from the stages' busy times every finished batch
// brings), the ring's measured depth and the aim, and turns them into the
// step budget the BatchFormer forms a batch under. The Scheduler tells it
// what the running set is when a batch is formed (RunningSet) and what
// came back when one returns (observe, learn_gaps); it never sees a
// Sequence, so it can be driven and tested with plain numbers.
//
// Not thread-safe: the Scheduler's thread makes every call.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/engine/cost_model.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/policy.h"

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
  int32_t aging_steps = 8;  // starved micro-batches per doubling of the floor
  // The step the target itself allows (target / depth), before the aim
  // lowers it (docs/scheduler.md, "Aiming below the target"): starvation is
  // judged against it, so aiming lower does not by itself age the floor.
  // 0: step_s.
  double target_step_s = 0;
};

// The running set as the budget needs it (finished sequences left out).
struct RunningSet {
  int64_t running = 0;    // sequences admitted and not finished
  int64_t decoding = 0;   // ... of which past their prompt (their gaps are protected)
  int64_t positions = 0;  // their tokens together, prompt and generated
};

class TimeBudget {
 public:
  // lim.itl_target_ms: > 0 a fixed target, < 0 automatic, 0 none.
  explicit TimeBudget(const SchedLimits& lim);

  // The step budget of the next micro-batch. None (step_s 0) without a
  // target, under a policy other than `continuous+chunked`, or when nothing
  // decodes. While the cost model cannot tell a step's cost yet, a budget
  // of decodes and the aging floor only (step_s ~0, floor_tokens 16).
  // Otherwise target / depth (depth: max(stages, max_inflight) until eight
  // batches measured the ring's, then that), times the aim. Records the
  // budget and target in timing().
  StepBudget step_budget(const RunningSet& set);

  // With nothing decoding, the token cap that fills the pipeline soonest
  // for `work` prompt tokens: sqrt(work·f / ((D - 1)·p)), never under
  // kAgedFloor (f, p: the slowest stage's fixed and per-token cost; D: the
  // stages that compute at once). 0 (no cap) under whole-prefill policies,
  // with D < 2, no work, or while the cost model cannot tell f from p.
  int64_t pipeline_piece(int64_t work) const;

  // A batch of `shape` came back whole: the timing figures count it, the
  // cost model learns each stage's busy time (seconds; empty: unknown), and
  // `cycle_s` (its time in the ring; 0: unknown) over its step feeds the
  // ring's measured depth.
  void observe(const BatchShape& shape, const std::vector<double>& stage_busy_s, double cycle_s);

  // The inter-token gaps (seconds) of the sampled rows of a batch that came
  // back, each a token's birth minus its predecessor's. Under a fixed
  // target with a budget in force, the aim goes down 3% while more than 3%
  // of recent gaps exceed the target, and up 0.5% in a batch that
  // `carried_prefill` while they do not, within [0.25, 1]. Automatic
  // targets and no budget: the share is kept, the aim stays at 1.
  void learn_gaps(const std::vector<double>& gaps, bool carried_prefill);

  const CostModel& cost() const { return cost_; }
  // Everything SchedTiming says but the Scheduler's and the BatchFormer's
  // counts (admission_waits, prefill_cut, prefill_aged: left 0 here).
  const SchedTiming& timing() const { return timing_; }

 private:
  double auto_step(int64_t running, int64_t positions) const;

  const SchedLimits lim_;  // a copy: tests build one from a temporary
  CostModel cost_;
  SchedTiming timing_;
  int64_t depth_samples_ = 0;
  double cycle_mean_ = 0, step_mean_ = 0;  // recent means, seconds (the ring's depth)
  // The aim (docs/scheduler.md, "Aiming below the target"): the step
  // budget is target / depth x aim_, aim_ in [kAimMin, 1].
  double aim_ = 1.0;
  double over_share_ = 0;  // recent share of gaps over the target (EWMA)
};

}  // namespace kvasir
