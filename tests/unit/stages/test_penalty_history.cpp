// The tail's penalty histories (stages/sampler.h, PenaltyHistories): built
// by position, so a sequence recomputed after preemption (every position
// resent from 0, its generated tokens included) has the counts it had
// before, and penalised sampling continues exactly as without preemption.
// (The scheduler side: tests/unit/daemon/engine/test_scheduler.cpp,
// PreemptionKeepsPenalisedOutputs.)
#include <gtest/gtest.h>

#include <vector>

#include "stages/sampler.h"

namespace kvasir {
namespace {

using Row = PenaltyHistories::Row;

Row row(int64_t pos0, const std::vector<int32_t>& toks, int32_t n_prompt, bool pad = false) {
  return Row{pos0, int32_t(toks.size()), n_prompt, toks.data(), pad};
}

// Every count of `a` equals that of `b`, for tokens [0, 64).
void expect_same(const SequenceHistory& a, const SequenceHistory& b) {
  EXPECT_EQ(a.n_prompt(), b.n_prompt());
  EXPECT_EQ(a.n_output(), b.n_output());
  for (int32_t t = 0; t < 64; ++t) {
    EXPECT_EQ(a.prompt_count(t), b.prompt_count(t)) << "token " << t;
    EXPECT_EQ(a.output_count(t), b.output_count(t)) << "token " << t;
  }
}

TEST(PenaltyHistories, CountsPromptAndOutputByPosition) {
  PenaltyHistories h;
  // Prompt 5 6 5 in two chunks, then decodes carrying 7 and 5 (each row's
  // input is the token sampled at the previous position).
  std::vector<int32_t> c1{5, 6}, c2{5}, d1{7}, d2{5};
  h.feed(1, row(0, c1, 3), 1);
  const SequenceHistory* s = h.feed(1, row(2, c2, 3), 2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->prompt_count(5), 2);
  EXPECT_EQ(s->n_output(), 0);
  h.feed(1, row(3, d1, 3), 3);
  s = h.feed(1, row(4, d2, 3), 4);
  EXPECT_EQ(s->prompt_count(5), 2);
  EXPECT_EQ(s->output_count(5), 1);
  EXPECT_EQ(s->output_count(7), 1);
  EXPECT_EQ(s->prompt_count(7), 0);  // a generated token is never counted as prompt
  EXPECT_EQ(s->n_prompt(), 3);
  EXPECT_EQ(s->n_output(), 2);
}

TEST(PenaltyHistories, RecomputeAfterPreemptionRebuildsTheSameCounts) {
  std::vector<int32_t> prompt{5, 6, 5}, gen{7, 5, 7};
  PenaltyHistories a, b, fresh;
  // a: the plain run. b: the same, then preempted after the third decode and
  // recomputed from position 0 in two chunks. fresh: a tail that never saw
  // the sequence before the recompute (a restarted stage).
  for (PenaltyHistories* h : {&a, &b}) {
    h->feed(9, row(0, prompt, 3), 1);
    for (size_t i = 0; i < gen.size(); ++i) h->feed(9, row(3 + int64_t(i), {gen[i]}, 3), 2 + i);
  }
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), gen.begin(), gen.end());
  std::vector<int32_t> first(all.begin(), all.begin() + 4), rest(all.begin() + 4, all.end());
  for (PenaltyHistories* h : {&b, &fresh}) {
    ASSERT_NE(h->feed(9, row(0, first, 3), 10), nullptr);
    const SequenceHistory* s = h->feed(9, row(4, rest, 3), 11);
    ASSERT_NE(s, nullptr);
    expect_same(*s, *a.feed(9, Row{6, 0, 3, nullptr, false}, 12));
  }
}

TEST(PenaltyHistories, PaddingIsNotPartOfTheSequence) {
  PenaltyHistories padded, plain;
  std::vector<int32_t> prompt{1, 2}, filler(5, 2);
  // `static` padding: filler at positions 2..6 before the prompt's prefill.
  padded.feed(3, row(2, filler, 2, /*pad=*/true), 1);
  const SequenceHistory* s = padded.feed(3, row(0, prompt, 2), 2);
  ASSERT_NE(s, nullptr);
  expect_same(*s, *plain.feed(3, row(0, prompt, 2), 1));
  EXPECT_EQ(s->n_prompt(), 2);
}

TEST(PenaltyHistories, AHoleIsReportedNotGuessed) {
  PenaltyHistories h;
  std::vector<int32_t> t{4};
  EXPECT_EQ(h.feed(1, row(5, t, 2), 1), nullptr);  // positions 0..4 never seen
  h.feed(2, row(0, t, 1), 1);
  h.evict_older_than(10, 4);  // both unseen for more than 4 batches
  EXPECT_EQ(h.size(), 0u);
  EXPECT_EQ(h.feed(2, row(1, t, 1), 11), nullptr);
}

// Penalised greedy decoding over a toy model whose logits favour repeating
// the last token: with presence and frequency penalties the output moves
// on once a token has been used. Generates `n` tokens; `preempt_at` >= 0
// recomputes the whole sequence (prompt + generated, from position 0) before
// that step, as the scheduler does after a preemption.
std::vector<int32_t> generate(int n, int preempt_at, bool old_tail = false) {
  constexpr int32_t kVocab = 6;
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 0.7f;
  p.frequency_penalty = 0.6f;
  p.repetition_penalty = 1.1f;
  std::vector<int32_t> seq{2, 3, 2};
  const int32_t n_prompt = 3;
  PenaltyHistories hist;
  Sampler sampler;
  const SequenceHistory* h = hist.feed(1, row(0, seq, n_prompt), 1);
  for (int i = 0; i < n; ++i) {
    if (i > 0) {
      std::vector<int32_t> in{seq.back()};
      if (i == preempt_at) {
        // Recompute: every position again. The old tail counted all of it as
        // prompt (its boundary was "what this row resends from 0").
        h = hist.feed(1, row(0, seq, old_tail ? int32_t(seq.size()) : n_prompt), 100 + i);
      } else {
        h = hist.feed(1, row(int64_t(seq.size()) - 1, in, n_prompt), 100 + i);
      }
    }
    EXPECT_NE(h, nullptr);
    std::vector<float> logits(kVocab);
    for (int32_t v = 0; v < kVocab; ++v)
      logits[size_t(v)] = (v == seq.back() ? 3.0f : 0.0f) + 0.25f * float((v * 7 + i) % 5);
    seq.push_back(sampler.sample(logits.data(), kVocab, p, h, seq.size()).token);
  }
  return std::vector<int32_t>(seq.begin() + n_prompt, seq.end());
}

TEST(PenaltyHistories, PenalisedOutputUnchangedByPreemption) {
  const auto want = generate(12, -1);
  for (int at = 1; at < 12; ++at) EXPECT_EQ(generate(12, at), want) << "preempted at " << at;
  // The test can fail: had the recompute counted the generated tokens as
  // prompt (the tail before this change), the output would have moved.
  int differ = 0;
  for (int at = 1; at < 12; ++at) differ += generate(12, at, /*old_tail=*/true) != want;
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace kvasir
