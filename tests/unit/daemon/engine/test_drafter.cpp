// The drafters: prompt lookup (daemon/engine/drafter.h: the longest n-gram
// ending the sequence, its most recent earlier occurrence, up to k tokens)
// and suffix matching (suffix_drafter.h: the longest suffix over the
// sequence and the outputs it learnt, the most frequent continuation while
// its probability holds).
#include <gtest/gtest.h>

#include <vector>

#include "base/check.h"
#include "daemon/engine/drafter.h"
#include "daemon/engine/suffix_drafter.h"

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
  EXPECT_EQ(parse_draft_method("suffix"), DraftMethod::kSuffix);
  EXPECT_FALSE(parse_draft_method("eagle").has_value());
  SpecLimits s;
  EXPECT_EQ(make_drafter(s), nullptr);
  s.method = DraftMethod::kNgram;
  ASSERT_NE(make_drafter(s), nullptr);
  EXPECT_STREQ(make_drafter(s)->name(), "ngram");
  EXPECT_THROW(NgramDrafter(3, 2), Error);
  s.method = DraftMethod::kSuffix;
  ASSERT_NE(make_drafter(s), nullptr);
  EXPECT_STREQ(make_drafter(s)->name(), "suffix");
}

SuffixLimits suffix(double min_prob = 0.1, int32_t cache = 8, int32_t depth = 24) {
  return SuffixLimits{depth, min_prob, cache};
}

TEST(SuffixDrafter, AloneItFollowsTheLongestMatchLikePromptLookup) {
  SuffixDrafter d(suffix());
  // "1 2 3" ends the sequence and occurred at 0: 4 5 6 followed (one
  // occurrence: probability 1 all along).
  EXPECT_EQ(d.propose(V{1, 2, 3, 4, 5, 6, 9, 1, 2, 3}, 3), (V{4, 5, 6}));
  // A longer match wins over a more recent shorter one: "8 9" at 0 (then
  // 5), "9" alone at 4 does not count (two tokens at least).
  EXPECT_EQ(d.propose(V{8, 9, 5, 6, 9, 7, 8, 9}, 1), (V{5}));
  EXPECT_TRUE(d.propose(V{1, 2, 3, 4, 5, 3}, 4).empty());  // only "3" repeats
  EXPECT_TRUE(d.propose(V{7}, 4).empty());
  EXPECT_TRUE(d.propose(V{1, 2, 1, 2}, 0).empty());
}

TEST(SuffixDrafter, TheMostFrequentContinuationWhileItsProbabilityHolds) {
  // "1 2" occurred three times, each after another token (so each matches
  // the suffix "32 1 2" by two tokens): followed by 5 twice, by 6 once
  // (p = 2/3); both 5s then continued with 7 (p = 1), then 8 and 9 split
  // (1/2).
  const V seq{1, 2, 5, 7, 8, 30, 1, 2, 6, 31, 1, 2, 5, 7, 9, 32, 1, 2};
  EXPECT_EQ(SuffixDrafter(suffix(0.5)).propose(seq, 8), (V{5, 7}));
  // A lower threshold goes on past the fork (2/3 x 1/2 = 1/3 >= 0.3); the
  // tie goes to the latest occurrence (9), which the sequence's end stops.
  EXPECT_EQ(SuffixDrafter(suffix(0.3)).propose(seq, 8), (V{5, 7, 9, 32, 1, 2}));
  EXPECT_EQ(SuffixDrafter(suffix(0.3)).propose(seq, 2), (V{5, 7}));
  // Above 2/3 nothing is drafted.
  EXPECT_TRUE(SuffixDrafter(suffix(0.7)).propose(seq, 8).empty());
  // The longest match decides before frequency: "0 1 2" matches one of
  // three occurrences by three tokens, and only it counts.
  EXPECT_EQ(SuffixDrafter(suffix(0.5))
                .propose(V{1, 2, 5, 7, 8, 0, 1, 2, 6, 31, 1, 2, 5, 7, 9, 0, 1, 2}, 2),
            (V{6, 31}));
}

TEST(SuffixDrafter, LearntOutputsDraftForOtherRequestsOfTheSameSalt) {
  SuffixDrafter d(suffix());
  // A finished request: prompt 100 101 102, output 3 4 5 6 7.
  d.learn(V{100, 101, 102, 3, 4, 5, 6, 7}, 3, "");
  EXPECT_EQ(d.cached(), 1u);
  // Another request whose tokens end with "102 3 4" (the cached entry keeps
  // the prompt's last tokens, so its first output tokens are found too).
  EXPECT_EQ(d.propose(V{50, 101, 102, 3}, 4), (V{4, 5, 6, 7}));
  EXPECT_EQ(d.propose(V{50, 5, 6}, 4), (V{7}));
  // Another salt sees none of it; a request salted "a" learns for "a" only.
  EXPECT_TRUE(d.propose(V{50, 101, 102, 3}, 4, "a").empty());
  d.learn(V{9, 9, 3, 4, 5, 1}, 2, "a");
  EXPECT_EQ(d.propose(V{50, 9, 3}, 4, "a"), (V{4, 5, 1}));
  EXPECT_TRUE(d.propose(V{50, 9, 3}, 4).empty());
  EXPECT_EQ(d.propose(V{50, 101, 102, 3}, 4), (V{4, 5, 6, 7}));
  // A sequence that ended without output teaches nothing.
  d.learn(V{1, 2, 3}, 3, "");
  EXPECT_EQ(d.cached(), 2u);
}

TEST(SuffixDrafter, TheSequencesOwnOccurrenceWinsATieWithTheCache) {
  SuffixDrafter d(suffix(0.1));
  d.learn(V{6, 1, 2, 8, 8}, 1, "");
  // "1 2" once in the sequence (then 5) and once cached (then 8): p = 1/2
  // each; the sequence's own goes first.
  EXPECT_EQ(d.propose(V{1, 2, 5, 0, 1, 2}, 1), (V{5}));
  // A longer match in the cache beats the sequence's shorter one.
  d.learn(V{4, 0, 1, 2, 9}, 0, "");
  EXPECT_EQ(d.propose(V{7, 1, 2, 5, 0, 1, 2}, 1), (V{9}));
}

TEST(SuffixDrafter, TheCacheKeepsTheNewestEntries) {
  SuffixDrafter d(suffix(0.1, 2));
  d.learn(V{1, 2, 3}, 0, "");
  d.learn(V{1, 2, 4}, 0, "");
  d.learn(V{1, 2, 4}, 0, "");
  EXPECT_EQ(d.cached(), 2u);
  EXPECT_EQ(d.propose(V{9, 1, 2}, 1), (V{4}));  // the entry with 3 was dropped
  SuffixDrafter none(suffix(0.1, 0));
  none.learn(V{1, 2, 3}, 0, "");
  EXPECT_EQ(none.cached(), 0u);
  EXPECT_TRUE(none.propose(V{9, 1, 2}, 1).empty());
  EXPECT_THROW(SuffixDrafter(suffix(0.0)), Error);
  EXPECT_THROW(SuffixDrafter(suffix(0.1, 8, 1)), Error);
}

}  // namespace
}  // namespace kvasir
