// The time budget (daemon/engine/time_budget.h) alone, driven with plain
// numbers: stages whose busy time is a known linear function of the batch,
// a ring whose cycle is a known multiple of the step, and gaps chosen on
// either side of the target. The Scheduler's use of it (chunks cut, aging,
// aim under noise) is tested through the fake ring in
// test_scheduler_time.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "daemon/engine/time_budget.h"

namespace kvasir {
namespace {

constexpr double kFixed = 0.020, kPerToken = 0.002;  // a CPU stage: 20 ms + 2 ms a token

double busy(const BatchShape& b) { return kFixed + kPerToken * double(b.tokens); }

SchedLimits limits(double itl_target_ms, int32_t n_stages = 2, int32_t inflight = 2) {
  SchedLimits l;
  l.policy = Policy::kChunked;
  l.itl_target_ms = itl_target_ms;
  l.n_stages = n_stages;
  l.inflight = inflight;
  return l;
}

// Batches of decodes and of prefill chunks, every stage taking busy(b),
// each `depth` steps in the ring (0: cycle unknown), until the cost model
// can budget.
void warm(TimeBudget& t, int n_stages, double depth = 0, int batches = 40) {
  for (int i = 0; i < batches; ++i) {
    BatchShape b;
    for (int r = 0; r < 1 + i % 8; ++r) b.add_row(500 + i, 1, true, true);
    if (i % 3 == 0) b.add_row(0, 32 + 16 * (i % 20), false, false);
    const double s = busy(b);
    t.observe(b, std::vector<double>(size_t(n_stages), s), depth * s);
  }
}

const RunningSet kDecoding{4, 4, 4 * 600};

TEST(TimeBudget, NoneWithoutATargetAPolicyForItOrADecodeToProtect) {
  TimeBudget none(limits(0));
  warm(none, 2);
  EXPECT_EQ(none.step_budget(kDecoding).step_s, 0);
  SchedLimits whole = limits(100);
  whole.policy = Policy::kContinuous;
  TimeBudget cont(whole);
  warm(cont, 2);
  EXPECT_EQ(cont.step_budget(kDecoding).step_s, 0);
  TimeBudget prompts(limits(100));
  warm(prompts, 2);
  EXPECT_EQ(prompts.step_budget(RunningSet{3, 0, 900}).step_s, 0);
  EXPECT_EQ(prompts.timing().step_budget_ms, 0);
}

TEST(TimeBudget, ColdStartIsDecodesAndTheAgingFloorOnly) {
  TimeBudget t(limits(100, 3, 2));
  const StepBudget b = t.step_budget(kDecoding);
  EXPECT_FALSE(t.timing().cost_ready);
  EXPECT_GT(b.step_s, 0);
  EXPECT_LT(b.step_s, 1e-6);
  EXPECT_EQ(b.floor_tokens, StepBudget::kAgedFloor);
  EXPECT_EQ(b.aging_steps, 4 * 3);  // four starved gaps of the nominal depth, max(3, 2)
}

TEST(TimeBudget, AFixedTargetIsSplitOverTheNominalDepthUntilTheRingIsMeasured) {
  TimeBudget t(limits(120, 2, 3));
  warm(t, 2);  // no cycle reported: the depth stays nominal, max(2, 3)
  ASSERT_TRUE(t.cost().ready());
  const StepBudget b = t.step_budget(kDecoding);
  EXPECT_NEAR(b.target_step_s, 0.040, 1e-9);
  EXPECT_NEAR(b.step_s, 0.040, 1e-9);  // aim 1
  EXPECT_EQ(b.floor_tokens, 1);
  EXPECT_NEAR(t.timing().itl_target_ms, 120, 1e-6);
  EXPECT_NEAR(t.timing().step_budget_ms, 40, 1e-6);
}

TEST(TimeBudget, TheMeasuredDepthReplacesTheNominalOne) {
  TimeBudget t(limits(120, 2, 2));
  warm(t, 2, /*depth=*/4);
  EXPECT_NEAR(t.timing().ring_depth, 4, 1e-6);
  EXPECT_NEAR(t.step_budget(kDecoding).step_s, 0.030, 1e-6);  // 120 ms / 4
}

TEST(TimeBudget, TheAimFallsWhileGapsExceedAFixedTargetAndRisesOnlyWithPrefill) {
  TimeBudget t(limits(100));
  warm(t, 2);
  const double full = t.step_budget(kDecoding).step_s;
  for (int i = 0; i < 20; ++i) t.learn_gaps({0.150, 0.150}, true);  // every gap over 100 ms
  const double low = t.timing().aim;
  EXPECT_LT(low, 0.6);
  EXPECT_GT(t.timing().over_target, 0.5);
  EXPECT_NEAR(t.step_budget(kDecoding).step_s, full * low, 1e-12);
  for (int i = 0; i < 200; ++i) t.learn_gaps({0.150}, false);
  EXPECT_DOUBLE_EQ(t.timing().aim, 0.25);  // the floor
  for (int i = 0; i < 400; ++i) t.learn_gaps({0.050, 0.050}, false);  // under, no prefill
  EXPECT_DOUBLE_EQ(t.timing().aim, 0.25) << "decodes alone say nothing of the next chunk";
  EXPECT_LT(t.timing().over_target, 0.03);
  for (int i = 0; i < 40; ++i) t.learn_gaps({0.050}, true);
  EXPECT_NEAR(t.timing().aim, 0.25 * std::pow(1.005, 40), 1e-9);
}

TEST(TimeBudget, AnAutoTargetWatchesTheGapsButAimsAtItself) {
  TimeBudget t(limits(-1));
  warm(t, 2);
  EXPECT_TRUE(t.timing().itl_target_auto);
  const StepBudget b = t.step_budget(kDecoding);
  ASSERT_GT(b.step_s, 0);
  // max(3 x a slot's share of the decodes, 2 rows: 3 x 24 ms; those rows
  // plus an efficient piece, 9 f/p = 90 tokens: 204 ms), over a nominal
  // depth of 2.
  EXPECT_NEAR(b.step_s, kFixed + 92 * kPerToken, 0.1 * (kFixed + 92 * kPerToken));
  EXPECT_NEAR(t.timing().itl_target_ms, 2 * b.step_s * 1e3, 1e-6);
  for (int i = 0; i < 50; ++i) t.learn_gaps({10.0}, true);
  EXPECT_GT(t.timing().over_target, 0.5);
  EXPECT_DOUBLE_EQ(t.timing().aim, 1.0);
  EXPECT_DOUBLE_EQ(t.step_budget(kDecoding).step_s, b.step_s);
}

TEST(TimeBudget, GapsWithoutABudgetMoveNothing) {
  TimeBudget t(limits(0));
  warm(t, 2);
  for (int i = 0; i < 50; ++i) t.learn_gaps({10.0}, true);
  EXPECT_DOUBLE_EQ(t.timing().aim, 1.0);
  EXPECT_DOUBLE_EQ(t.timing().over_target, 0.0);
}

TEST(TimeBudget, APipelinePieceOverlapsTheStagesThatComputeAtOnce) {
  TimeBudget t(limits(0, 2, 2));
  EXPECT_EQ(t.pipeline_piece(1000), 0) << "the cost model cannot tell f from p yet";
  warm(t, 2);
  ASSERT_TRUE(t.cost().ready());
  // sqrt(W f / ((D - 1) p)): 1,000 tokens, f/p = 10: 100 tokens a piece.
  EXPECT_NEAR(double(t.pipeline_piece(1000)), 100, 3);
  EXPECT_EQ(t.pipeline_piece(4), StepBudget::kAgedFloor);  // never under the floor
  EXPECT_EQ(t.pipeline_piece(0), 0);

  SchedLimits shared = limits(0, 2, 2);
  shared.parallel_stages = 1;  // CPU stages taking turns on the same cores
  TimeBudget turns(shared);
  warm(turns, 2);
  EXPECT_EQ(turns.pipeline_piece(1000), 0);
  SchedLimits whole = limits(0, 2, 2);
  whole.policy = Policy::kContinuous;
  TimeBudget cont(whole);
  warm(cont, 2);
  EXPECT_EQ(cont.pipeline_piece(1000), 0);
}

}  // namespace
}  // namespace kvasir
