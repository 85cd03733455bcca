// daemon/engine/block_manager.h — the one owner of KV block ids (docs/architecture.md).
//
// Fixed-size blocks and a table per sequence (the table itself is kept by
// the sequence and travels with each batch). Every stage holds the same
// number of blocks, so one table serves all stages: a block id names the
// same positions in every stage's own layers.
//
// With prefix caching (docs/scheduler.md, "Prefix caching") full blocks are
// shared read-only between sequences whose token prefixes are equal. The
// shape is vLLM v1's KVCacheManager over its BlockPool (block_pool.h): the
// scheduler asks for a sequence's cached prefix and gets a small result
// (PrefixHit), takes it (reuse), grows the table with new blocks (ensure),
// publishes the blocks it fills (cache_full_blocks) and gives the table
// back (release). It never sees reference counts, the evictable list or
// the hash index, so those rules live in one place and are tested alone
// (tests/unit/daemon/engine/test_block_manager.cpp).
//
// Without caching the manager behaves as before: a stack of free ids.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "daemon/engine/block_pool.h"

namespace kvasir {

// A sequence's cached prefix, found by find_prefix: cached blocks for its
// positions [0, tokens()), in table order.
struct PrefixHit {
  std::vector<int32_t> blocks;
  // Of those, blocks nobody holds now (evictable): taking them uses up
  // free capacity, as new blocks would.
  int32_t n_evictable = 0;
  BlockPool::Link last;  // the chain's last link (when blocks is not empty)
  // [blocks.size()]: each block's link (what keys the sliding group's).
  std::vector<BlockPool::Link> links;
  int64_t tokens(int32_t block_size) const { return int64_t(blocks.size()) * block_size; }
};

// Where a sequence stands in its hash chain: its first n_blocks blocks are
// accounted for in the cache (reused, cached by it, or equal to a block
// cached by another sequence), `last` is the chain's link for them.
struct CacheCursor {
  int32_t n_blocks = 0;
  BlockPool::Link last;
  bool stopped = false;  // the chain broke (a link was uncached): cache nothing more
  // The latest batch still writing a sliding-group block its hit took (0:
  // none): those entries are unmapped once the window passes them, so the
  // table alone cannot tell later whether it read one (hybrid_cache.h).
  uint64_t swa_writer = 0;
};

class BlockManager {
 public:
  BlockManager(int32_t n_blocks, int32_t block_size, bool caching = false);

  int32_t blocks_for(int64_t tokens) const { return blocks_for(tokens, block_size()); }
  // The same for any block size: the bridge sizes a request before queuing
  // it, on the caller's thread, without the scheduler's block manager.
  static int32_t blocks_for(int64_t tokens, int32_t block_size) {
    return int32_t((tokens + block_size - 1) / block_size);
  }
  bool caching() const { return caching_; }

  // The longest cached run of whole blocks that starts `tokens` (under
  // `salt`), leaving at least the last token to compute: its logits are
  // needed, and it would be written into the last block. Nothing held yet.
  PrefixHit find_prefix(const std::vector<int32_t>& tokens, std::string_view salt) const;
  // Takes a hit as the start of an empty table (each block held once more),
  // and sets the cursor at its end.
  void reuse(std::vector<int32_t>& table, const PrefixHit& hit, CacheCursor& cur);

  // Grows `table` to cover positions [0, tokens) with new blocks (free
  // ones first, then evicted ones). All or nothing: false (table
  // unchanged) if the free and evictable blocks together are short.
  bool ensure(std::vector<int32_t>& table, int64_t tokens);
  // Gives back the blocks of `table` past those covering positions
  // [0, tokens) (speculative decoding: blocks only rejected drafts reached).
  // They must not be cached (a block is cached only once full of accepted
  // positions, and those lie below `tokens`).
  void trim(std::vector<int32_t>& table, int64_t tokens);
  // Gives back every block of `table` and clears it. Cached blocks stay
  // cached (evictable when no one else holds them), the last block first,
  // so a chain's leaf is evicted before its parent.
  void release(std::vector<int32_t>& table);

  // Caches the table's blocks that are full of written (or being written)
  // positions [0, n_written): the blocks of `tokens` past the cursor, as
  // links of its chain, pending on batch `writer`. on_link(i, link) hears
  // of each table entry the cursor passes, with its chain link.
  using OnLink = std::function<void(int64_t, const BlockPool::Link&)>;
  void cache_full_blocks(const std::vector<int32_t>& table, const std::vector<int32_t>& tokens,
                         int64_t n_written, std::string_view salt, uint64_t writer,
                         CacheCursor& cur, const OnLink& on_link = {});

  // A batch came back (confirm) or failed (drop_pending: every block cached
  // by it or a later batch is uncached). reads_pending: whether the first
  // n_shared blocks of a table (those it reused) include one pending on a
  // batch >= from, i.e. whether its reader read KV that may not be there.
  void confirm(uint64_t batch) { pool_.confirm(batch); }
  int32_t drop_pending(uint64_t from) { return pool_.drop_pending(from); }
  bool reads_pending(const std::vector<int32_t>& table, int32_t n_shared, uint64_t from) const;
  // A new epoch: nothing cached survives (a restarted stage's KV is empty).
  int32_t drop_cache() { return pool_.drop_all(); }

  int32_t total() const { return pool_.total(); }
  // Blocks an allocation can take: free ones plus evictable ones.
  int32_t free() const { return pool_.available(); }
  int32_t evictable() const { return pool_.evictable(); }
  int32_t cached() const { return pool_.cached(); }
  int32_t block_size() const { return pool_.block_size(); }
  const BlockPool& pool() const { return pool_; }

 private:
  BlockPool pool_;
  bool caching_;
};

}  // namespace kvasir
