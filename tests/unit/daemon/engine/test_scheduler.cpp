// The scheduler's decisions against a fake model and ring (scheduler_sim.h):
// per-iteration timelines of each policy (which request, which positions,
// in each micro-batch), `static` padding, chunks back to back, balance over
// the ring, preemption under a small pool with the victim's recompute.
// (Abort, failures, stop rules and a lost stage: test_scheduler_lifecycle.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "daemon/engine/descriptor.h"
#include "daemon/engine/scheduler.h"
#include "tests/unit/daemon/engine/scheduler_sim.h"

namespace kvasir::test {
namespace {

// ---- the timeline of each policy ----------------------------------------------
//
// Three requests at once: A (prompt 6, 2 new), B (3, 2), C (5, 1); D (2, 1)
// arrives after the first iteration. Budget 8 tokens, chunks of 4, 4 rows,
// one micro-batch in flight: each iteration forms one batch and completes it.

T timeline(Policy p, bool detailed = false) {
  Sim sim(lim(p), 1000);
  sim.detailed = detailed;
  sim.add(1, 6, 2);
  sim.add(2, 3, 2);
  sim.add(3, 5, 1);
  T t{sim.step()};
  sim.add(4, 2, 1);
  for (auto& s : sim.run()) t.push_back(s);
  return t;
}

TEST(Scheduler, NaiveRunsOneRequestAtATime) {
  EXPECT_EQ(timeline(Policy::kNaive), (T{"1:6", "1:1", "2:3", "2:1", "3:5", "4:2"}));
  EXPECT_EQ(timeline(Policy::kNaive, true), (T{
                                                "A prefill [0,6)",
                                                "A decode 6",
                                                "B prefill [0,3)",
                                                "B decode 3",
                                                "C prefill [0,5)",
                                                "D prefill [0,2)",
                                            }));
}

TEST(Scheduler, StaticWaitsForTheWholeBatch) {
  // A, B, C form the batch, padded to the longest prompt (6): B gets 3
  // filler tokens, C one; the filler goes before each one's prompt, at
  // positions past it. D waits until all three have finished even though
  // the budget has room for it earlier.
  EXPECT_EQ(timeline(Policy::kStatic), (T{"1:6 2:2p", "1:1 2:1p 3:1p", "2:3 3:5", "2:1", "4:2"}));
  EXPECT_EQ(timeline(Policy::kStatic, true), (T{
                                                 "A prefill [0,6) + B pad [3,5)",
                                                 "A decode 6 + B pad [5,6) + C pad [5,6)",
                                                 "B prefill [0,3) + C prefill [0,5)",
                                                 "B decode 3",
                                                 "D prefill [0,2)",
                                             }));
}

TEST(Scheduler, ContinuousAdmitsEveryIterationWithWholePrefills) {
  // D joins at the second iteration; C's whole prompt (5) waits for room.
  EXPECT_EQ(timeline(Policy::kContinuous), (T{"1:6", "1:1 2:3 4:2", "2:1 3:5"}));
  EXPECT_EQ(timeline(Policy::kContinuous, true),
            (T{
                "A prefill [0,6)",
                "A decode 6 + B prefill [0,3) + D prefill [0,2)",
                "B decode 3 + C prefill [0,5)",
            }));
}

TEST(Scheduler, ChunkedPutsDecodesFirstAndFillsTheBudgetWithChunks) {
  EXPECT_EQ(timeline(Policy::kChunked), (T{"1:4 2:3 3:1", "2:1 1:2 3:4 4:1", "1:1 4:1"}));
  EXPECT_EQ(timeline(Policy::kChunked, true),
            (T{
                "A prefill [0,4) + B prefill [0,3) + C prefill [0,1)",
                "B decode 3 + A prefill [4,6) + C prefill [1,5) + D prefill [0,1)",
                "A decode 6 + D prefill [1,2)",
            }));
}

TEST(Scheduler, ChunkedPrefillOfALongPromptBesideDecodes) {
  // A (prompt 20) arrives while B decodes: every iteration carries B's
  // decode first, then as much of A's prompt as the budget (8) and the
  // chunk size (4) leave; the chunk that reaches A's last prompt token
  // samples its first token.
  Sim sim(lim(Policy::kChunked), 1000);
  sim.detailed = true;
  sim.add(2, 2, 6);
  EXPECT_EQ(sim.step(), "B prefill [0,2)");
  sim.add(1, 20, 1);
  EXPECT_EQ(sim.run(), (T{
                           "B decode 2 + A prefill [0,4)",
                           "B decode 3 + A prefill [4,8)",
                           "B decode 4 + A prefill [8,12)",
                           "B decode 5 + A prefill [12,16)",
                           "B decode 6 + A prefill [16,20)",
                       }));
  EXPECT_EQ(sim.finish[1], FinishReason::kLength);
  EXPECT_EQ(sim.out[1].size(), 1u);
  EXPECT_EQ(sim.out[2].size(), 6u);
}

TEST(Scheduler, StaticPaysForItsPadding) {
  // Prompts of 1, 7, 3 and 12 tokens, 2 new tokens each, one batch: each
  // member's prefill costs the longest prompt (4 x 12 = 48 tokens), then
  // 4 rows decode once (the first token comes from the prefill). Outputs
  // are those of the requests run one at a time: the filler is never read.
  SchedLimits l{8, 16, 16, 256};
  l.policy = Policy::kStatic;
  Sim st(l, 1000), one(lim(Policy::kNaive), 1000);
  for (Sim* s : {&st, &one}) {
    s->add(1, 1, 2);
    s->add(2, 7, 2);
    s->add(3, 3, 2);
    s->add(4, 12, 2);
    s->run();
    ASSERT_TRUE(s->idle());
  }
  EXPECT_EQ(st.computed, 4 * 12 + 4);
  EXPECT_EQ(one.computed, 1 + 7 + 3 + 12 + 4);
  EXPECT_EQ(outputs(st), outputs(one));
  EXPECT_EQ(st.sch.stats().blocks_free, st.sch.stats().blocks_total);
}

// The stages know nothing of `static`: its filler reaches them as rows of a
// filler sequence (its own id, no sampling state, never sampled), which the
// tail keeps no record of (tests/unit/stages/test_tail_sequences.cpp).
TEST(Scheduler, StaticPaddingTravelsAsAFillerSequence) {
  SchedLimits l{8, 16, 16, 256};
  l.policy = Policy::kStatic;
  Sim st(l, 1000);
  st.params.presence_penalty = 0.5f;
  st.add(1, 2, 2);
  st.add(2, 7, 2);
  st.fill();
  ASSERT_FALSE(st.ring.empty());
  ipc::Batch b;
  encode_batch(st.ring.front(), 1, 16, b);
  int fillers = 0;
  for (size_t r = 0; r < b.rows.size(); ++r) {
    const ScheduledRow& row = st.ring.front().rows[r];
    EXPECT_EQ(b.rows[r].seq_id, row.pad ? filler_key(row.id, row.index) : row.id);
    EXPECT_EQ(b.sampling[r].presence_penalty, row.pad ? 0.f : 0.5f);
    EXPECT_TRUE(!row.pad || !b.rows[r].sample);
    fillers += row.pad;
  }
  EXPECT_GT(fillers, 0);
  EXPECT_NE(filler_key(1, 0), sequence_key(1, 0));
}

TEST(Scheduler, StaticAdmitsOnlyWhatItsPaddedBatchCanHold) {
  // Blocks of 4, 8 in the pool: prompts 12, 1, 1 padded to 12 need 3 blocks
  // each; two fit (6), the third waits for the next batch.
  SchedLimits l{8, 16, 16, 256};
  l.policy = Policy::kStatic;
  Sim sim(l, 8);
  sim.add(1, 12, 1);
  sim.add(2, 1, 1);
  sim.add(3, 1, 1);
  EXPECT_EQ(sim.step(), "1:12 2:4p");
  EXPECT_EQ(sim.step(), "2:7p");
  EXPECT_EQ(sim.step(), "2:1");
  EXPECT_EQ(sim.step(), "3:1");
  EXPECT_TRUE(sim.idle());
  EXPECT_EQ(sim.sch.stats().blocks_free, sim.sch.stats().blocks_total);
}

// ---- the ring: chunks back to back, balance --------------------------------------

TEST(Scheduler, LongPromptChunksFollowEachOtherThroughTheRing) {
  Sim sim(lim(Policy::kChunked, 3), 1000);
  sim.add(1, 10, 1);
  // Three chunks in flight at once, back to back (the 10 tokens spread over
  // the three free slots); only the last samples.
  EXPECT_EQ(sim.fill(), "1:4 | 1:3 | 1:3");
  EXPECT_FALSE(sim.ring[0].rows[0].sample);
  EXPECT_FALSE(sim.ring[1].rows[0].sample);
  EXPECT_TRUE(sim.ring[2].rows[0].sample);
}

TEST(Scheduler, DecodeNeverInTwoBatches) {
  Sim sim(lim(Policy::kChunked, 2), 1000);
  sim.add(1, 3, 3);
  // Its prefill (split over the two free slots) samples: nothing more of it
  // may go until that comes back, though a slot is free.
  EXPECT_EQ(sim.step(), "1:2 | 1:1");  // then the first completes
  EXPECT_EQ(sim.step(), "");           // the second completes: a token
  EXPECT_EQ(sim.step(), "1:1");
  EXPECT_EQ(sim.step(), "1:1");
}

TEST(Scheduler, BurstIsSpreadOverTheRing) {
  // Four arrivals, two micro-batches in flight: two rows each, not four in
  // the first and none in the second.
  Sim sim(lim(Policy::kChunked, 2), 1000);
  for (int i = 1; i <= 4; ++i) sim.add(RequestId(i), 2, 2);
  EXPECT_EQ(sim.step(), "1:2 2:2 | 3:2 4:2");
}

// Tokens per micro-batch in a step's " | "-separated batches.
std::vector<int> batch_tokens(const std::string& step) {
  std::vector<int> v{0};
  for (size_t i = 0; i < step.size(); ++i) {
    if (step[i] == '|') v.push_back(0);
    if (step[i] == ':') v.back() += std::stoi(step.substr(i + 1));
  }
  return v;
}

TEST(Scheduler, BurstIsBalancedByTokensNotOnlyRows) {
  // One long prompt (12) and three short ones (2) at once, two micro-batches
  // in flight, budget 16, chunks of 8. A row cap alone gave "1:8 2:2"
  // (10 tokens) then "1:4 3:2" (6, and 4 left out); split by tokens, the 18
  // tokens at hand go 9 and 9 (2's last prompt token goes first in the
  // second batch, with the decodes), and the second batch carries the rest.
  SchedLimits l{8, 16, 8, 256};
  l.policy = Policy::kChunked;
  l.inflight = 2;
  Sim sim(l, 1000);
  sim.add(1, 12, 2);
  for (int i = 2; i <= 4; ++i) sim.add(RequestId(i), 2, 2);
  const std::string first = sim.step();
  EXPECT_EQ(first, "1:8 2:1 | 2:1 1:4 3:2 4:2");
  // The whole timeline: every step whose batches were formed together (more
  // than one free slot) differs by at most one token between batches.
  T t{first};
  for (auto& s : sim.run()) t.push_back(s);
  for (auto& s : t) {
    auto v = batch_tokens(s);
    if (v.size() > 1) {
      EXPECT_LE(*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end()), 1)
          << s;
    }
  }
  EXPECT_TRUE(sim.idle());
}

TEST(Scheduler, StaggeredBurstEvensOutInsteadOfRepeating) {
  // Two arrivals, then fourteen while those two are in the ring. The
  // latecomers are ready when only one slot is free: split over the free
  // slots alone, that batch took all fifteen ready rows and every decode
  // went back into the batch it came from, 15 | 1 for good (bench/serve's
  // 16 concurrent requests ran at 0.64x). Shared over the whole ring it is
  // 8 | 8 from the second step on.
  SchedLimits l{32, 512, 512, 256};
  l.policy = Policy::kChunked;
  l.inflight = 2;
  Sim sim(l, 10000);
  sim.add(1, 1, 30);
  sim.add(2, 1, 30);
  EXPECT_EQ(sim.step(), "1:1 | 2:1");
  for (int i = 3; i <= 16; ++i) sim.add(RequestId(i), 1, 30);
  for (int i = 0; i < 20; ++i) {
    const std::string s = sim.step();
    if (i == 0) continue;  // the batch formed beside the first's leftover
    EXPECT_EQ(batch_tokens(s), std::vector<int>{8}) << "step " << i << ": " << s;
  }
}

TEST(Scheduler, AdmittedSequencesHoldNoBlocksUntilScheduled) {
  // Both prompts are admitted at once, but the budget (8) carries only the
  // first one's chunk. The second is promised its blocks, not given them:
  // held from admission they sat unwritten (KV waste) until its turn.
  SchedLimits l{8, 8, 8, 256};
  l.policy = Policy::kChunked;
  l.inflight = 1;
  Sim sim(l, 1000);
  sim.add(1, 24, 1);
  sim.add(2, 24, 1);
  EXPECT_EQ(sim.fill(), "1:8");
  const SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.running, 2);                         // both admitted
  EXPECT_EQ(sim.ring[0].rows[0].table.size(), 2u);  // 8 positions, blocks of 4
  EXPECT_EQ(st.blocks_total - st.blocks_free, 2);   // and no block for the second
  sim.run();
  EXPECT_TRUE(sim.idle());
  EXPECT_EQ(sim.sch.stats().blocks_free, sim.sch.stats().blocks_total);
}

