// Speculative decoding at the tail (stages/tail_sampler.h verify, and the
// general rejection rule of stages/spec_accept.h). A drafting row must emit
// exactly the tokens, logprobs and top alternatives that one-token rows
// sampling the same positions would, penalties included, and its rejected
// drafts must never count as output; the general rule must give the target's
// distribution whatever the draft distribution is.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "stages/sampler.h"
#include "stages/spec_accept.h"
#include "stages/tail_sampler.h"

namespace kvasir {
namespace {

constexpr int32_t kVocab = 8;

// The "model": the logits of the token after position p (a function of the
// position alone: the sequences compared share their tokens up to there).
std::vector<float> model(int64_t p) {
  std::vector<float> l(kVocab);
  uint64_t h = 0x9e3779b97f4a7c15ull * uint64_t(p + 1);
  for (int32_t i = 0; i < kVocab; ++i) {
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    l[size_t(i)] = float(h % 1000) / 250.f;
  }
  return l;
}

// A result slot for up to 4 rows and 16 tokens.
struct Slot {
  ipc::ResultHeader hdr;
  std::vector<int32_t> token = std::vector<int32_t>(4, 0);
  std::vector<float> logprob = std::vector<float>(4, 0.f);
  std::vector<int32_t> n_top = std::vector<int32_t>(4, 0);
  std::vector<ipc::TopLogprob> top = std::vector<ipc::TopLogprob>(4 * kMaxLogprobs);
  std::vector<ipc::PromptRecord> prompt = std::vector<ipc::PromptRecord>(16);
  std::vector<ipc::DraftRecord> draft = std::vector<ipc::DraftRecord>(16);
  ipc::ResultView view() {
    return {&hdr, token.data(), logprob.data(), n_top.data(), top.data(), prompt.data(),
            draft.data()};
  }
};

struct Emitted {
  int32_t token;
  float logprob;
  std::vector<int32_t> top;
};

// Runs one row of sequence 1 through `tail` as batch `id`: `tokens` at
// pos0.., the last n_draft drafts; returns what it emitted.
std::vector<Emitted> run(TailSampler& tail, uint64_t id, const SamplingParams& sp, int32_t pos0,
                         std::vector<int32_t> tokens, int32_t n_draft, int32_t n_prompt) {
  ipc::Batch b;
  ipc::DescRow row;
  row.seq_id = 1;
  row.pos0 = pos0;
  row.n_tokens = int32_t(tokens.size());
  row.n_prompt = n_prompt;
  row.sample = 1;
  row.n_draft = uint8_t(n_draft);
  b.rows = {row};
  b.tokens = tokens;
  b.n_tokens = row.n_tokens;
  b.sampling = {sp};
  b.bias.resize(kMaxLogitBias);
  std::vector<float> logits;
  const int32_t own_end = pos0 + row.n_tokens - n_draft;  // t_0's position
  for (int32_t i = 0; i <= n_draft; ++i) {
    const std::vector<float> l = model(own_end - 1 + i);
    logits.insert(logits.end(), l.begin(), l.end());
  }
  Slot slot;
  const int32_t dev_token = -1;
  const float dev_lp = 0;
  tail.sample(b, id, 1, TailSampler::Logits{logits.data(), kVocab, &dev_token, &dev_lp},
              slot.view());
  std::vector<Emitted> out;
  auto tops = [](const ipc::TopLogprob* t, int32_t n) {
    std::vector<int32_t> v;
    for (int32_t i = 0; i < n; ++i) v.push_back(t[i].token);
    return v;
  };
  out.push_back({slot.token[0], slot.logprob[0], tops(slot.top.data(), slot.n_top[0])});
  for (int32_t j = 0; j < n_draft; ++j) {
    const ipc::DraftRecord& d = slot.draft[size_t(row.n_tokens - n_draft + j)];
    if (d.token < 0) break;
    out.push_back({d.token, d.logprob, tops(d.top, d.n_top)});
  }
  return out;
}

SamplingParams params(float temperature) {
  SamplingParams sp;
  sp.temperature = temperature;
  sp.repetition_penalty = 1.3f;
  sp.frequency_penalty = 1.5f;
  sp.seed = 42;
  sp.has_seed = 1;
  sp.logprobs = 3;
  return sp;
}

// The reference: one token per row, as without speculation.
std::vector<Emitted> one_by_one(const SamplingParams& sp, const std::vector<int32_t>& prompt,
                                int n) {
  TailSampler tail;
  std::vector<Emitted> out = run(tail, 1, sp, 0, prompt, 0, int32_t(prompt.size()));
  for (int i = 1; i < n; ++i)
    out.push_back(run(tail, uint64_t(i + 1), sp, int32_t(prompt.size()) + i - 1,
                      {out.back().token}, 0, int32_t(prompt.size()))[0]);
  return out;
}

void expect_same(const std::vector<Emitted>& got, const std::vector<Emitted>& want, size_t from) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LT(from + i, want.size());
    EXPECT_EQ(got[i].token, want[from + i].token) << "token " << from + i;
    EXPECT_FLOAT_EQ(got[i].logprob, want[from + i].logprob) << "token " << from + i;
    EXPECT_EQ(got[i].top, want[from + i].top) << "token " << from + i;
  }
}

