// The tail's prompt logprobs (stages/tail_prompt.h): each asking row's
// positions scored against the next prompt token (the row's next token,
// or next_token across a chunk's end), by the raw log-softmax, with vLLM's
// rank and the top k; positions past the prompt and rows that do not ask
// left alone; and the sampled rows' last logits packed for the sampler.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "stages/tail_prompt.h"

namespace kvasir {
namespace {

constexpr int32_t kVocab = 5;

ipc::DescRow row(int32_t pos0, int32_t n, int32_t n_prompt, int k, int32_t next, bool sample) {
  ipc::DescRow r;
  r.pos0 = pos0;
  r.n_tokens = n;
  r.n_prompt = n_prompt;
  r.prompt_logprobs = uint8_t(k < 0 ? 0 : k + 1);
  r.next_token = next;
  r.sample = sample ? 1 : 0;
  return r;
}

// Logits of token index t: token id i gets i * (t + 1) (so id 4 leads).
std::vector<float> ramp(int64_t n_tokens) {
  std::vector<float> l(size_t(n_tokens * kVocab));
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int32_t i = 0; i < kVocab; ++i) l[size_t(t * kVocab + i)] = float(i * (t + 1));
  return l;
}

double log_softmax(const float* x, int32_t id) {
  double s = 0;
  for (int32_t i = 0; i < kVocab; ++i) s += std::exp(double(x[i]));
  return double(x[id]) - std::log(s);
}

TEST(TailPrompt, ScoresEachPromptPositionAcrossTheChunkEnd) {
  ipc::Batch b;
  // Row 0: a decode that does not ask. Row 1: prompt positions 4..6 of a
  // 9-token prompt, asking for 2 alternatives; the prompt goes on with id 1.
  b.rows = {row(10, 1, 3, -1, -1, true), row(4, 3, 9, 2, 1, false)};
  b.tokens = {0, 3, 2, 4};
  b.n_tokens = 4;
  ASSERT_TRUE(wants_prompt_logprobs(b, 2));
  const std::vector<float> logits = ramp(4);
  std::vector<ipc::PromptRecord> out(4);
  out[0].position = 77;  // a row that does not ask: untouched
  score_prompt(b, 2, logits.data(), kVocab, out.data());
  EXPECT_EQ(out[0].position, 77);
  const int32_t next[] = {2, 4, 1};  // tokens after t = 1, 2; then next_token
  for (int i = 0; i < 3; ++i) {
    const ipc::PromptRecord& r = out[size_t(1 + i)];
    const float* x = logits.data() + (1 + i) * kVocab;
    EXPECT_EQ(r.position, 5 + i);
    EXPECT_EQ(r.token, next[i]);
    EXPECT_NEAR(r.logprob, log_softmax(x, next[i]), 1e-5);
    EXPECT_EQ(r.rank, kVocab - next[i]);  // ids above it are more likely
    ASSERT_EQ(r.n_top, 2);
    EXPECT_EQ(r.top[0].token, 4);
    EXPECT_EQ(r.top[1].token, 3);
    EXPECT_NEAR(r.top[0].logprob, log_softmax(x, 4), 1e-5);
  }
}

TEST(TailPrompt, StopsAtThePromptsEndAndTiesRankAlike) {
  ipc::Batch b;
  // Positions 0..2 of a 2-token prompt: position 0 scores token 1 (the
  // prompt's last); positions 1 and 2 predict generated tokens: no record.
  b.rows = {row(0, 3, 2, 0, -1, true)};
  b.tokens = {1, 2, 3};
  b.n_tokens = 3;
  std::vector<float> logits(size_t(3 * kVocab), 0.f);  // all tied
  std::vector<ipc::PromptRecord> out(3);
  score_prompt(b, 1, logits.data(), kVocab, out.data());
  EXPECT_EQ(out[0].position, 1);
  EXPECT_EQ(out[0].token, 2);
  EXPECT_EQ(out[0].rank, kVocab);  // as vLLM counts: every token at least as likely
  EXPECT_EQ(out[0].n_top, 0);
  EXPECT_NEAR(out[0].logprob, -std::log(double(kVocab)), 1e-6);
  EXPECT_EQ(out[1].position, -1);
  EXPECT_EQ(out[2].position, -1);
}

TEST(TailPrompt, PacksTheSampledRowsLastLogits) {
  ipc::Batch b;
  b.rows = {row(0, 3, 3, 0, -1, true), row(0, 2, 9, 0, 5, false), row(7, 1, 2, -1, -1, true),
            row(0, 2, 2, -1, -1, true)};
  b.n_tokens = 8;
  std::vector<float> logits = ramp(8);
  const std::vector<float> all = logits;
  pack_sampled_logits(b, 4, logits.data(), kVocab);
  const int64_t last[] = {2, 5, 7};  // the sampled rows' last token indices
  for (int k = 0; k < 3; ++k)
    for (int32_t i = 0; i < kVocab; ++i)
      EXPECT_EQ(logits[size_t(k * kVocab + i)], all[size_t(last[k] * kVocab + i)]) << k;
  b.rows[1].prompt_logprobs = 0;
  EXPECT_TRUE(wants_prompt_logprobs(b, 4));
  b.rows[0].prompt_logprobs = 0;
  EXPECT_FALSE(wants_prompt_logprobs(b, 4));
}

}  // namespace
}  // namespace kvasir
