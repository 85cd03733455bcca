// daemon/engine/suffix_drafter.h — the "suffix" drafter (SuffixDecoding,
// Oliaro et al. 2024; vLLM's method "suffix"): drafts from the request's own
// tokens and from a bounded cache of recent outputs of the same daemon,
// as long as the continuation stays likely.
//
// A proposal: the longest suffix of the sequence (2 to max_depth tokens)
// that occurs in the sources — the sequence itself (where a token follows
// the occurrence) and the cached outputs that share its cache salt — is
// matched; among its occurrences the most frequent next token is drafted
// with its empirical probability (count / occurrences that continue), the
// occurrences that did not continue with it are dropped, and so on while
// the product of the probabilities stays at or above min_prob and fewer
// than k are drafted. A tie goes to the sequence's own latest occurrence,
// then to the most recent cached output. Where prompt lookup copies the
// latest occurrence blindly, this one drafts long only where the sources
// agree (an agent loop re-emitting a tool call) and stops at a fork.
//
// The cache (learn): each finished sequence's output, with the max_depth
// prompt tokens before it (so that its first tokens are found after the
// chat template's assistant header), keyed by its cache salt's hash — a
// request never drafts from another salt's outputs, as it never reuses its
// prefix blocks; at most cache_requests entries of at most kMaxEntryTokens
// each, the oldest dropped first. Drafts change only how many tokens a step
// emits, never which (drafter.h): what the cache holds cannot change an
// output.
//
// Cost per proposal: a scan of the sequence (as prompt lookup's) plus a
// binary search per cached output of the salt. Memory: 20 bytes per cached
// token (the token and its index entry), at most cache_requests x
// (kMaxEntryTokens + max_depth) of them: ~21 MB at the defaults. Engine
// thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/engine/drafter.h"

namespace kvasir {

struct SuffixLimits {
  int32_t max_depth = 24;        // the longest suffix matched (tokens)
  double min_prob = 0.1;         // stop drafting below this joint probability
  int32_t cache_requests = 256;  // finished outputs kept (0: the sequence alone)
};

class SuffixDrafter final : public Drafter {
 public:
  static constexpr int64_t kMaxEntryTokens = 4096;  // a cached output's last tokens

  explicit SuffixDrafter(const SuffixLimits& lim);
  const char* name() const override { return "suffix"; }
  using Drafter::propose;
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int32_t k,
                               std::string_view salt) const override;
  void learn(std::span<const int32_t> tokens, int64_t n_prompt, std::string_view salt) override;

  size_t cached() const { return cache_.size(); }

 private:
  struct Entry {
    uint64_t salt = 0;
    std::vector<int32_t> tokens;  // [n]
    // (bigram, the position after it) for every position 2..n-1 that a
    // token follows, sorted: 16 bytes a token.
    std::vector<std::pair<uint64_t, int32_t>> at;
  };
  struct Occ {
    const std::vector<int32_t>* src;  // or null: the sequence itself
    int64_t pos;                      // the first token after the match
    int64_t order;                    // tie-break: lower wins
  };
  std::vector<Occ> longest_matches(std::span<const int32_t> seq, uint64_t salt) const;

  SuffixLimits lim_;
  std::deque<Entry> cache_;  // oldest first
};

}  // namespace kvasir
