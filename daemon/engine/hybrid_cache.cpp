#include "daemon/engine/hybrid_cache.h"

#include <algorithm>

#include "base/check.h"

namespace kvasir {

std::vector<int32_t> HybridCache::swa_found(const PrefixHit& full,
                                            const std::vector<int32_t>& tokens) const {
  const int32_t bs = swa_.block_size();
  std::vector<int32_t> found(full.blocks.size(), SlidingGroup::kUnmapped);
  for (size_t i = 0; i < found.size(); ++i)
    if (auto l = swa_.find(full.links[i], tokens.data() + int64_t(i) * bs)) found[i] = l->block;
  return found;
}

HybridHit HybridCache::find_prefix(const std::vector<int32_t>& tokens,
                                   std::string_view salt) const {
  HybridHit hit;
  hit.full = full_.find_prefix(tokens, salt);
  if (!swa_.on() || hit.full.blocks.empty()) return hit;
  const int32_t bs = swa_.block_size();
  const std::vector<int32_t> found = swa_found(hit.full, tokens);
  // The longest M whose row at M · bs finds its whole window cached.
  int32_t m = hit.n_blocks();
  for (; m > 0; --m) {
    const int32_t first = swa_.first_needed(int64_t(m) * bs);
    if (std::all_of(found.begin() + first, found.begin() + m,
                    [](int32_t b) { return b != SlidingGroup::kUnmapped; }))
      break;
  }
  PrefixHit& f = hit.full;
  f.blocks.resize(size_t(m));
  f.links.resize(size_t(m));
  f.last = m > 0 ? f.links.back() : BlockPool::Link{};
  f.n_evictable = int32_t(std::count_if(f.blocks.begin(), f.blocks.end(),
                                        [&](int32_t b) { return full_.pool().refs(b) == 0; }));
  if (m == 0) return hit;
  const int32_t first = swa_.first_needed(int64_t(m) * bs);
  hit.swa.assign(size_t(m), SlidingGroup::kUnmapped);
  for (int32_t i = first; i < m; ++i) {
    const int32_t b = found[size_t(i)];
    hit.swa[size_t(i)] = b;
    if (swa_.pool().refs(b) == 0) hit.swa_evictable++;
    hit.swa_writer = std::max(hit.swa_writer, swa_.pool().writer(b));
  }
  return hit;
}

void HybridCache::reuse(std::vector<int32_t>& table, std::vector<int32_t>& swa_table,
                        const HybridHit& hit, CacheCursor& cur) {
  KV_CHECK(swa_table.empty(), "hybrid cache: a prefix hit for a sliding table that holds blocks");
  full_.reuse(table, hit.full, cur);
  for (int32_t b : hit.swa) {
    if (b != SlidingGroup::kUnmapped) swa_.ref(b);
    swa_table.push_back(b);
  }
  cur.swa_writer = hit.swa_writer;
}

void HybridCache::cache_full_blocks(const std::vector<int32_t>& table,
                                    const std::vector<int32_t>& swa_table,
                                    const std::vector<int32_t>& tokens, int64_t n_written,
                                    std::string_view salt, uint64_t writer, CacheCursor& cur) {
  if (!swa_.caching()) {
    full_.cache_full_blocks(table, tokens, n_written, salt, writer, cur);
    return;
  }
  // Each entry the full chain passes is cached in the sliding group under
  // its link, if the window has not passed it yet (then it went back
  // uncached, and a hit needing it is shorter).
  const int32_t bs = swa_.block_size();
  full_.cache_full_blocks(
      table, tokens, n_written, salt, writer, cur, [&](int64_t i, const BlockPool::Link& link) {
        if (i < int64_t(swa_table.size()))
          swa_.cache(swa_table[size_t(i)], link, tokens.data() + i * bs, writer);
      });
}

void HybridCache::confirm(uint64_t batch) {
  full_.confirm(batch);
  if (swa_.caching()) swa_.confirm(batch);
}

int32_t HybridCache::drop_pending(uint64_t from) {
  return full_.drop_pending(from) + (swa_.caching() ? swa_.drop_pending(from) : 0);
}

bool HybridCache::reads_pending(const std::vector<int32_t>& table, int32_t n_shared,
                                const CacheCursor& cur, uint64_t from) const {
  // Batches come back in order: a writer >= from had not come back whole
  // when `from` failed, so what it wrote is dropped.
  return full_.reads_pending(table, n_shared, from) ||
         (cur.swa_writer != 0 && cur.swa_writer >= from);
}

int32_t HybridCache::drop_cache() {
  return full_.drop_cache() + (swa_.caching() ? swa_.drop_cache() : 0);
}

}  // namespace kvasir
