// A MoE stage's expert load in its StageShared slot (ipc/segment.h,
// set_stage_experts / add_stage_routed / read_stage_experts): batches add
// up per expert, more than 256 experts fold into consecutive ranges with
// the sum kept, and what another process left there is bounded.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "ipc/segment.h"

namespace kvasir::ipc {
namespace {

TEST(StageExperts, DenseUntilSaid) {
  auto st = std::make_unique<StageShared>();
  EXPECT_EQ(read_stage_experts(*st).n_experts, 0);
  EXPECT_TRUE(read_stage_experts(*st).routed.empty());
  add_stage_routed(*st, {});  // a dense stage's batch: nothing
  EXPECT_TRUE(read_stage_experts(*st).routed.empty());
}

TEST(StageExperts, BatchesAddUpPerExpert) {
  auto st = std::make_unique<StageShared>();
  set_stage_experts(*st, 6);
  add_stage_routed(*st, std::vector<uint64_t>{4, 1, 0, 2, 0, 1});
  add_stage_routed(*st, std::vector<uint64_t>{2, 1, 0, 1, 0, 0});
  const ExpertLoad l = read_stage_experts(*st);
  EXPECT_EQ(l.n_experts, 6);
  EXPECT_EQ(l.per_slot, 1);
  EXPECT_EQ(l.routed, (std::vector<uint64_t>{6, 2, 0, 3, 0, 1}));
  // A batch of another width is a bug of the stage, refused.
  EXPECT_THROW(add_stage_routed(*st, std::vector<uint64_t>{1, 2}), Error);
}

TEST(StageExperts, MoreThanTheCapFold) {
  auto st = std::make_unique<StageShared>();
  set_stage_experts(*st, 300);  // pairs: 150 counters
  std::vector<uint64_t> batch(300, 0);
  batch[0] = 3, batch[1] = 4, batch[299] = 7, batch[17] = 1;
  add_stage_routed(*st, batch);
  const ExpertLoad l = read_stage_experts(*st);
  EXPECT_EQ(l.per_slot, 2);
  ASSERT_EQ(l.routed.size(), 150u);
  EXPECT_EQ(l.routed[0], 7u);
  EXPECT_EQ(l.routed[8], 1u);
  EXPECT_EQ(l.routed[149], 7u);
  EXPECT_EQ(std::accumulate(l.routed.begin(), l.routed.end(), uint64_t(0)), 15u);
  EXPECT_THROW(set_stage_experts(*st, 1025), Error);  // past what a model may have
  EXPECT_THROW(set_stage_experts(*st, -1), Error);
}

TEST(StageExperts, ABadCountInTheSegmentReadsAsNone) {
  auto st = std::make_unique<StageShared>();
  st->n_experts.store(5000);  // another process's bad write
  EXPECT_EQ(read_stage_experts(*st).n_experts, 0);
  EXPECT_TRUE(read_stage_experts(*st).routed.empty());
}

}  // namespace
}  // namespace kvasir::ipc
