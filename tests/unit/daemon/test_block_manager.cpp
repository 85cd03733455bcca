// The block manager and the minimal scheduler's rules.
#include <numeric>
#include <set>
#include <gtest/gtest.h>

#include "daemon/block_manager.h"
#include "daemon/scheduler_min.h"

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

std::unique_ptr<Sequence> seq(RequestId id, int prompt, int max_new) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->tokens.assign(size_t(prompt), 1);
  s->n_prompt = prompt;
  s->req.max_tokens = max_new;
  return s;
}

TEST(MinScheduler, DecodeNeverInTwoBatchesAndLimitsHold) {
  BlockManager bm(100, 16);
  MinScheduler sch(SchedLimits{4, 32, 16, 256});
  std::deque<Sequence*> waiting;
  std::vector<Sequence*> running;
  std::vector<std::unique_ptr<Sequence>> all;
  for (int i = 0; i < 6; ++i) {
    all.push_back(seq(RequestId(i + 1), 5 + i, 4));
    waiting.push_back(all.back().get());
  }
  auto b1 = sch.next(waiting, running, bm);
  int tokens = 0;
  for (auto& r : b1) tokens += r.n_tokens;
  EXPECT_LE(int(b1.size()), 4);
  EXPECT_LE(tokens, 32);
  for (auto& r : b1) EXPECT_TRUE(r.sample && r.seq->awaiting);
  // Nothing of b1's sequences may go again until their tokens come back.
  auto b2 = sch.next(waiting, running, bm);
  for (auto& r2 : b2)
    for (auto& r1 : b1) EXPECT_NE(r2.seq, r1.seq);
  // A token comes back: the sequence decodes one token at its last position.
  Sequence* s = b1[0].seq;
  s->tokens.push_back(42);
  s->awaiting = false;
  auto b3 = sch.next(waiting, running, bm);
  ASSERT_FALSE(b3.empty());
  EXPECT_EQ(b3[0].seq, s);
  EXPECT_EQ(b3[0].n_tokens, 1);
  EXPECT_EQ(b3[0].pos0, int32_t(s->tokens.size()) - 1);
}

TEST(MinScheduler, LongPromptGoesInChunksThatFollowEachOther) {
  BlockManager bm(100, 16);
  MinScheduler sch(SchedLimits{4, 32, 16, 256});
  std::deque<Sequence*> waiting;
  std::vector<Sequence*> running;
  auto s = seq(1, 40, 2);
  waiting.push_back(s.get());
  std::vector<int32_t> chunks;
  for (int i = 0; i < 3; ++i) {
    auto b = sch.next(waiting, running, bm);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(b[0].pos0, std::accumulate(chunks.begin(), chunks.end(), 0));
    chunks.push_back(b[0].n_tokens);
    EXPECT_EQ(b[0].sample, i == 2);
  }
  EXPECT_EQ(chunks, (std::vector<int32_t>{16, 16, 8}));
  EXPECT_TRUE(sch.next(waiting, running, bm).empty());  // awaiting its token
}

TEST(MinScheduler, AdmissionWaitsForBlocks) {
  BlockManager bm(3, 16);
  MinScheduler sch(SchedLimits{4, 64, 64, 256});
  std::deque<Sequence*> waiting;
  std::vector<Sequence*> running;
  auto a = seq(1, 20, 10), b = seq(2, 20, 10);  // 2 blocks each
  waiting.push_back(a.get());
  waiting.push_back(b.get());
  auto b1 = sch.next(waiting, running, bm);
  EXPECT_EQ(b1.size(), 1u);
  EXPECT_EQ(waiting.size(), 1u);
  bm.release(a->table);
  running.clear();
  auto b2 = sch.next(waiting, running, bm);
  ASSERT_EQ(b2.size(), 1u);
  EXPECT_EQ(b2[0].seq, b.get());
}

}  // namespace
}  // namespace kvasir
