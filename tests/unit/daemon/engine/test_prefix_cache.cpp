// Prefix caching and parallel sampling in the scheduler, against the fake
// paged-KV model and ring (scheduler_sim.h). With caching the fake model's
// cells hold a hash of the token prefix they belong to, and every row
// reads back [0, end) through its own table: a hit on the wrong block, on
// a block never written, or on one a failed batch left unwritten, shows up
// as a failed read or a changed output. Timelines name a hit as "B cached
// [0,8) prefill [8,11)". (The block pool's own rules: test_block_manager.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "base/check.h"
#include "daemon/engine/scheduler.h"
#include "tests/unit/daemon/engine/scheduler_sim.h"

namespace kvasir::test {
namespace {

// 8 rows, a budget of 16 tokens, chunks of 8; blocks of 4 tokens.
SchedLimits clim(Policy p, bool caching = true, int32_t inflight = 1) {
  SchedLimits l{8, 16, 8, 256};
  l.policy = p;
  l.inflight = inflight;
  l.prefix_caching = caching;
  return l;
}

std::vector<int32_t> seq(int n, int32_t base) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i);
  return t;
}
std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
GenRequest req(std::vector<int32_t> prompt, int max_new, int n = 1, std::string salt = {}) {
  GenRequest g;
  g.prompt = std::move(prompt);
  g.max_tokens = max_new;
  g.n = n;
  g.cache_salt = std::move(salt);
  return g;
}

// A (10 tokens) runs first; then, at once: B shares A's first 8 (two
// whole blocks), C its first 6 (ending inside a block), D all 10, E the
// first 8 and nothing else (block-aligned: its last token is computed, so
// it reuses one block, not two).
void add_family(Sim& sim, const std::vector<int32_t>& a) {
  sim.add(2, req(cat(std::vector<int32_t>(a.begin(), a.begin() + 8), seq(3, 200)), 2));
  sim.add(3, req(cat(std::vector<int32_t>(a.begin(), a.begin() + 6), seq(6, 300)), 2));
  sim.add(4, req(a, 2));
  sim.add(5, req(std::vector<int32_t>(a.begin(), a.begin() + 8), 2));
}

TEST(PrefixCache, TimelineReusesWholeBlocksOnly) {
  const std::vector<int32_t> a = seq(10, 100);
  Sim sim(clim(Policy::kChunked), 1000);
  sim.detailed = true;
  sim.add(1, req(a, 3));
  T t{sim.step(), sim.step()};
  add_family(sim, a);
  for (auto& s : sim.run()) t.push_back(s);
  EXPECT_EQ(t, (T{
                   "A prefill [0,8)",
                   "A prefill [8,10)",
                   "A decode 10 + B cached [0,8) prefill [8,11) + "
                   "C cached [0,4) prefill [4,12) + D cached [0,8) prefill [8,10) + "
                   "E cached [0,4) prefill [4,6)",
                   "A decode 11 + B decode 11 + C decode 12 + D decode 10 + E prefill [6,8)",
                   "E decode 8",
               }));
  EXPECT_EQ(sim.cached[2], 8);
  EXPECT_EQ(sim.cached[3], 4);
  EXPECT_EQ(sim.cached[4], 8);
  EXPECT_EQ(sim.cached[5], 4);
  // The same outputs as without caching, token for token.
  Sim off(clim(Policy::kChunked, false), 1000);
  off.add(1, req(a, 3));
  off.step();
  off.step();
  add_family(off, a);
  off.run();
  EXPECT_EQ(outputs(sim), outputs(off));
  const SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.prefix_hits, 8 + 4 + 8 + 4);
  EXPECT_EQ(st.prefix_queries, 10 + 11 + 12 + 10 + 8);
  EXPECT_EQ(st.blocks_free, st.blocks_total);
  EXPECT_GT(st.blocks_cached, 0);
  EXPECT_EQ(st.blocks_evictable, st.blocks_cached);
}

