// The adaptive draft length's two parts alone (daemon/engine/draft_length.h):
// the acceptance estimate with its rest and probe, and the k that
// maximises a batch's expected tokens per unit of step time.
#include <gtest/gtest.h>

#include <vector>

#include "daemon/engine/draft_length.h"

namespace kvasir {
namespace {

// What k drafts add to the step at `per_draft` each, k up to max_k.
std::vector<double> linear(double per_draft, int max_k) {
  std::vector<double> x;
  for (int k = 0; k <= max_k; ++k) x.push_back(per_draft * k);
  return x;
}

TEST(DraftLength, ExpectedAcceptedIsTheGeometricSum) {
  EXPECT_DOUBLE_EQ(expected_accepted(0.5, 0), 0.0);
  EXPECT_DOUBLE_EQ(expected_accepted(0.5, 3), 0.5 + 0.25 + 0.125);
  EXPECT_DOUBLE_EQ(expected_accepted(1.0, 4), 4.0);
}

TEST(DraftLength, ALoneRowDraftsWhereTheGuessesPayForTheirPositions) {
  // One decode, an 11 ms step, 3.5 ms a draft: a draft pays when a > 3.5 / 11.
  const std::vector<double> x = linear(3.5, 4);
  EXPECT_EQ(best_draft_length(0.8, 1, 11, x), 3);  // 1 + 2.95 tokens in 21.5 ms beat 1 + 3.36 in 25
  EXPECT_EQ(best_draft_length(0.6, 1, 11, x), 1);
  EXPECT_EQ(best_draft_length(0.3, 1, 11, x), 0);
  EXPECT_EQ(best_draft_length(1.0, 1, 11, x), 4);  // the bound
  // A step whose fixed part dominates (a GPU's): drafts are nearly free,
  // and even a poor drafter's go, all but those whose odds (a^4 = 0.008
  // at a = 0.3) are below a position's price.
  EXPECT_EQ(best_draft_length(0.5, 1, 11, linear(0.1, 4)), 4);
  EXPECT_EQ(best_draft_length(0.3, 1, 11, linear(0.1, 4)), 3);
}

TEST(DraftLength, AComputeBoundBatchDraftsOnlyOnVeryHighAcceptance) {
  // 16 decodes: a 63.5 ms step; a draft pays only when a > 16 x 3.5 / 63.5.
  const std::vector<double> x = linear(3.5, 4);
  EXPECT_EQ(best_draft_length(0.8, 16, 63.5, x), 0);
  EXPECT_EQ(best_draft_length(0.88, 16, 63.5, x), 0);
  EXPECT_GE(best_draft_length(0.95, 16, 63.5, x), 1);
  EXPECT_EQ(best_draft_length(0.5, 1, 0, x), 0);  // no step known
  EXPECT_EQ(best_draft_length(0.9, 1, 11, {}), 0);
  // Past the step budget (an infinite cost) no draft goes.
  EXPECT_EQ(best_draft_length(1.0, 1, 11, std::vector<double>{0, 1e30}), 0);
}

TEST(DraftLength, TheEstimateFallsWithMissesAndRisesWithHits) {
  DraftEstimate e;
  EXPECT_DOUBLE_EQ(e.acceptance(), DraftEstimate::kSeedA);
  e.observe(3, 0);  // hits 1.2, trials 2.5
  EXPECT_NEAR(e.acceptance(), 0.48, 1e-12);
  e.observe(1, 0);  // hits 0.9, trials 2.875
  EXPECT_NEAR(e.acceptance(), 0.9 / 2.875, 1e-12);
  for (int i = 0; i < 10; ++i) e.observe(4, 4);
  EXPECT_GT(e.acceptance(), 0.95);
  e.observe(0, 0);  // nothing proposed: nothing learned
  EXPECT_GT(e.acceptance(), 0.95);
  // Two of four: the third was judged and rejected, the fourth never seen.
  DraftEstimate f;
  f.observe(4, 2);  // hits 1.2 + 2, trials 1.5 + 3
  EXPECT_NEAR(f.acceptance(), 3.2 / 4.5, 1e-12);
}

TEST(DraftLength, ARestEndsInAProbeAndAHitReseeds) {
  DraftEstimate e;
  for (int i = 0; i < 4; ++i) e.observe(2, 0);
  const double low = e.acceptance();
  e.rest(3);  // this step and two more
  EXPECT_TRUE(e.resting());
  e.rest_step();
  EXPECT_TRUE(e.resting());
  EXPECT_FALSE(e.probing());
  e.rest_step();
  EXPECT_FALSE(e.resting());
  EXPECT_TRUE(e.probing());
  e.observe(1, 0);  // the probe missed: still low, no longer probing
  EXPECT_FALSE(e.probing());
  EXPECT_LT(e.acceptance(), low);
  e.rest(2);
  e.rest_step();
  EXPECT_TRUE(e.probing());
  e.observe(1, 1);  // the probe hit: back to the seed
  EXPECT_FALSE(e.probing());
  EXPECT_DOUBLE_EQ(e.acceptance(), DraftEstimate::kSeedA);
}

}  // namespace
}  // namespace kvasir