TEST(Scheduler, BalancedBudgetNeverStarvesAWholePrefill) {
  // Whole prefills cannot be cut: a lone 7-token prompt with three free
  // slots still goes in one piece (the share, 3, is below it). Under
  // `static` the second is padded to 7 first (5 filler tokens).
  for (Policy p : {Policy::kStatic, Policy::kContinuous}) {
    SchedLimits l{8, 16, 8, 256};
    l.policy = p;
    l.inflight = 3;
    Sim sim(l, 1000);
    sim.add(1, 7, 2);
    sim.add(2, 2, 1);
    EXPECT_EQ(sim.step(), p == Policy::kStatic ? "1:7 | 2:4p | 2:1p" : "1:7 | 2:2")
        << policy_name(p);
    sim.run();
    EXPECT_TRUE(sim.idle());
  }
}

// ---- preemption ---------------------------------------------------------------

TEST(Scheduler, PreemptionRecomputesTheVictimFromItsPromptAndTokens) {
  // Blocks of 4, 5 in the pool, chunked, one batch in flight. A and B
  // (prompts of 6, 4 new tokens each) are admitted together and hold 2
  // blocks each after their prefill; their decodes at 6 and 7 fit. At 8
  // each needs a third block and one is free: A (first in the batch) takes
  // it; B finds none, and the newest running sequence with nothing in flight
  // and not already in this batch is B itself: B is preempted (blocks back,
  // to the head of the queue) and A goes on alone. Once A is done B is
  // recomputed from its prompt plus the tokens it had generated: [0,8) is
  // its 6 prompt tokens and 2 of its 3 generated ones, and the third, at 8,
  // is decoded as before and samples its fourth.
  Sim small(lim(Policy::kChunked), 5), big(lim(Policy::kChunked), 1000);
  for (Sim* s : {&small, &big}) {
    s->detailed = true;
    s->add(1, 6, 4);
    s->add(2, 6, 4);
  }
  EXPECT_EQ(small.run(), (T{
                             "A prefill [0,4) + B prefill [0,4)",
                             "A prefill [4,6) + B prefill [4,6)",
                             "A decode 6 + B decode 6",
                             "A decode 7 + B decode 7",
                             "A decode 8",
                             "B recompute [0,4)",
                             "B recompute [4,8)",
                             "B decode 8",
                         }));
  big.run();
  EXPECT_EQ(small.sch.stats().preemptions, 1);
  EXPECT_EQ(small.sch.stats().requeued, 0);
  EXPECT_EQ(big.sch.stats().preemptions, 0);
  EXPECT_EQ(outputs(small), outputs(big));  // the recompute changed nothing
  EXPECT_EQ(small.sch.stats().blocks_free, 5);
}

