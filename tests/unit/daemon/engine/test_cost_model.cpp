// The cost model (daemon/engine/cost_model.h) against stages whose times are
// known functions of the batch's shape: it recovers the coefficients, keeps
// up when they change, keeps a term the recent batches do not exercise, and
// stays non-negative.
#include <gtest/gtest.h>

#include <random>

#include "daemon/engine/cost_model.h"

namespace kvasir {
namespace {

struct Truth {
  double fixed, per_token, per_kctx, per_sample;
  double operator()(const BatchShape& b) const {
    return fixed + per_token * double(b.tokens) + per_kctx * double(b.context) / 1024 +
           per_sample * double(b.sampled);
  }
};

// A mix like the ring's: decode-only batches of 1-32 rows at contexts up to
// 2,000, and batches carrying a prefill chunk of 16-512 tokens.
BatchShape random_batch(std::mt19937& rng, bool prefill) {
  BatchShape b;
  const int rows = 1 + int(rng() % 32);
  for (int r = 0; r < rows; ++r) b.add_row(int(rng() % 2000), 1, true, true);
  if (prefill) b.add_row(int(rng() % 1500), 16 + int(rng() % 497), rng() % 4 == 0, false);
  return b;
}

TEST(CostModel, RecoversTheStagesCostsAndTheSlowestSetsTheStep) {
  const Truth head{0.004, 0.0030, 0.0002, 0.0}, tail{0.006, 0.0030, 0.0002, 0.0015};
  CostModel m(2);
  EXPECT_FALSE(m.ready());
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(1.0, 0.03);
  for (int i = 0; i < 400; ++i) {
    const BatchShape b = random_batch(rng, i % 4 == 0);
    m.observe(b, {head(b) * noise(rng), tail(b) * noise(rng)});
  }
  ASSERT_TRUE(m.ready());
  const StageCostFit f = m.fit(1);
  EXPECT_NEAR(f.fixed_s, 0.006, 0.002);
  EXPECT_NEAR(f.per_token_s, 0.0030, 0.0003);
  EXPECT_NEAR(f.per_sample_s, 0.0015, 0.0005);
  for (int i = 0; i < 50; ++i) {
    const BatchShape b = random_batch(rng, i % 2 == 0);
    EXPECT_NEAR(m.predict(0, b), head(b), 0.08 * head(b));
    EXPECT_NEAR(m.predict(1, b), tail(b), 0.08 * tail(b));
    EXPECT_DOUBLE_EQ(m.step(b), std::max(m.predict(0, b), m.predict(1, b)));
  }
}

TEST(CostModel, FollowsALoadChangeAndKeepsWhatIsNotExercised) {
  const Truth quiet{0.005, 0.002, 0.0001, 0.001}, busy{0.010, 0.004, 0.0002, 0.002};
  CostModel m(1);
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    const BatchShape b = random_batch(rng, i % 3 == 0);
    m.observe(b, {quiet(b)});
  }
  // The machine gets twice as slow: within ~150 batches the model says so.
  for (int i = 0; i < 150; ++i) {
    const BatchShape b = random_batch(rng, i % 3 == 0);
    m.observe(b, {busy(b)});
  }
  BatchShape chunk;
  chunk.add_row(0, 256, true, false);
  EXPECT_NEAR(m.predict(0, chunk), busy(chunk), 0.1 * busy(chunk));
  // 500 decode-only batches: the per-token cost of prefill is not forgotten.
  for (int i = 0; i < 500; ++i) {
    const BatchShape b = random_batch(rng, false);
    m.observe(b, {busy(b)});
  }
  EXPECT_NEAR(m.predict(0, chunk), busy(chunk), 0.25 * busy(chunk));
  const StageCostFit f = m.fit(0);
  EXPECT_GE(f.fixed_s, 0);
  EXPECT_GE(f.per_token_s, 0);
  EXPECT_GE(f.per_kctx_s, 0);
  EXPECT_GE(f.per_sample_s, 0);
}

TEST(CostModel, IgnoresMissingTimesAndStaysNonNegative) {
  CostModel m(2);
  BatchShape b;
  b.add_row(0, 10, true, false);
  m.observe(b, {0.0, -1.0});  // nothing measured
  EXPECT_EQ(m.fit(0).samples, 0);
  // Times that fall with work would fit a negative term: it is held at 0.
  for (int i = 1; i <= 20; ++i) {
    BatchShape c;
    c.add_row(0, i, true, false);
    m.observe(c, {0.05 - 0.001 * i, 0.01});
  }
  EXPECT_GE(m.fit(0).per_token_s, 0);
  EXPECT_GE(m.fit(0).fixed_s, 0);
}

TEST(CostModel, TheDecodeFitKnowsWhatADraftAddsToADecodeStep) {
  // A memory-bound stage: a prefill position costs 2 ms, but a decode
  // step's positions share one read of the weights: 8 ms + 0.4 ms each.
  auto busy = [](const BatchShape& b) {
    return b.prefill_tokens() > 0 ? 0.004 + 0.002 * double(b.tokens)
                                  : 0.008 + 0.0004 * double(b.tokens);
  };
  CostModel m(1);
  std::mt19937 rng(5);
  for (int i = 0; i < 7; ++i) {  // decodes of one row and prompts, no draft yet
    BatchShape b;
    b.add_row(300 + i, 1, true, true);
    m.observe(b, {busy(b)});
    BatchShape c;
    c.add_row(0, 64 + 32 * i, true, false);
    m.observe(c, {busy(c)});
  }
  EXPECT_FALSE(m.decode_ready());  // one size seen
  for (int i = 0; i < 60; ++i) {  // rows of up to 4 decodes, up to 3 drafts each
    BatchShape b;
    const int rows = 1 + int(rng() % 4);
    for (int r = 0; r < rows; ++r) {
      b.add_row(200 + int(rng() % 200), 1, true, true);
      b.add_drafts(300, int(rng() % 4));
    }
    m.observe(b, {busy(b)});
    if (i % 4 == 0) {
      BatchShape c;
      c.add_row(0, 128, true, false);
      m.observe(c, {busy(c)});
    }
  }
  ASSERT_TRUE(m.decode_ready());
  BatchShape one, drafted;
  one.add_row(300, 1, true, true);
  drafted = one;
  drafted.add_drafts(301, 3);
  // Three drafts add 1.2 ms to an 8.4 ms step: the decode fit says so
  // within 0.3 ms; the whole fit, bent by the prompts, prices them higher.
  const double d = m.decode_step(drafted) - m.decode_step(one);
  EXPECT_NEAR(d, 0.0012, 0.0003);
  EXPECT_NEAR(m.decode_step(one), 0.0084, 0.0005);
  EXPECT_GT(m.step(drafted) - m.step(one), d);
}

}  // namespace
}  // namespace kvasir
