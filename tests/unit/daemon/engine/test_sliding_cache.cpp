// Prefix caching with a sliding-window group (hybrid_cache.h): the hit
// rule over both groups alone, then in the scheduler against the fake ring
// of scheduler_sim.h, whose sliding cells hold the hash of their token
// prefix with caching: a hit that maps a sliding block of another prefix,
// or one never written, reads a bad window and fails.
#include <gtest/gtest.h>

#include <random>

#include "daemon/engine/hybrid_cache.h"
#include "scheduler_sim.h"

namespace kvasir::test {
namespace {

constexpr int32_t kUn = SlidingGroup::kUnmapped;

// Window 8, blocks of 4: a row at position p reads entries from
// (p - 7) / 4 on. Both groups cache.
struct Groups {
  BlockManager full{40, 4, true};
  SlidingGroup swa{8, 20, 4, true};
  HybridCache cache{full, swa};
};

std::vector<int32_t> prompt(int n, int32_t base = 100) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i);
  return t;
}

// A sequence of `tokens` that wrote them all in batch `writer`: both
// tables cover them, their full blocks cached.
struct Seq {
  std::vector<int32_t> table, swa;
  CacheCursor cur;
};
Seq written(Groups& g, const std::vector<int32_t>& tokens, uint64_t writer) {
  Seq s;
  EXPECT_TRUE(g.full.ensure(s.table, int64_t(tokens.size())));
  EXPECT_TRUE(g.swa.ensure(s.swa, int64_t(tokens.size())));
  g.cache.cache_full_blocks(s.table, s.swa, tokens, int64_t(tokens.size()), "", writer, s.cur);
  return s;
}

TEST(HybridCache, ABlockSlidPastIsEvictableAndAHitTakesTheWindowOnly) {
  Groups g;
  const std::vector<int32_t> t = prompt(30);  // 7 full blocks and a partial one
  Seq a = written(g, t, 1);
  g.cache.confirm(1);
  EXPECT_EQ(g.swa.pool().cached(), 7);
  // Its next row at 36 reads from entry 7 on: entries 0..6 go back, to the
  // evictable list (cached), not to free; the pool counts them available.
  EXPECT_EQ(g.swa.slide(a.swa, 36), 7);
  EXPECT_EQ(g.swa.pool().evictable(), 7);
  EXPECT_EQ(g.swa.free(), 20 - 1);
  g.full.release(a.table);
  g.swa.release(a.swa);
  // The same prompt again: 7 whole blocks (its last token is computed); a
  // row at 28 reads from entry 5 on, so entries 0..4 stay unmapped.
  const HybridHit hit = g.cache.find_prefix(t, "");
  ASSERT_EQ(hit.n_blocks(), 7);
  const int32_t b5 = hit.swa[5], b6 = hit.swa[6];
  EXPECT_EQ(hit.swa, (std::vector<int32_t>{kUn, kUn, kUn, kUn, kUn, b5, b6}));
  EXPECT_EQ(hit.swa_evictable, 2);
  EXPECT_EQ(hit.full.n_evictable, 7);
  EXPECT_EQ(hit.swa_writer, 0u);  // confirmed
  Seq b;
  g.cache.reuse(b.table, b.swa, hit, b.cur);
  EXPECT_EQ(b.swa, hit.swa);
  EXPECT_EQ(g.swa.pool().refs(b5), 1);
  EXPECT_EQ(g.swa.pool().evictable(), 5);
  EXPECT_EQ(g.swa.free(), 18);  // the 2 evictable blocks it took are no longer available
  EXPECT_EQ(SlidingGroup::held(b.swa), 2);
}

TEST(HybridCache, AnEvictedWindowBlockShortensTheHit) {
  Groups g;
  const std::vector<int32_t> t = prompt(30);
  Seq a = written(g, t, 0);
  // Slid past all at once: entry 6 is released first, so evicted first.
  g.swa.slide(a.swa, 36);
  g.full.release(a.table);
  g.swa.release(a.swa);
  EXPECT_EQ(g.cache.find_prefix(t, "").n_blocks(), 7);
  // Another sequence takes every free sliding block and one more: entry 6
  // of the prompt is evicted. A hit of 7 needs entries 5 and 6; of 6,
  // entries 4 and 5: the hit ends before the evicted block.
  std::vector<int32_t> other;
  ASSERT_TRUE(g.swa.ensure(other, 4 * (g.swa.free() - 7 + 1)));
  const HybridHit hit = g.cache.find_prefix(t, "");
  EXPECT_EQ(hit.n_blocks(), 6);
  EXPECT_EQ(hit.swa[0], kUn);
  EXPECT_EQ(hit.swa[3], kUn);
  EXPECT_GE(hit.swa[4], 0);
  EXPECT_GE(hit.swa[5], 0);
  EXPECT_EQ(hit.full.last.block, hit.full.blocks.back());
  EXPECT_EQ(hit.full.n_evictable, 6);
  // A short prompt whose window starts at 0 needs every entry: entry 0
  // is still there, so one block is a hit.
  EXPECT_EQ(g.cache.find_prefix(prompt(6), "").n_blocks(), 1);
}

