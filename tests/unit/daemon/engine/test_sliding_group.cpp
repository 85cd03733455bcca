// The sliding-window group (sliding_group.h): its blocks go back as the
// window moves, alone and in the scheduler. The scheduler runs against the
// fake ring of scheduler_sim.h, whose rows also write their positions
// through their sliding table and read every position of their windows
// back: a block given back while a later row still needed it, or handed to
// another sequence too early, reads another request's cells and fails.
#include <gtest/gtest.h>

#include "daemon/engine/sliding_group.h"
#include "scheduler_sim.h"

namespace kvasir::test {
namespace {

constexpr int32_t kUn = SlidingGroup::kUnmapped;

TEST(SlidingGroup, GivesBackWhatTheWindowPassed) {
  SlidingGroup g(8, 10, 4);  // window 8, blocks of 4
  ASSERT_TRUE(g.on());
  std::vector<int32_t> t;
  ASSERT_TRUE(g.ensure(t, 20));  // positions [0, 20): 5 blocks
  EXPECT_EQ(g.free(), 5);
  // A row at 11 reads from 4 on: block 0 goes, block 1 stays.
  EXPECT_EQ(g.slide(t, 11), 1);
  EXPECT_EQ(t[0], kUn);
  EXPECT_GE(t[1], 0);
  EXPECT_EQ(SlidingGroup::held(t), 4);
  EXPECT_EQ(g.slide(t, 11), 0);  // nothing twice
  EXPECT_EQ(g.slide(t, 19), 2);  // reads from 12: blocks 1 and 2 go
  EXPECT_EQ(g.free(), 8);
  EXPECT_EQ(int32_t(t.size()), 5);  // the logical length stays
  g.trim(t, 17);                    // rejected drafts' last block
  EXPECT_EQ(int32_t(t.size()), 5);
  g.trim(t, 16);
  EXPECT_EQ(int32_t(t.size()), 4);
  EXPECT_EQ(g.free(), 9);
  g.release(t);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(g.free(), 10);
  // All or nothing.
  std::vector<int32_t> big;
  EXPECT_FALSE(g.ensure(big, 44));
  EXPECT_TRUE(big.empty());
  EXPECT_EQ(g.free(), 10);
}

TEST(SlidingGroup, OffIsANoOp) {
  SlidingGroup g(0, 10, 4);
  EXPECT_FALSE(g.on());
  std::vector<int32_t> t;
  EXPECT_TRUE(g.ensure(t, 100));
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(g.total(), 0);
}

TEST(SlidingGroup, MaxHeldBoundsEveryRowShape) {
  // Whatever the row's start and length (<= max_row), the blocks from the
  // window of its first position to its last fit max_held.
  for (int32_t w : {1, 5, 8, 17})
    for (int32_t bs : {1, 4, 16})
      for (int32_t max_row : {1, 3, 16}) {
        const int32_t bound = SlidingGroup::max_held(w, bs, max_row);
        for (int64_t p = 0; p < 80; ++p) {
          const int64_t first = std::max<int64_t>(0, p - w + 1) / bs;
          const int64_t last = (p + max_row - 1) / bs;
          EXPECT_LE(last - first + 1, bound) << w << " " << bs << " " << max_row << " " << p;
        }
      }
}

SchedLimits chunked(int32_t rows, int32_t max_tokens, int32_t chunk) {
  SchedLimits l{rows, max_tokens, chunk, 256};
  l.policy = Policy::kChunked;
  l.inflight = 2;
  return l;
}

int32_t held_swa(const Sim& sim) {
  const SchedulerStats st = sim.sch.stats();
  return int32_t(st.blocks_swa_total - st.blocks_swa_free);
}

TEST(SchedulerSliding, ChunkedPrefillAndDecodesPastTheWindow) {
  // Window 10, blocks of 4, chunks of 6 (so chunks cross the window's edge
  // at every offset), two batches in the ring: each sequence holds at most
  // max_held sliding blocks, reads its whole window, and the output equals
  // the same run's without a sliding group.
  const SchedLimits l = chunked(4, 8, 6);
  Sim plain(l, 200, 4);
  Sim slid(l, 200, 4, {}, SlidingKv{10, 40});
  for (Sim* s : {&plain, &slid})
    for (RequestId id = 1; id <= 3; ++id) s->add(id, 25 + int(id) * 7, 30);
  plain.run();
  const int32_t bound = 3 * SlidingGroup::max_held(10, 4, 8);
  for (int i = 0; i < 10000 && !slid.idle(); ++i) {
    slid.step();
    ASSERT_FALSE(::testing::Test::HasFailure());
    ASSERT_LE(held_swa(slid), bound);
  }
  EXPECT_EQ(slid.out, plain.out);
  const SchedulerStats st = slid.sch.stats();
  EXPECT_EQ(st.blocks_swa_free, st.blocks_swa_total);
  EXPECT_EQ(st.blocks_free, st.blocks_total);
}

TEST(SchedulerSliding, ASixteenThousandTokenSequenceHoldsItsWindowOnly) {
  // Gemma 3 270M's shape: window 512, blocks of 16, 3 global layers and 15
  // sliding ones. A 16,384-token sequence (16,300 prompt tokens in chunks
  // of 512, then decodes) holds its whole table in the full group and only
  // its window's blocks in the sliding one: at its last decode, at most
  // ceil(511 / 16) + 1 + 1 = 34, so (3 x 1024 + 15 x 34) / (18 x 1024)
  // of the blocks full KV on every layer would hold: under the 25%.
  SchedLimits l = chunked(4, 512, 512);
  l.inflight = 1;
  Sim sim(l, 1100, 16, {}, SlidingKv{512, 100});
  sim.add(1, 16300, 84);
  int32_t peak = 0, last = 0;
  int64_t full_held = 0;
  for (int i = 0; i < 1000 && !sim.idle(); ++i) {
    sim.fill();
    const SchedulerStats st = sim.sch.stats();
    last = int32_t(st.blocks_swa_total - st.blocks_swa_free);
    full_held = st.blocks_total - st.blocks_free;
    peak = std::max(peak, last);
    if (!sim.ring.empty()) sim.complete();
    ASSERT_FALSE(::testing::Test::HasFailure());
  }
  EXPECT_EQ(sim.out[1].size(), 84u);
  EXPECT_EQ(full_held, 1024);  // the last decode's table: 16,384 positions
  EXPECT_LE(last, 34);
  EXPECT_LE(peak, SlidingGroup::max_held(512, 16, 512));  // a chunk beside its window
  const double share = (3.0 * double(full_held) + 15.0 * last) / (18.0 * double(full_held));
  EXPECT_LT(share, 0.25) << share;
  RecordProperty("sliding_share_percent", std::to_string(int(share * 1000) / 10.0));
}

TEST(SchedulerSliding, PreemptionForLackOfSlidingBlocksRecomputes) {
  // A sliding pool too small for three windows at once: the newest
  // sequence is preempted and recomputed from position 0 (its sliding
  // table given back whole), and every output is still the plain run's.
  const SchedLimits l = chunked(4, 8, 8);
  Sim plain(l, 200, 4);
  Sim slid(l, 200, 4, {}, SlidingKv{12, 10});
  for (Sim* s : {&plain, &slid})
    for (RequestId id = 1; id <= 3; ++id) s->add(id, 4, 40);
  plain.run();
  slid.run();
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(slid.out, plain.out);
  EXPECT_GT(slid.sch.stats().preemptions, 0);
  const SchedulerStats st = slid.sch.stats();
  EXPECT_EQ(st.blocks_swa_free, st.blocks_swa_total);
}

TEST(SchedulerSliding, ALostStageRecomputesFromPositionZero) {
  // A stage lost twice while sequences are past their windows: every
  // batch in the ring is gone, every sliding table given back whole, and
  // the recompute reads its windows anew; outputs equal a fault-free run's.
  const SchedLimits l = chunked(4, 8, 6);
  Sim sim(l, 200, 4, {}, SlidingKv{10, 40}), ref(l, 200, 4);
  for (Sim* s : {&sim, &ref})
    for (RequestId id = 1; id <= 3; ++id) s->add(id, 20 + int(id) * 5, 25);
  for (int loss = 0; loss < 2; ++loss) {
    for (int i = 0; i < 15; ++i) sim.step();
    sim.fill();
    sim.ring.clear();
    sim.sch.requeue_all();
    const SchedulerStats st = sim.sch.stats();
    EXPECT_EQ(st.blocks_swa_free, st.blocks_swa_total);
  }
  sim.run();
  ref.run();
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_TRUE(sim.idle());
  EXPECT_EQ(sim.out, ref.out);
  EXPECT_GT(sim.sch.stats().requeued, 0);
}

}  // namespace
}  // namespace kvasir::test