TEST(PrefixCache, AHitMayEndInsideWhatWouldHaveBeenAChunk) {
  // B shares A's first 12 tokens (three blocks) of a 20-token prompt.
  // Without caching B's prefill is chunks [0,8) [8,16) [16,20); with it,
  // B starts at 12, in the middle of what was its second chunk.
  const std::vector<int32_t> a = seq(13, 100);
  const std::vector<int32_t> b = cat(seq(12, 100), seq(8, 500));
  for (bool caching : {true, false}) {
    Sim sim(clim(Policy::kChunked, caching), 1000);
    sim.detailed = true;
    sim.add(1, req(a, 1));
    sim.run();
    sim.add(2, req(b, 1));
    const T want = caching ? T{"B cached [0,12) prefill [12,20)"}
                           : T{"B prefill [0,8)", "B prefill [8,16)", "B prefill [16,20)"};
    EXPECT_EQ(sim.run(), want);
  }
}

TEST(PrefixCache, PromptLogprobsTakeNoPrefixAndFlagTheirPromptRows) {
  // A's 20-token prompt is cached; B, the same prompt asking for prompt
  // logprobs, computes it all again (cached positions have no logits), in
  // chunks that each name the prompt token after them, the last none; its
  // decodes after the first token do not ask.
  const std::vector<int32_t> a = seq(20, 100);
  Sim sim(clim(Policy::kChunked), 1000);
  sim.detailed = true;
  sim.add(1, req(a, 1));
  sim.run();
  GenRequest b = req(a, 3);
  b.prompt_logprobs = 2;
  sim.add(2, std::move(b));
  std::vector<std::string> rows;
  while (!sim.idle()) {
    sim.fill();
    for (const ScheduledRow& r : sim.ring.back().rows)
      rows.push_back("[" + std::to_string(r.pos0) + "," + std::to_string(r.pos0 + r.n_tokens) +
                     ") lp " + std::to_string(r.prompt_logprobs) + " next " +
                     std::to_string(r.next_token));
    sim.complete();
  }
  EXPECT_EQ(rows, (std::vector<std::string>{"[0,8) lp 2 next 108", "[8,16) lp 2 next 116",
                                            "[16,20) lp 2 next -1", "[20,21) lp -1 next -1",
                                            "[21,22) lp -1 next -1"}));
  EXPECT_EQ(sim.out[2].size(), 3u);
  EXPECT_EQ(sim.cached[2], 0);
}

TEST(PrefixCache, WholePrefillAndNaivePoliciesReuseToo) {
  const std::vector<int32_t> a = seq(10, 100);
  for (Policy p : {Policy::kContinuous, Policy::kNaive}) {
    Sim sim(clim(p), 1000), off(clim(p, false), 1000);
    sim.detailed = true;
    for (Sim* s : {&sim, &off}) {
      s->add(1, req(a, 2));
      s->add(2, req(cat(seq(8, 100), seq(5, 300)), 2));
    }
    const T t = sim.run();
    off.run();
    EXPECT_EQ(outputs(sim), outputs(off)) << policy_name(p);
    // Continuous: B rides in A's batch and reuses the blocks A's row, ahead
    // of it in the batch, writes (every stage writes a layer's KV for all
    // rows before any row's attention reads it). Naive: B comes after A.
    const T want =
        p == Policy::kNaive
            ? T{"A prefill [0,10)", "A decode 10", "B cached [0,8) prefill [8,13)", "B decode 13"}
            : T{"A prefill [0,10) + B cached [0,8) prefill [8,13)", "A decode 10 + B decode 13"};
    EXPECT_EQ(t, want) << policy_name(p);
  }
}

TEST(PrefixCache, StaticPolicyRefusesCaching) {
  EXPECT_THROW(Scheduler(clim(Policy::kStatic), 100, 4), Error);
  EXPECT_NO_THROW(Scheduler(clim(Policy::kStatic, false), 100, 4));
}

