// Tests of the tail's sampler (stages/sampler.h) at the API's largest
// logprobs (kMaxLogprobs alternatives) and with logit_bias: where the
// biases enter (after the raw logprobs and the mask, before the penalties)
// and what the sampler refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "base/check.h"
#include "stages/sampler.h"

namespace kvasir {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams params(float temperature, uint64_t seed = 1234) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.has_seed = 1;
  return p;
}

std::vector<float> random_logits(int vocab, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0, 4);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (float& x : l) x = nd(gen);
  return l;
}

TEST(Sampler, TwentyTopLogprobsSortedAndRaw) {
  const int vocab = 5000;
  const auto l = random_logits(vocab, 11);
  double m = *std::max_element(l.begin(), l.end()), s = 0;
  for (float x : l) s += std::exp(double(x) - m);
  const double lse = m + std::log(s);
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  Sampler smp;
  SamplingParams p = params(0);
  p.logprobs = 20;
  auto w = l;
  const auto r = smp.sample(w.data(), vocab, p, nullptr, 0);
  ASSERT_EQ(kMaxLogprobs, 20);
  ASSERT_EQ(r.n_top, 20);
  for (int j = 0; j < 20; ++j) {
    EXPECT_EQ(r.top[j].first, order[j]) << j;
    EXPECT_NEAR(r.top[j].second, l[order[j]] - lse, 1e-4) << j;
  }
  EXPECT_EQ(r.token, order[0]);
  EXPECT_FLOAT_EQ(r.logprob, r.top[0].second);
}

TEST(Sampler, LogitBiasForcesOrForbidsButLogprobsStayRaw) {
  const int vocab = 3000;
  const auto l = random_logits(vocab, 5);
  const int best = int(std::max_element(l.begin(), l.end()) - l.begin());
  const int worst = int(std::min_element(l.begin(), l.end()) - l.begin());
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  double m = l[size_t(best)], s = 0;
  for (float x : l) s += std::exp(double(x) - m);
  const double lse = m + std::log(s);
  Sampler smp;
  SamplingParams p = params(0);
  p.logprobs = 3;
  // +100 on the least likely token: greedy takes it; its logprob is raw.
  std::vector<LogitBias> force = {{worst, 100.0f}};
  auto w = l;
  auto r = smp.sample(w.data(), vocab, p, nullptr, 0, {}, force);
  EXPECT_EQ(r.token, worst);
  EXPECT_NEAR(r.logprob, l[size_t(worst)] - lse, 1e-4);
  ASSERT_EQ(r.n_top, 3);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(r.top[j].first, order[j]) << "raw alternatives";
  EXPECT_EQ(w[size_t(worst)], l[size_t(worst)]) << "the row's raw logits are restored";
  // -100 on the greedy token: the runner-up.
  std::vector<LogitBias> forbid = {{best, -100.0f}};
  w = l;
  EXPECT_EQ(smp.sample(w.data(), vocab, p, nullptr, 0, {}, forbid).token, order[1]);
  // A draw at temperature 1 takes the forced token at every position.
  for (uint64_t pos = 0; pos < 100; ++pos) {
    w = l;
    EXPECT_EQ(smp.sample(w.data(), vocab, params(1.0f, pos), nullptr, pos, {}, force).token, worst);
  }
  // Without biases the same row gives the greedy token.
  w = l;
  EXPECT_EQ(smp.sample(w.data(), vocab, p, nullptr, 0).token, best);
}

TEST(Sampler, LogitBiasComesBeforeThePenaltiesAndAfterTheMask) {
  // ids 0 and 1 at logits 2 and 1; +2 on id 1 makes it 3; a repetition
  // penalty of 2 on id 1 then halves it to 1.5 < 2: id 0 (vLLM's order).
  // Penalising first would give 1 / 2 + 2 = 2.5 and id 1.
  std::vector<float> l = {2.0f, 1.0f, -1.0f, -1.0f};
  SamplingParams p = params(0);
  p.repetition_penalty = 2.0f;
  SequenceHistory h;
  h.add_output(1);
  std::vector<LogitBias> bias = {{1, 2.0f}};
  Sampler smp;
  auto w = l;
  EXPECT_EQ(smp.sample(w.data(), 4, p, &h, 0, {}, bias).token, 0);
  w = l;
  EXPECT_EQ(smp.sample(w.data(), 4, params(0), nullptr, 0, {}, bias).token, 1);  // bias alone
  // A token the mask refuses stays refused whatever its bias.
  std::vector<float> m70(70, 0.0f);
  std::vector<uint32_t> mask = {0x00000104u, 0x80000000u};  // ids 2, 8, 63
  std::vector<LogitBias> push = {{5, 100.0f}, {63, 50.0f}};
  for (uint64_t pos = 0; pos < 50; ++pos) {
    auto x = m70;
    const auto r = smp.sample(x.data(), 70, params(1.0f, pos), nullptr, pos, mask, push);
    EXPECT_EQ(r.token, 63) << pos;
  }
}

TEST(Sampler, InvalidLogitBiasThrows) {
  std::vector<float> l = {0.0f, 1.0f};
  Sampler smp;
  for (const LogitBias& b : {LogitBias{2, 1.0f}, LogitBias{-1, 1.0f}, LogitBias{0, 100.5f},
                             LogitBias{0, kNaN}, LogitBias{0, -kInf}}) {
    auto w = l;
    std::vector<LogitBias> v = {b};
    EXPECT_THROW(smp.sample(w.data(), 2, params(0), nullptr, 0, {}, v), Error)
        << b.token << " " << b.bias;
  }
  std::vector<LogitBias> many(size_t(kMaxLogitBias) + 1, LogitBias{0, 1.0f});
  auto w = l;
  EXPECT_THROW(smp.sample(w.data(), 2, params(0), nullptr, 0, {}, many), Error);
  EXPECT_TRUE(validate_logit_bias(std::vector<LogitBias>{{1, -100.0f}, {0, 100.0f}}, 2).ok());
  SamplingParams p;
  p.n_logit_bias = kMaxLogitBias + 1;
  const char* field = "";
  EXPECT_FALSE(validate_sampling(p, &field).ok());
  EXPECT_STREQ(field, "logit_bias");
}

}  // namespace
}  // namespace kvasir
