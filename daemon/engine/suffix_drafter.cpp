// daemon/engine/suffix_drafter.cpp — see suffix_drafter.h.
#include "daemon/engine/suffix_drafter.h"

#include <algorithm>
#include <climits>
#include <unordered_map>

#include "base/check.h"
#include "daemon/engine/block_pool.h"

namespace kvasir {
namespace {

uint64_t bigram(int32_t a, int32_t b) {
  return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
}

}  // namespace

SuffixDrafter::SuffixDrafter(const SuffixLimits& lim) : lim_(lim) {
  KV_CHECK(
      lim_.max_depth >= 2 && lim_.min_prob > 0 && lim_.min_prob <= 1 && lim_.cache_requests >= 0,
      "suffix drafter: max_depth {}, min_prob {}, cache_requests {}", lim_.max_depth, lim_.min_prob,
      lim_.cache_requests);
}

// Every occurrence of the longest suffix of seq (2..max_depth tokens) that
// some token follows, in tie-break order: the sequence's own, latest first,
// then the cached outputs of the salt, newest first.
std::vector<SuffixDrafter::Occ> SuffixDrafter::longest_matches(std::span<const int32_t> seq,
                                                               uint64_t salt) const {
  const int64_t L = int64_t(seq.size());
  std::vector<Occ> out;
  if (L < 2) return out;
  const int32_t a = seq[size_t(L - 2)], b = seq[size_t(L - 1)];
  int64_t best = 0, order = 0;
  // src[p-2..p) equals the last two tokens; p < n: a token follows.
  auto consider = [&](const int32_t* src, const std::vector<int32_t>* owner, int64_t p) {
    int64_t m = 2;
    while (m < lim_.max_depth && p - m - 1 >= 0 && src[p - m - 1] == seq[size_t(L - m - 1)]) ++m;
    if (m > best) {
      best = m;
      out.clear();
    }
    if (m == best) out.push_back(Occ{owner, p, order});
    ++order;
  };
  for (int64_t p = L - 1; p >= 2; --p)
    if (seq[size_t(p - 2)] == a && seq[size_t(p - 1)] == b) consider(seq.data(), nullptr, p);
  const uint64_t key = bigram(a, b);
  for (auto e = cache_.rbegin(); e != cache_.rend(); ++e) {
    if (e->salt != salt) continue;
    // The bigram's positions, latest first.
    auto lo = std::lower_bound(e->at.begin(), e->at.end(), std::pair<uint64_t, int32_t>(key, 0));
    auto hi = std::lower_bound(lo, e->at.end(), std::pair<uint64_t, int32_t>(key, INT32_MAX));
    while (hi != lo) consider(e->tokens.data(), &e->tokens, (--hi)->second);
  }
  return out;
}

std::vector<int32_t> SuffixDrafter::propose(std::span<const int32_t> tokens, int32_t k,
                                            std::string_view salt) const {
  std::vector<int32_t> draft;
  if (k <= 0) return draft;
  std::vector<Occ> occ = longest_matches(tokens, salt_hash(salt));
  const int64_t L = int64_t(tokens.size());
  auto next = [&](const Occ& o, int64_t i) -> int32_t {  // -1: the source ends
    const int64_t at = o.pos + i;
    if (o.src == nullptr) return at < L ? tokens[size_t(at)] : -1;
    return at < int64_t(o.src->size()) ? (*o.src)[size_t(at)] : -1;
  };
  double prob = 1.0;
  std::unordered_map<int32_t, int32_t> count;
  for (int64_t i = 0; i < k && !occ.empty(); ++i) {
    count.clear();
    int32_t total = 0, best = -1, best_n = 0;
    for (const Occ& o : occ)
      if (const int32_t t = next(o, i); t >= 0) ++total, best_n = std::max(best_n, ++count[t]);
    if (total == 0) break;
    for (const Occ& o : occ) {  // of the most frequent, the first in tie-break order
      const int32_t t = next(o, i);
      if (t >= 0 && count[t] == best_n) {
        best = t;
        break;
      }
    }
    prob *= double(best_n) / double(total);
    if (prob < lim_.min_prob) break;
    draft.push_back(best);
    std::erase_if(occ, [&](const Occ& o) { return next(o, i) != best; });
  }
  return draft;
}

void SuffixDrafter::learn(std::span<const int32_t> tokens, int64_t n_prompt,
                          std::string_view salt) {
  const int64_t n = int64_t(tokens.size());
  if (lim_.cache_requests == 0 || n_prompt < 0 || n <= n_prompt) return;
  const int64_t from = std::max<int64_t>({0, n_prompt - lim_.max_depth, n - kMaxEntryTokens});
  Entry e;
  e.salt = salt_hash(salt);
  e.tokens.assign(tokens.begin() + from, tokens.end());
  const int64_t m = int64_t(e.tokens.size());
  e.at.reserve(size_t(std::max<int64_t>(0, m - 2)));
  for (int64_t p = 2; p < m; ++p)
    e.at.emplace_back(bigram(e.tokens[size_t(p - 2)], e.tokens[size_t(p - 1)]), int32_t(p));
  std::sort(e.at.begin(), e.at.end());
  cache_.push_back(std::move(e));
  while (int64_t(cache_.size()) > lim_.cache_requests) cache_.pop_front();
}

}  // namespace kvasir