TEST(PrefixCache, SaltsNeverShare) {
  const std::vector<int32_t> a = seq(10, 100);
  Sim sim(clim(Policy::kChunked), 1000);
  sim.detailed = true;
  sim.add(1, req(a, 1, 1, "tenant-a"));
  sim.run();
  sim.add(2, req(a, 1, 1, "tenant-b"));
  sim.add(3, req(a, 1));  // no salt: the default pool, not tenant-a's
  sim.add(4, req(a, 1, 1, "tenant-a"));
  EXPECT_EQ(sim.run(), (T{"B prefill [0,8) + C prefill [0,8)",
                          "B prefill [8,10) + C prefill [8,10) + D cached [0,8) prefill [8,10)"}));
  EXPECT_EQ(sim.cached[2], 0);
  EXPECT_EQ(sim.cached[3], 0);
  EXPECT_EQ(sim.cached[4], 8);
}

TEST(PrefixCache, APreemptedSequenceFindsItsOwnBlocksStillCached) {
  // 10 blocks of 4. A and B: 12-token prompts, 12 new tokens each (6
  // blocks at the end); both cannot finish together. B, the newest, is
  // preempted when A grows; its three prompt blocks (and the full blocks of
  // what it generated) stay cached, and when it comes back it recomputes
  // only past them.
  Sim sim(clim(Policy::kChunked), 10), off(clim(Policy::kChunked, false), 1000);
  sim.detailed = true;
  for (Sim* s : {&sim, &off}) {
    s->add(1, req(seq(12, 100), 12));
    s->add(2, req(seq(12, 500), 12));
  }
  const T t = sim.run();
  off.run();
  EXPECT_EQ(outputs(sim), outputs(off));
  EXPECT_GT(sim.sch.stats().preemptions, 0);
  const auto again = std::find_if(t.begin(), t.end(), [](const std::string& s) {
    return s.find("B cached [0,") != std::string::npos && s.find("recompute") != std::string::npos;
  });
  ASSERT_NE(again, t.end()) << "B's recompute reused nothing";
  EXPECT_EQ(sim.cached[2], 0);  // usage reports the first admission's lookup
  const SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.blocks_free, st.blocks_total);
}

// ---- parallel sampling ------------------------------------------------------------