TEST(Scheduler, PreemptionKeepsOutputsAndFreesEverything) {
  for (Policy p : {Policy::kStatic, Policy::kContinuous, Policy::kChunked}) {
    for (int inflight : {1, 2}) {
      // 3 sequences of up to 4 + 8 = 12 positions (3 blocks of 4) in 6 blocks.
      Sim small(lim(p, inflight), 6), big(lim(p, inflight), 1000);
      for (Sim* s : {&small, &big})
        for (int i = 1; i <= 3; ++i) s->add(RequestId(i), 4, 8);
      small.run();
      big.run();
      ASSERT_TRUE(small.idle()) << policy_name(p);
      EXPECT_GT(small.sch.stats().preemptions, 0) << policy_name(p);
      EXPECT_EQ(big.sch.stats().preemptions, 0);
      EXPECT_EQ(outputs(small), outputs(big)) << policy_name(p);
      EXPECT_EQ(small.sch.stats().blocks_free, small.sch.stats().blocks_total);
    }
  }
}

TEST(Scheduler, PreemptionKeepsPenalisedOutputs) {
  // As above, with presence / frequency / repetition penalties: the tail's
  // history of a recomputed sequence must count its generated tokens as
  // output again, or the penalties (and so the tokens) change.
  SamplingParams pen;
  pen.temperature = 0;
  pen.presence_penalty = 0.8f;
  pen.frequency_penalty = 0.5f;
  pen.repetition_penalty = 1.2f;
  for (Policy p : {Policy::kStatic, Policy::kContinuous, Policy::kChunked}) {
    for (int inflight : {1, 2}) {
      Sim small(lim(p, inflight), 6), big(lim(p, inflight), 1000), plain(lim(p, inflight), 1000);
      for (Sim* s : {&small, &big, &plain}) {
        s->penalize = true;
        s->params = pen;
        if (s == &plain) {
          s->params = SamplingParams{};
          s->params.temperature = 0;
        }
        for (int i = 1; i <= 3; ++i) s->add(RequestId(i), 4, 8);
      }
      small.run();
      big.run();
      plain.run();
      ASSERT_TRUE(small.idle()) << policy_name(p);
      EXPECT_GT(small.sch.stats().preemptions, 0) << policy_name(p);
      EXPECT_EQ(outputs(small), outputs(big)) << policy_name(p) << " inflight " << inflight;
      // The penalties matter here (else the comparison proves nothing).
      EXPECT_NE(outputs(big), outputs(plain)) << policy_name(p);
    }
  }
}