TEST(HybridCache, AFailedBatchUncachesBothGroupsAndTaintsAReaderPastItsWindow) {
  Groups g;
  const std::vector<int32_t> t = prompt(30);
  Seq a;
  ASSERT_TRUE(g.full.ensure(a.table, 30));
  ASSERT_TRUE(g.swa.ensure(a.swa, 30));
  g.cache.cache_full_blocks(a.table, a.swa, t, 16, "", 1, a.cur);  // entries 0..3 in batch 1
  g.cache.cache_full_blocks(a.table, a.swa, t, 30, "", 2, a.cur);  // 4..6 in batch 2
  g.cache.confirm(1);
  // B reuses the whole hit (its window's blocks pending on batch 2) and
  // then slides past them: its table no longer shows them, its cursor does.
  Seq b;
  const HybridHit hit = g.cache.find_prefix(t, "");
  ASSERT_EQ(hit.n_blocks(), 7);
  EXPECT_EQ(hit.swa_writer, 2u);
  g.cache.reuse(b.table, b.swa, hit, b.cur);
  g.swa.slide(b.swa, 40);
  EXPECT_EQ(SlidingGroup::held(b.swa), 0);
  EXPECT_TRUE(g.cache.reads_pending(b.table, 7, b.cur, 2));
  EXPECT_FALSE(g.cache.reads_pending(b.table, 7, b.cur, 3));
  // (n_shared 0: the sliding group's part alone.)
  EXPECT_TRUE(g.cache.reads_pending(b.table, 0, b.cur, 2));
  EXPECT_FALSE(g.cache.reads_pending(b.table, 0, b.cur, 3));
  // Batch 2 fails: 3 blocks in each group go.
  EXPECT_EQ(g.cache.drop_pending(2), 6);
  EXPECT_EQ(g.swa.pool().cached(), 4);
  EXPECT_EQ(g.full.cached(), 4);
  // What batch 1 wrote still hits: 4 blocks, the window of 16 being
  // entries 2 and 3.
  const HybridHit after = g.cache.find_prefix(t, "");
  EXPECT_EQ(after.n_blocks(), 4);
  EXPECT_EQ(after.swa[1], kUn);
  EXPECT_GE(after.swa[2], 0);
}

TEST(HybridCache, ANewEpochDropsBothGroups) {
  Groups g;
  const std::vector<int32_t> t = prompt(30);
  Seq a = written(g, t, 0);
  g.full.release(a.table);
  g.swa.release(a.swa);
  EXPECT_EQ(g.cache.drop_cache(), 14);
  EXPECT_EQ(g.swa.pool().cached(), 0);
  EXPECT_EQ(g.swa.pool().evictable(), 0);
  EXPECT_EQ(g.cache.find_prefix(t, "").n_blocks(), 0);
}

TEST(HybridCache, RejectedDraftsCacheNothing) {
  // A decode at 22 carrying 9 drafts grows both tables to 32 positions;
  // only the accepted positions (23) are cached: the draft-only blocks go
  // back free when trimmed, and no cached block is trimmed.
  Groups g;
  std::vector<int32_t> t = prompt(23);
  Seq a;
  ASSERT_TRUE(g.full.ensure(a.table, 32));
  ASSERT_TRUE(g.swa.ensure(a.swa, 32));
  g.cache.cache_full_blocks(a.table, a.swa, t, 23, "", 1, a.cur);
  EXPECT_EQ(g.swa.pool().cached(), 5);
  g.full.trim(a.table, 23);
  g.swa.trim(a.swa, 23);
  EXPECT_EQ(int32_t(a.swa.size()), 6);
  EXPECT_EQ(g.swa.pool().cached(), 5);
  EXPECT_EQ(g.swa.pool().evictable(), 0);
  EXPECT_EQ(g.swa.free(), 20 - 6);
}

// ---- in the scheduler -------------------------------------------------------------

SchedLimits chunked_cached(bool caching, int32_t inflight = 2) {
  SchedLimits l{4, 8, 6, 256};
  l.policy = Policy::kChunked;
  l.inflight = inflight;
  l.prefix_caching = caching;
  return l;
}