TEST(PrefixCache, ChoicesShareThePromptAndCopyItsLastBlock) {
  // n = 4 on a 10-token prompt: choice 0 computes the prompt; the other
  // three wait for it, reuse its two whole blocks, copy its block [8,12)
  // (positions 8 and 9 written, before their batch's forward, so in the
  // batch after the one that writes it) and compute only the last token:
  // 10 + 3 x 1 prompt tokens, not 4 x 10.
  Sim sim(clim(Policy::kChunked), 1000);
  sim.detailed = true;
  sim.add(1, req(seq(10, 100), 2, 4));
  EXPECT_EQ(sim.run(), (T{
                           "A prefill [0,8)",
                           "A prefill [8,10)",
                           "A decode 10 + A1 cached [0,8) copied [8,9) prefill [9,10) + "
                           "A2 cached [0,8) copied [8,9) prefill [9,10) + "
                           "A3 cached [0,8) copied [8,9) prefill [9,10)",
                           "A1 decode 10 + A2 decode 10 + A3 decode 10",
                       }));
  EXPECT_EQ(sim.sch.stats().tokens_prompt, 10 + 3 * 1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(sim.finish[sequence_key(1, i)], FinishReason::kLength);
  // The last token alone in its block: nothing to copy, the choices compute
  // it in choice 0's batch.
  Sim one(clim(Policy::kChunked), 1000);
  one.detailed = true;
  one.add(1, req(seq(9, 100), 1, 3));
  EXPECT_EQ(one.run(), (T{"A prefill [0,8)",
                          "A prefill [8,9) + A1 cached [0,8) prefill [8,9) + "
                          "A2 cached [0,8) prefill [8,9)"}));
}

TEST(PrefixCache, ACopyFromAFailedBatchIsRecomputed) {
  // Three micro-batches in flight: choice 0's prompt goes in batches 1 and
  // 2, choice 1's copy of its last block in batch 3 (the row cap balances
  // three sequences over three slots: one row a batch; choice 2 waits);
  // batch 2 fails (its block poisoned): choice 0 fails, the copy is
  // garbage, choice 1 is recomputed, choice 2 starts without a leader to
  // copy from, and both give the text of a fault-free run (one that
  // recomputed nothing: choice i alone with seed + i, caching off).
  SchedLimits l = clim(Policy::kChunked, true, 3);
  Sim sim(l, 1000), ok(clim(Policy::kChunked, false), 1000);
  sim.detailed = true;
  sim.strict = false;
  sim.balance = false;
  sim.add(1, req(seq(10, 100), 3, 3));
  EXPECT_EQ(sim.fill(),
            "A prefill [0,8) | A prefill [8,10) | A1 cached [0,8) copied [8,9) prefill [9,10)");
  sim.complete();
  sim.fail_oldest();  // batch 2
  EXPECT_EQ(sim.finish[1], FinishReason::kError);
  sim.run();
  EXPECT_EQ(sim.sch.stats().requeued, 1);
  for (int i = 1; i < 3; ++i) {
    ok.add(RequestId(10 + i), req(seq(10, 100), 3));
    EXPECT_EQ(sim.finish[sequence_key(1, i)], FinishReason::kLength);
  }
  ok.run();
  for (int i = 1; i < 3; ++i) EXPECT_EQ(sim.out[sequence_key(1, i)], ok.out[RequestId(10 + i)]);
}

TEST(PrefixCache, ChoiceIIsTheSingleRequestWithSeedPlusI) {
  // Seeded sampling through the real sampler (the fake tail's penalised
  // mode): each choice of n = 4 equals the request sent alone with seed + i,
  // with caching on and off, under every policy that caches; with a
  // penalty too (then the choices reuse nothing: the tail's history needs
  // every position from 0).
  for (Policy p : {Policy::kChunked, Policy::kContinuous, Policy::kNaive})
    for (bool caching : {true, false})
      for (float presence : {0.f, 0.5f}) {
        Sim many(clim(p, caching, 2), 1000), alone(clim(p, false), 1000);
        many.penalize = alone.penalize = true;
        many.params.seed = 77;
        many.params.has_seed = 1;
        GenRequest g = req(seq(11, 3), 6, 4);
        g.sampling = many.params;
        g.sampling.presence_penalty = presence;
        many.add(1, g);
        many.run();
        for (int i = 0; i < 4; ++i) {
          GenRequest one = g;
          one.n = 1;
          one.sampling.seed = 77 + uint64_t(i);
          alone.add(RequestId(10 + i), one);
        }
        alone.run();
        std::set<std::vector<int32_t>> distinct;
        for (int i = 0; i < 4; ++i) {
          EXPECT_EQ(many.out[sequence_key(1, i)], alone.out[RequestId(10 + i)])
              << policy_name(p) << " caching " << caching << " choice " << i;
          distinct.insert(many.out[sequence_key(1, i)]);
        }
        EXPECT_GT(distinct.size(), 1u) << "the seeds made no difference";
        const int64_t computed = many.sch.stats().tokens_prompt;
        // Caching: the prompt once, then the last token per other choice
        // (its last block copied). `naive` runs one sequence at a time: a
        // choice starts once the one before it has finished, its partial
        // last block gone with it, so each recomputes that block [8,11).
        const int64_t cached = p == Policy::kNaive ? 11 + 3 * 3 : 11 + 3 * 1;
        EXPECT_EQ(computed, caching && presence == 0 ? cached : 4 * 11) << policy_name(p);
      }
}

TEST(PrefixCache, OneChoiceStopsAndTheOthersGoOn) {
  Sim sim(clim(Policy::kChunked), 1000);
  sim.add(1, req(seq(6, 100), 5, 3));
  sim.step();
  sim.step();
  sim.sch.abort_choice(1, 1);
  sim.run();
  EXPECT_EQ(sim.finish[sequence_key(1, 1)], FinishReason::kAbort);
  EXPECT_EQ(sim.finish[sequence_key(1, 0)], FinishReason::kLength);
  EXPECT_EQ(sim.finish[sequence_key(1, 2)], FinishReason::kLength);
  sim.add(2, req(seq(6, 100), 5, 3));
  sim.step();
  sim.sch.abort(2);  // every choice at once
  sim.run();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sim.finish[sequence_key(2, i)], FinishReason::kAbort);
  EXPECT_EQ(sim.sch.stats().blocks_free, sim.sch.stats().blocks_total);
}

