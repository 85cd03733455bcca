// The expert-load figures (base/expert_load.h): how many counters a model's
// experts take (folded past 256), and the imbalance, max / mean over every
// expert with the idle ones included.
#include <gtest/gtest.h>

#include <vector>

#include "base/expert_load.h"

namespace kvasir {
namespace {

TEST(ExpertLoad, SlotsFoldPastTheCap) {
  EXPECT_EQ(expert_slots(0), 0);
  EXPECT_EQ(experts_per_slot(8), 1);
  EXPECT_EQ(expert_slots(8), 8);
  EXPECT_EQ(expert_slots(256), 256);
  EXPECT_EQ(experts_per_slot(257), 2);
  EXPECT_EQ(expert_slots(257), 129);
  EXPECT_EQ(experts_per_slot(384), 2);  // Kimi K2's 384: pairs
  EXPECT_EQ(expert_slots(384), 192);
  EXPECT_EQ(experts_per_slot(1024), 4);
  EXPECT_EQ(expert_slots(1024), 256);
  for (int n = 1; n <= 1024; ++n) {
    ASSERT_LE(expert_slots(n), kMaxExpertsShown) << n;
    ASSERT_GE(expert_slots(n) * experts_per_slot(n), n) << n;  // every expert has a slot
  }
}

TEST(ExpertLoad, ImbalanceIsMaxOverMeanOfEveryExpert) {
  EXPECT_EQ(expert_imbalance(std::vector<uint64_t>{}), 0.0);
  EXPECT_EQ(expert_imbalance(std::vector<uint64_t>{0, 0, 0}), 0.0);            // nothing routed
  EXPECT_DOUBLE_EQ(expert_imbalance(std::vector<uint64_t>{5, 5, 5, 5}), 1.0);  // even
  // One expert takes all: the expert count. The idle ones count in the mean.
  EXPECT_DOUBLE_EQ(expert_imbalance(std::vector<uint64_t>{0, 12, 0, 0, 0, 0, 0, 0}), 8.0);
  // 8 experts, 32 routed, mean 4, max 10.
  EXPECT_DOUBLE_EQ(expert_imbalance(std::vector<uint64_t>{10, 6, 4, 4, 4, 2, 2, 0}), 2.5);
}

}  // namespace
}  // namespace kvasir
