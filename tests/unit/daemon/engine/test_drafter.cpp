// The prompt-lookup drafter (daemon/engine/drafter.h): the longest n-gram
// ending the sequence, its most recent earlier occurrence, up to k tokens.
#include <gtest/gtest.h>

#include <vector>

#include "base/check.h"
#include "daemon/engine/drafter.h"

namespace kvasir {
namespace {

using V = std::vector<int32_t>;

TEST(NgramDrafter, ProposesWhatFollowedTheLongestMatch) {
  NgramDrafter d(1, 3);
  // "2 3" ends the sequence; "1 2 3" (n = 3) occurred at 0: 4 5 6 followed.
  EXPECT_EQ(d.propose(V{1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 3), (V{4, 5, 6}));
  EXPECT_EQ(d.propose(V{1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 2), (V{4, 5}));
  // Only n = 1 matches ("3" at 2), though a longer n-gram is allowed.
  EXPECT_EQ(d.propose(V{1, 2, 3, 4, 5, 7, 3}, 4), (V{4, 5, 7, 3}));
}

TEST(NgramDrafter, TheLongerMatchWinsOverAMoreRecentShorterOne) {
  NgramDrafter d(1, 2);
  // "8 9" ends it: "9" alone most recently at 4 (then 7), "8 9" at 0 (then 5).
  EXPECT_EQ(d.propose(V{8, 9, 5, 6, 9, 7, 8, 9}, 1), (V{5}));
}

TEST(NgramDrafter, TheMostRecentOccurrenceWins) {
  NgramDrafter d(2, 2);
  EXPECT_EQ(d.propose(V{1, 2, 10, 11, 1, 2, 20, 21, 1, 2}, 2), (V{20, 21}));
}

TEST(NgramDrafter, ProposalsStopAtTheSequencesEnd) {
  NgramDrafter d(2, 2);
  // "7 7" ends it and occurs earlier only at 0: one 7 follows it.
  EXPECT_EQ(d.propose(V{7, 7, 7}, 4), (V{7}));
}

TEST(NgramDrafter, NothingBelowTheMinimumOrWithoutAMatch) {
  NgramDrafter d(2, 3);
  EXPECT_TRUE(d.propose(V{1, 2, 3, 4, 5, 3}, 4).empty());  // only "3" repeats
  EXPECT_TRUE(d.propose(V{1, 2, 3}, 4).empty());
  EXPECT_TRUE(d.propose(V{}, 4).empty());
  EXPECT_TRUE(d.propose(V{1, 2, 1, 2}, 0).empty());
}

TEST(NgramDrafter, MethodsParseAndMakeTheirDrafter) {
  EXPECT_EQ(parse_draft_method("ngram"), DraftMethod::kNgram);
  EXPECT_EQ(parse_draft_method("none"), DraftMethod::kNone);
  EXPECT_FALSE(parse_draft_method("suffix").has_value());
  SpecLimits s;
  EXPECT_EQ(make_drafter(s), nullptr);
  s.method = DraftMethod::kNgram;
  ASSERT_NE(make_drafter(s), nullptr);
  EXPECT_STREQ(make_drafter(s)->name(), "ngram");
  EXPECT_THROW(NgramDrafter(3, 2), Error);
}

}  // namespace
}  // namespace kvasir
