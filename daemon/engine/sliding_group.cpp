#include "daemon/engine/sliding_group.h"

#include <algorithm>

#include "base/check.h"

namespace kvasir {

SlidingGroup::SlidingGroup(int32_t window, int32_t n_blocks, int32_t block_size, bool caching)
    : window_(window > 0 && n_blocks > 0 ? window : 0),
      caching_(caching),
      pool_(window_ > 0 ? n_blocks : 0, block_size) {}

int32_t SlidingGroup::max_held(int32_t window, int32_t block_size, int32_t max_row) {
  return int32_t((int64_t(window) - 1 + max_row + block_size - 1) / block_size) + 1;
}

int32_t SlidingGroup::first_needed(int64_t pos) const {
  return int32_t(std::max<int64_t>(0, pos - window_ + 1) / block_size());
}

int32_t SlidingGroup::need(const std::vector<int32_t>& table, int64_t tokens) const {
  if (!on()) return 0;
  const int64_t want = (tokens + block_size() - 1) / block_size();
  return int32_t(std::max<int64_t>(0, want - int64_t(table.size())));
}

bool SlidingGroup::ensure(std::vector<int32_t>& table, int64_t tokens) {
  const int32_t n = need(table, tokens);
  if (n == 0) return true;
  if (n > pool_.available()) return false;
  for (int32_t i = 0; i < n; ++i) table.push_back(pool_.take());
  return true;
}

int32_t SlidingGroup::slide(std::vector<int32_t>& table, int64_t next) {
  if (!on()) return 0;
  const int32_t first = std::min<int32_t>(first_needed(next), int32_t(table.size()));
  int32_t n = 0;
  // From the window's edge down: entries below an unmapped one are unmapped.
  for (int32_t i = first - 1; i >= 0 && table[size_t(i)] != kUnmapped; --i, ++n) {
    pool_.unref(table[size_t(i)]);
    table[size_t(i)] = kUnmapped;
  }
  return n;
}

void SlidingGroup::trim(std::vector<int32_t>& table, int64_t tokens) {
  if (!on()) return;
  const int64_t keep = (tokens + block_size() - 1) / block_size();
  while (int64_t(table.size()) > keep) {
    KV_CHECK(table.back() != kUnmapped, "sliding group: trimming into the unmapped entries");
    // Cached blocks are full of accepted positions, all below `tokens`.
    KV_CHECK(!pool_.is_cached(table.back()), "sliding group: trimming cached block {}",
             table.back());
    pool_.unref(table.back());
    table.pop_back();
  }
}

void SlidingGroup::cache(int32_t b, const BlockPool::Link& key, const int32_t* tokens,
                         uint64_t writer) {
  if (!caching() || b == kUnmapped || pool_.is_cached(b)) return;
  pool_.cache_keyed(b, key, tokens, writer);
}

// In table order: cached blocks become evictable oldest position first. A
// hit needs the window's blocks just before its end, so the blocks furthest
// from any prompt's end go first.
void SlidingGroup::release(std::vector<int32_t>& table) {
  for (int32_t b : table)
    if (b != kUnmapped) pool_.unref(b);
  table.clear();
}

int32_t SlidingGroup::held(const std::vector<int32_t>& table) {
  return int32_t(std::count_if(table.begin(), table.end(), [](int32_t b) { return b >= 0; }));
}

}  // namespace kvasir