// ---- failures and epochs ----------------------------------------------------------

TEST(PrefixCache, AFailedBatchLeavesNoCachedBlockItDidNotWrite) {
  // Two micro-batches in flight. A's prompt is in batch 1; B, sharing its
  // first block, reuses it in batch 2 before batch 1 is back. Batch 1 fails
  // (poison where it should have written): A fails; nothing batch 1 or 2
  // cached stays cached; B read a block that is not there, so its batch-2
  // result is dropped and it is recomputed from scratch (requeued). C, with
  // B's prompt, then reuses B's recomputed blocks. B's and C's text equal a
  // fault-free run's.
  const std::vector<int32_t> b = cat(seq(4, 100), seq(5, 700));
  Sim sim(clim(Policy::kChunked, true, 2), 1000), ok(clim(Policy::kChunked, false), 1000);
  sim.detailed = true;
  sim.strict = false;  // B's dropped row reads the poison
  sim.balance = false;
  sim.add(1, req(seq(6, 100), 3));
  EXPECT_EQ(sim.fill(), "A prefill [0,6)");
  sim.add(2, req(b, 3));
  EXPECT_EQ(sim.fill(), "B cached [0,4) prefill [4,9)");
  sim.fail_oldest();  // batch 1
  EXPECT_EQ(sim.finish[1], FinishReason::kError);
  EXPECT_EQ(sim.sch.stats().blocks_cached, 0) << "a failed batch left cached blocks";
  sim.complete();  // batch 2: B's token is dropped, B goes back to the queue
  EXPECT_EQ(sim.finish.count(2), 0u);
  EXPECT_TRUE(sim.out[2].empty());
  EXPECT_EQ(sim.sch.stats().requeued, 1);
  sim.add(3, req(b, 3));
  EXPECT_EQ(sim.run(), (T{"B recompute [0,8) | B recompute [8,9)", "C cached [0,8) prefill [8,9)",
                          "B decode 9", "C decode 9", "B decode 10", "C decode 10", ""}));
  ok.add(2, req(b, 3));
  ok.add(3, req(b, 3));
  ok.run();
  EXPECT_EQ(sim.out[2], ok.out[2]);
  EXPECT_EQ(sim.out[3], ok.out[3]);
  EXPECT_EQ(sim.cached[3], 8);
}

TEST(PrefixCache, BlocksOfABatchThatCameBackSurviveALaterFailure) {
  // A's prompt goes in two chunks (block [0,4) is full after batch 1,
  // [4,8) after batch 2). Batch 1 comes back; B reuses both blocks in batch
  // 3; batch 2 fails. B read [4,8), which batch 2 was to finish:
  // recomputed, but past [0,4), which batch 1 did write and which stays
  // cached.
  const std::vector<int32_t> b = cat(seq(8, 100), seq(4, 600));
  SchedLimits l = clim(Policy::kChunked, true, 2);
  l.chunk_size = 6;
  Sim sim(l, 1000), ok(clim(Policy::kChunked, false), 1000);
  sim.detailed = true;
  sim.strict = false;
  sim.balance = false;
  sim.add(1, req(seq(10, 100), 2));
  EXPECT_EQ(sim.fill(), "A prefill [0,6) | A prefill [6,10)");
  sim.complete();  // batch 1
  sim.add(2, req(b, 2));
  EXPECT_EQ(sim.fill(), "B cached [0,8) prefill [8,12)");
  sim.fail_oldest();  // batch 2
  EXPECT_EQ(sim.finish[1], FinishReason::kError);
  EXPECT_EQ(sim.sch.stats().blocks_cached, 1);  // [0,4): batch 1's, written
  // Nothing while B's dropped row is in the ring; then its recompute.
  EXPECT_EQ(sim.run(),
            (T{"", "B cached [0,4) recompute [4,10) | B recompute [10,12)", "", "B decode 12"}));
  EXPECT_EQ(sim.sch.stats().requeued, 1);
  ok.add(2, req(b, 2));
  ok.run();
  EXPECT_EQ(sim.out[2], ok.out[2]);
}

