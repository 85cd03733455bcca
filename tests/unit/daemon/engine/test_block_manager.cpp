// The block manager: all-or-nothing growth, release, no leak under churn.
// (The scheduler's rules: test_scheduler.cpp.)
#include <random>
#include <set>
#include <gtest/gtest.h>

#include "daemon/engine/block_manager.h"

namespace kvasir {
namespace {

TEST(BlockManager, AllOrNothingAndRelease) {
  BlockManager bm(4, 16);
  std::vector<int32_t> a, b;
  EXPECT_EQ(bm.blocks_for(1), 1);
  EXPECT_EQ(bm.blocks_for(16), 1);
  EXPECT_EQ(bm.blocks_for(17), 2);
  EXPECT_TRUE(bm.ensure(a, 40));  // 3 blocks
  EXPECT_EQ(a.size(), 3u);
  EXPECT_FALSE(bm.ensure(b, 20));  // needs 2, 1 left: nothing taken
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(bm.free(), 1);
  bm.release(a);
  EXPECT_EQ(bm.free(), 4);
  EXPECT_TRUE(bm.ensure(b, 64));
  std::set<int32_t> ids(b.begin(), b.end());
  EXPECT_EQ(ids.size(), 4u);
}

// 100,000 random operations of the kinds the scheduler performs: grow a
// table (a decode or a chunk), release it (a finish), release a table
// mid-way (a preemption, then a regrowth from zero). Block ids must never be
// shared between tables and the free count must return to the start.
TEST(BlockManager, NoLeakAfterRandomAllocateFreePreempt) {
  BlockManager bm(64, 16);
  std::mt19937 rng(12345);
  std::vector<std::vector<int32_t>> tables(24);
  std::vector<int64_t> tokens(tables.size(), 0);
  for (int op = 0; op < 100000; ++op) {
    const size_t i = rng() % tables.size();
    switch (rng() % 4) {
      case 0:
      case 1: {  // grow by a decode or a chunk: all or nothing
        const int64_t want = tokens[i] + 1 + (rng() % 2 ? 0 : int64_t(rng() % 40));
        const int32_t before = bm.free();
        const size_t had = tables[i].size();
        if (bm.ensure(tables[i], want)) {
          tokens[i] = want;
          ASSERT_EQ(tables[i].size(), size_t(bm.blocks_for(want)));
          ASSERT_EQ(before - bm.free(), int32_t(tables[i].size() - had));
        } else {
          ASSERT_EQ(tables[i].size(), had);
          ASSERT_EQ(bm.free(), before);
        }
        break;
      }
      case 2:  // finish
      case 3:  // preempt (the same release; the table regrows from zero)
        bm.release(tables[i]);
        tokens[i] = 0;
        break;
    }
    if (op % 1000 == 0) {
      std::set<int32_t> ids;
      size_t n = 0;
      for (auto& t : tables) {
        ids.insert(t.begin(), t.end());
        n += t.size();
      }
      ASSERT_EQ(ids.size(), n) << "a block is in two tables";
      ASSERT_EQ(int32_t(n) + bm.free(), bm.total());
    }
  }
  for (auto& t : tables) bm.release(t);
  EXPECT_EQ(bm.free(), bm.total());
}

}  // namespace
}  // namespace kvasir