TEST(Scheduler, RandomWorkloadsNeverLeakOrChangeOutputs) {
  std::mt19937 rng(7);
  int64_t preempted = 0;
  for (int round = 0; round < 40; ++round) {
    const Policy p = Policy(rng() % 4);
    const int inflight = 1 + int(rng() % 3);
    const int n_blocks = 8 + int(rng() % 24);
    Sim small(lim(p, inflight), n_blocks), big(lim(p, inflight), 100000);
    const int n = 1 + int(rng() % 8);
    for (int i = 1; i <= n; ++i) {
      int prompt = 1 + int(rng() % 20), gen = 1 + int(rng() % 12);
      while (BlockManager::blocks_for(prompt + gen, 4) > n_blocks)
        --gen, prompt = std::max(1, prompt - 1);
      for (Sim* s : {&small, &big}) s->add(RequestId(i), prompt, std::max(gen, 1));
    }
    small.run();
    big.run();
    ASSERT_TRUE(small.idle()) << policy_name(p) << " round " << round;
    EXPECT_EQ(outputs(small), outputs(big)) << policy_name(p) << " round " << round;
    EXPECT_EQ(small.sch.stats().blocks_free, small.sch.stats().blocks_total);
    preempted += small.sch.stats().preemptions;
  }
  EXPECT_GT(preempted, 0);
}

TEST(Scheduler, PolicyNames) {
  for (Policy p : {Policy::kNaive, Policy::kStatic, Policy::kContinuous, Policy::kChunked})
    EXPECT_EQ(parse_policy(policy_name(p)), p);
  EXPECT_FALSE(parse_policy("lottery"));
  EXPECT_EQ(std::string(policy_name(Policy::kChunked)), "continuous+chunked");
}

}  // namespace
}  // namespace kvasir::test