TEST(PrefixCache, ALostStageEmptiesTheCache) {
  Sim sim(clim(Policy::kChunked, true, 2), 1000);
  sim.detailed = true;
  sim.add(1, req(seq(10, 100), 4));
  sim.step();
  sim.step();
  EXPECT_GT(sim.sch.stats().blocks_cached, 0);
  sim.ring.clear();  // lost with the stage
  sim.sch.requeue_all();
  SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.blocks_cached, 0);
  EXPECT_EQ(st.blocks_evictable, 0);
  EXPECT_EQ(st.blocks_free, st.blocks_total);
  EXPECT_EQ(st.prefix_resets, 1);
  // A's recompute starts from position 0: nothing of the old epoch is reused.
  const T t = sim.run();
  EXPECT_EQ(t.front(), "A recompute [0,6) | A recompute [6,11)");
  Sim ok(clim(Policy::kChunked, false), 1000);
  ok.add(1, req(seq(10, 100), 4));
  ok.run();
  EXPECT_EQ(sim.out[1], ok.out[1]);
}

// ---- random workloads ---------------------------------------------------------------

// A prompt from one of a few shared beginnings (of random length, block
// aligned or not) plus a suffix of its own, some salted.
GenRequest random_request(std::mt19937_64& rng, int id) {
  const int group = int(rng() % 3);
  std::vector<int32_t> p = seq(1 + int(rng() % 24), 1000 * (group + 1));
  p = cat(p, seq(int(rng() % 8), 100000 + 100 * id));
  const int n = rng() % 4 == 0 ? 1 + int(rng() % 3) : 1;
  return req(p, 1 + int(rng() % 7), n, rng() % 5 == 0 ? "x" : "");
}

TEST(PrefixCache, RandomWorkloadsGiveTheOutputsOfCachingOff) {
  // Shared prefixes under every caching policy, one to three micro-batches
  // in flight, roomy and tight pools (preemptions), arrivals spread over
  // the run, n > 1 and salts: every read checked, outputs equal to a run
  // without caching, and every block back at the end.
  const Policy policies[] = {Policy::kNaive, Policy::kContinuous, Policy::kChunked};
  int64_t hits = 0, preemptions = 0;
  const int trials =
      std::getenv("KVASIR_PREFIX_TRIALS") ? std::atoi(std::getenv("KVASIR_PREFIX_TRIALS")) : 60;
  for (int trial = 0; trial < trials; ++trial) {
    std::mt19937_64 rng(uint64_t(trial) * 7919 + 1);
    const Policy p = policies[trial % 3];
    const int32_t inflight = 1 + int32_t(rng() % 3);
    const int32_t pool = rng() % 2 ? 1000 : 12;
    Sim sim(clim(p, true, inflight), pool), off(clim(p, false), 1000);
    const int n_req = 6 + int(rng() % 8);
    int added = 0;
    for (int step = 0; step < 10000 && (added < n_req || !sim.idle()); ++step) {
      while (added < n_req && rng() % 3 == 0) {
        const GenRequest g = random_request(rng, added + 1);
        sim.add(RequestId(added + 1), g);
        off.add(RequestId(added + 1), g);
        added++;
      }
      sim.step();
      if (::testing::Test::HasFailure()) return;
    }
    off.run();
    ASSERT_TRUE(sim.idle()) << "trial " << trial;
    EXPECT_EQ(outputs(sim), outputs(off)) << "trial " << trial << " " << policy_name(p);
    const SchedulerStats st = sim.sch.stats();
    EXPECT_EQ(st.blocks_free, st.blocks_total) << "trial " << trial;
    EXPECT_EQ(st.blocks_evictable, st.blocks_cached) << "trial " << trial;
    hits += st.prefix_hits;
    preemptions += st.preemptions;
  }
  EXPECT_GT(hits, 0);
  EXPECT_GT(preemptions, 0);
}