void verify_matches_one_by_one(float temperature) {
  const SamplingParams sp = params(temperature);
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<Emitted> ref = one_by_one(sp, prompt, 8);
  TailSampler tail;
  std::vector<Emitted> got = run(tail, 1, sp, 0, prompt, 0, 3);  // t at position 3
  expect_same(got, ref, 0);
  // Position 3 holds ref[0]; drafts: ref[1], ref[2], then a wrong one.
  const int32_t wrong = (ref[3].token + 1) % kVocab;
  got = run(tail, 2, sp, 3, {ref[0].token, ref[1].token, ref[2].token, wrong}, 3, 3);
  ASSERT_EQ(got.size(), 3u);  // two accepted, then the target's own
  expect_same(got, ref, 1);
  // The next row starts at the accepted end; the rejected draft must not
  // have entered the penalties: the rest matches too.
  got = run(tail, 3, sp, 6, {ref[3].token, ref[4].token, ref[5].token}, 2, 3);
  ASSERT_EQ(got.size(), 3u);  // all accepted, then the target's own
  expect_same(got, ref, 4);
  got = run(tail, 4, sp, 9, {ref[6].token}, 0, 3);
  expect_same(got, ref, 7);
}

TEST(TailSpec, GreedyVerificationEmitsWhatOneTokenRowsWould) {
  verify_matches_one_by_one(0.f);
}

TEST(TailSpec, SampledVerificationEmitsWhatOneTokenRowsWould) {
  verify_matches_one_by_one(0.8f);
}

TEST(TailSpec, ARejectedDraftIsNeverCountedAsOutput) {
  // Greedy with a frequency penalty: whichever draft is rejected, the next
  // token is the one-by-one run's. Try every wrong draft at position 4.
  const SamplingParams sp = params(0.f);
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<Emitted> ref = one_by_one(sp, prompt, 4);
  for (int32_t wrong = 0; wrong < kVocab; ++wrong) {
    if (wrong == ref[1].token) continue;
    TailSampler tail;
    run(tail, 1, sp, 0, prompt, 0, 3);
    std::vector<Emitted> got = run(tail, 2, sp, 3, {ref[0].token, wrong, wrong}, 2, 3);
    ASSERT_EQ(got.size(), 1u);
    expect_same(got, ref, 1);
    got = run(tail, 3, sp, 4, {ref[1].token}, 0, 3);
    expect_same(got, ref, 2);
  }
}

// ---- the general rule -------------------------------------------------------

