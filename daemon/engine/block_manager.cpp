#include "daemon/engine/block_manager.h"

#include <algorithm>
#include <optional>

#include "base/check.h"

namespace kvasir {

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size, bool caching)
    : pool_(n_blocks, block_size), caching_(caching) {}

PrefixHit BlockManager::find_prefix(const std::vector<int32_t>& tokens,
                                    std::string_view salt) const {
  PrefixHit hit;
  if (!caching_ || tokens.empty()) return hit;
  const int32_t bs = block_size();
  // The last token is always computed: at most (n - 1) / bs whole blocks.
  const int64_t max_blocks = (int64_t(tokens.size()) - 1) / bs;
  for (int64_t i = 0; i < max_blocks; ++i) {
    auto link = pool_.find(hit.blocks.empty() ? nullptr : &hit.last, salt, tokens.data() + i * bs);
    if (!link) break;
    hit.blocks.push_back(link->block);
    if (pool_.refs(link->block) == 0) hit.n_evictable++;
    hit.last = *link;
    hit.links.push_back(*link);
  }
  return hit;
}

void BlockManager::reuse(std::vector<int32_t>& table, const PrefixHit& hit, CacheCursor& cur) {
  KV_CHECK(table.empty(), "block manager: a prefix hit for a table that holds blocks");
  for (int32_t b : hit.blocks) {
    pool_.ref(b);
    table.push_back(b);
  }
  cur = CacheCursor{};
  cur.n_blocks = int32_t(hit.blocks.size());
  cur.last = hit.last;
}

bool BlockManager::ensure(std::vector<int32_t>& table, int64_t tokens) {
  const int32_t need = blocks_for(tokens) - int32_t(table.size());
  if (need <= 0) return true;
  if (need > free()) return false;
  for (int32_t i = 0; i < need; ++i) table.push_back(pool_.take());
  return true;
}

void BlockManager::trim(std::vector<int32_t>& table, int64_t tokens) {
  while (int32_t(table.size()) > blocks_for(tokens)) {
    KV_CHECK(!pool_.is_cached(table.back()), "block manager: trimming cached block {}",
             table.back());
    pool_.unref(table.back());
    table.pop_back();
  }
}

void BlockManager::release(std::vector<int32_t>& table) {
  // Last block first: the evictable list then holds a chain's leaf as
  // older than its parent, and eviction takes leaves first. (Without
  // caching, in table order, as ever.)
  if (caching_)
    for (auto it = table.rbegin(); it != table.rend(); ++it) pool_.unref(*it);
  else
    for (int32_t b : table) pool_.unref(b);
  table.clear();
}

void BlockManager::cache_full_blocks(const std::vector<int32_t>& table,
                                     const std::vector<int32_t>& tokens, int64_t n_written,
                                     std::string_view salt, uint64_t writer, CacheCursor& cur,
                                     const OnLink& on_link) {
  if (!caching_ || cur.stopped) return;
  const int32_t bs = block_size();
  const int64_t full = std::min<int64_t>(n_written / bs, int64_t(table.size()));
  for (int64_t i = cur.n_blocks; i < full; ++i) {
    const int32_t b = table[size_t(i)];
    std::optional<BlockPool::Link> link;
    if (pool_.is_cached(b))  // reused, or cached by this sequence before a preemption
      link = pool_.find(i == 0 ? nullptr : &cur.last, salt, tokens.data() + i * bs);
    else
      link = pool_.cache(b, i == 0 ? nullptr : &cur.last, salt, tokens.data() + i * bs, writer);
    if (!link) {
      cur.stopped = true;  // its parent was uncached, or a collision: cache no more of it
      return;
    }
    cur.last = *link;
    cur.n_blocks = int32_t(i + 1);
    if (on_link) on_link(i, *link);
  }
}

bool BlockManager::reads_pending(const std::vector<int32_t>& table, int32_t n_shared,
                                 uint64_t from) const {
  for (int32_t i = 0; i < n_shared && i < int32_t(table.size()); ++i)
    if (pool_.pending(table[size_t(i)], from)) return true;
  return false;
}

}  // namespace kvasir