TEST(PrefixCache, RandomFailedBatchesNeverLeaveABadHit) {
  // As above, with batches failing at random (their positions poisoned):
  // a request in a failed batch ends with an error; every other one must
  // read only good KV, so its text equals the run without caching: a
  // sequence that reused a block the failure took is recomputed, and no
  // later lookup finds one.
  int64_t requeued = 0, failed = 0;
  const int trials =
      std::getenv("KVASIR_PREFIX_TRIALS") ? std::atoi(std::getenv("KVASIR_PREFIX_TRIALS")) : 60;
  for (int trial = 0; trial < trials; ++trial) {
    std::mt19937_64 rng(uint64_t(trial) * 104729 + 5);
    const Policy p = trial % 2 ? Policy::kChunked : Policy::kContinuous;
    Sim sim(clim(p, true, 1 + int32_t(rng() % 3)), rng() % 2 ? 1000 : 12);
    Sim off(clim(p, false), 1000);
    sim.strict = false;
    random_arrivals(sim, off, rng, 6 + int(rng() % 8), true, [](std::mt19937_64& r, int id) {
      GenRequest g = random_request(r, id);
      g.n = 1;
      return g;
    });
    ASSERT_TRUE(sim.idle()) << "trial " << trial;
    failed += same_outputs_but_errors(sim, off, trial);
    const SchedulerStats st = sim.sch.stats();
    EXPECT_EQ(st.blocks_free, st.blocks_total);
    requeued += st.requeued;
  }
  EXPECT_GT(requeued, 0);
  EXPECT_GT(failed, 0);
}

TEST(PrefixCache, NoLeakAfterTenThousandRequestsWithAborts) {
  // 10,000 requests (some n > 1) through a tight pool with two batches in
  // flight; clients abort at random: waiting, mid-prefill, mid-decode,
  // one choice or all. At the end no block is held by anyone: free +
  // evictable = total.
  Sim sim(clim(Policy::kChunked, true, 2), 40);
  std::mt19937_64 rng(4242);
  std::vector<RequestId> live;
  int added = 0;
  auto finished = [&](RequestId id) {
    for (int i = 0; i < kMaxChoices; ++i)
      if (sim.toks.count(sequence_key(id, i)) && !sim.finish.count(sequence_key(id, i)))
        return false;
    return true;
  };
  while (added < 10000 || !sim.idle()) {
    while (added < 10000 && live.size() < 8) {
      live.push_back(RequestId(++added));
      sim.add(live.back(), random_request(rng, added));
    }
    if (!live.empty() && rng() % 6 == 0) {
      const RequestId id = live[rng() % live.size()];
      if (rng() % 3)
        sim.sch.abort(id);
      else
        sim.sch.abort_choice(id, int32_t(rng() % 3));
    }
    sim.step();
    std::erase_if(live, finished);
    ASSERT_FALSE(::testing::Test::HasFailure());
  }
  const SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.blocks_free, st.blocks_total);  // nothing referenced...
  EXPECT_EQ(st.blocks_free - st.blocks_evictable + st.blocks_evictable, st.blocks_total);
  EXPECT_EQ(st.blocks_evictable, st.blocks_cached);  // ...and every cached block evictable
  EXPECT_GT(st.prefix_hits, 0);
  EXPECT_GT(st.preemptions, 0);
  int aborted = 0;
  for (auto& [k, f] : sim.finish) aborted += f == FinishReason::kAbort;
  EXPECT_GT(aborted, 1000);
}

}  // namespace
}  // namespace kvasir::test