TEST(SchedulerSliding, ASecondRequestWithAPromptLongerThanTheWindowHits) {
  // Window 6, blocks of 4, a 30-token prompt: the second request reuses 7
  // blocks (28 tokens), its rows read the right window (every read
  // checked), and its text is the run's without caching.
  Sim plain(chunked_cached(false), 200, 4, {}, SlidingKv{6, 40});
  Sim slid(chunked_cached(true), 200, 4, {}, SlidingKv{6, 40});
  GenRequest g;
  for (int i = 0; i < 30; ++i) g.prompt.push_back(7 + i);
  g.max_tokens = 12;
  for (Sim* s : {&plain, &slid}) {
    s->add(1, g);
    s->run();
    s->add(2, g);
    s->run();
  }
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(slid.out, plain.out);
  EXPECT_EQ(slid.out[1], slid.out[2]);
  EXPECT_EQ(slid.cached[2], 28);
  EXPECT_EQ(slid.sch.stats().prefix_hits, 28);
  EXPECT_EQ(plain.sch.stats().prefix_hits, 0);
  const SchedulerStats st = slid.sch.stats();
  EXPECT_EQ(st.blocks_swa_free, st.blocks_swa_total);
  // The stats report the sliding pool's cache: at least the 7 blocks the
  // hit took stay cached, and nobody holds any once both finished.
  EXPECT_GE(st.blocks_swa_cached, 7);
  EXPECT_EQ(st.blocks_swa_evictable, st.blocks_swa_cached);
  EXPECT_EQ(plain.sch.stats().blocks_swa_cached, 0);
  EXPECT_EQ(plain.sch.stats().blocks_swa_evictable, 0);
}

TEST(SchedulerSliding, ChoicesShareAPromptWithoutCopyOnWrite) {
  // n = 3 with a sliding group: choices 1 and 2 reuse choice 0's whole
  // blocks and recompute the last block (no block copy: it would carry the
  // full group's id only), every read checked.
  Sim slid(chunked_cached(true), 200, 4, {}, SlidingKv{6, 40});
  slid.detailed = true;
  GenRequest g;
  for (int i = 0; i < 30; ++i) g.prompt.push_back(7 + i);
  g.max_tokens = 5;
  g.n = 3;
  slid.add(1, g);
  std::string all;
  for (const std::string& s : slid.run()) all += s + "\n";
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(all.find("copied"), std::string::npos) << all;
  EXPECT_NE(all.find("A1 cached [0,28)"), std::string::npos) << all;
  EXPECT_NE(all.find("A2 cached [0,28)"), std::string::npos) << all;
  EXPECT_EQ(slid.cached[sequence_key(1, 1)], 28);
  EXPECT_EQ(slid.out[sequence_key(1, 0)].size(), 5u);
}

// Requests sharing one of three long prefixes (past the window), arriving
// over the run; batches fail at random (fail: 1 in 8) or never.
GenRequest shared_prefix_request(std::mt19937_64& rng, int id) {
  GenRequest g;
  const int32_t group = int32_t(rng() % 3);
  const int n_shared = 8 + int(rng() % 24);
  for (int i = 0; i < n_shared; ++i) g.prompt.push_back(1000 * (group + 1) + i);
  for (int i = int(rng() % 6); i > 0; --i) g.prompt.push_back(100000 + 100 * id + i);
  g.max_tokens = 1 + int(rng() % 12);
  return g;
}

void random_trials(bool failures) {
  int64_t hits = 0, failed = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::mt19937_64 rng(uint64_t(trial) * 7919 + (failures ? 5 : 1));
    const int32_t inflight = 1 + int32_t(rng() % 3);
    const SlidingKv kv{5 + int32_t(rng() % 8), rng() % 2 ? 60 : 16};
    Sim sim(chunked_cached(true, inflight), rng() % 2 ? 400 : 24, 4, {}, kv);
    Sim off(chunked_cached(false), 400, 4, {}, SlidingKv{kv.window, 200});
    sim.strict = !failures;
    random_arrivals(sim, off, rng, 6 + int(rng() % 8), failures, shared_prefix_request);
    if (::testing::Test::HasFailure()) return;
    ASSERT_TRUE(sim.idle()) << "trial " << trial;
    failed += same_outputs_but_errors(sim, off, trial);
    const SchedulerStats st = sim.sch.stats();
    EXPECT_EQ(st.blocks_free, st.blocks_total) << "trial " << trial;
    EXPECT_EQ(st.blocks_swa_free, st.blocks_swa_total) << "trial " << trial;
    hits += st.prefix_hits;
  }
  EXPECT_GT(hits, 0);
  if (failures) {
    EXPECT_GT(failed, 0);
  }
}

TEST(SchedulerSliding, RandomSharedPrefixesGiveTheOutputsOfCachingOff) {
  random_trials(false);
}

TEST(SchedulerSliding, RandomFailedBatchesNeverLeaveABadSlidingHit) {
  random_trials(true);
}

TEST(SchedulerSliding, ALostStageDropsBothGroupsCaches) {
  Sim sim(chunked_cached(true), 200, 4, {}, SlidingKv{6, 40});
  GenRequest g;
  for (int i = 0; i < 30; ++i) g.prompt.push_back(7 + i);
  g.max_tokens = 4;
  sim.add(1, g);
  sim.run();
  ASSERT_GT(sim.sch.stats().blocks_cached, 0);
  sim.sch.requeue_all();
  EXPECT_EQ(sim.sch.stats().blocks_cached, 0);
  sim.add(2, g);
  sim.run();
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(sim.cached[2], 0);
  EXPECT_EQ(sim.out[1], sim.out[2]);
}

}  // namespace
}  // namespace kvasir::test