const std::vector<float> kP = {0.5f, 0.3f, 0.2f, 0.0f};  // the target
const std::vector<float> kQ = {0.2f, 0.6f, 0.1f, 0.1f};  // the drafter

TEST(SpecAccept, TheResidualIsTheNormalisedPositivePart) {
  // p - q = (0.3, -0.3, 0.1, -0.1): residual (0.75, 0, 0.25, 0).
  const std::vector<double> r = speculative_residual(kP, kQ);
  EXPECT_NEAR(r[0], 0.75, 1e-6);
  EXPECT_NEAR(r[1], 0.0, 1e-12);
  EXPECT_NEAR(r[2], 0.25, 1e-6);
  EXPECT_NEAR(r[3], 0.0, 1e-12);
  EXPECT_EQ(speculative_accept(kP, kQ, 0, 0.99, 0.5).token, 0);  // p/q > 1: always
  EXPECT_TRUE(speculative_accept(kP, kQ, 1, 0.49, 0.5).accepted);  // p/q = 0.5
  const SpecDecision d = speculative_accept(kP, kQ, 1, 0.51, 0.8);
  EXPECT_FALSE(d.accepted);
  EXPECT_EQ(d.token, 2);  // the residual's inverse CDF at 0.8
  EXPECT_EQ(speculative_accept(kP, kQ, 3, 0.0, 0.1).token, 0);  // p(3) = 0: never kept
}

TEST(SpecAccept, TheOutputDistributionIsExactlyTheTargets) {
  // Every draft x weighted by q(x), u_accept and u_residual over fine
  // grids of midpoints: the rule's distribution, to the grid's resolution.
  constexpr int kGrid = 2000;
  std::vector<double> got(kP.size(), 0.0);
  for (size_t x = 0; x < kQ.size(); ++x)
    for (int a = 0; a < kGrid; ++a)
      for (int b = 0; b < kGrid; b += 50) {
        const SpecDecision d = speculative_accept(kP, kQ, int32_t(x), (a + 0.5) / kGrid,
                                                  (b + 0.5) / kGrid);
        got[size_t(d.token)] += double(kQ[x]) / kGrid / (kGrid / 50);
      }
  for (size_t i = 0; i < kP.size(); ++i) EXPECT_NEAR(got[i], kP[i], 2e-3) << "token " << i;
}

TEST(SpecAccept, ChiSquareOverSeededDraws) {
  // Drafts drawn from q, uniforms from the sampler's counter-based RNG;
  // the tokens' counts against p (df = 2: token 3 has p = 0 and must
  // never come). 13.82 is chi-square's 0.999 quantile at df 2.
  constexpr int kDraws = 200000;
  std::vector<int64_t> n(kP.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    double u = sampler_uniform(7, uint64_t(3 * i)), acc = 0;
    int32_t x = 0;
    for (; x + 1 < int32_t(kQ.size()); ++x)
      if (u < (acc += kQ[size_t(x)])) break;
    n[size_t(speculative_accept(kP, kQ, x, sampler_uniform(7, uint64_t(3 * i + 1)),
                                sampler_uniform(7, uint64_t(3 * i + 2)))
                 .token)]++;
  }
  EXPECT_EQ(n[3], 0);
  double chi2 = 0;
  for (size_t i = 0; i < 3; ++i) {
    const double e = kDraws * double(kP[i]);
    chi2 += (double(n[i]) - e) * (double(n[i]) - e) / e;
  }
  EXPECT_LT(chi2, 13.82);
  // The draft distribution itself is far from p: the test can tell.
  double chi2_q = 0;
  for (size_t i = 0; i < 3; ++i) {
    const double e = kDraws * double(kP[i]), o = kDraws * double(kQ[i]);
    chi2_q += (o - e) * (o - e) / e;
  }
  EXPECT_GT(chi2_q, 1000);
}

}  // namespace
}  // namespace kvasir
