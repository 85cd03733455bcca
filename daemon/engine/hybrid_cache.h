// daemon/engine/hybrid_cache.h — prefix caching over both block groups of a
// model with sliding-window layers (docs/scheduler.md, "Prefix caching" and
// "Sliding-window groups").
//
// The one owner of the two-group rules; the scheduler calls it for every
// cache operation, and without a sliding group it is the full group's
// BlockManager alone. The shape is vLLM v1's hybrid KV cache coordinator
// (its SlidingWindowManager's find_longest_cache_hit beside the full
// attention one's); the code is this project's.
//
// The sliding group caches its full blocks by the same rules as the full
// group: once full of accepted positions, pending on the writing batch
// until it comes back, dropped with a failed batch or a new epoch. Its
// blocks are not a chain of their own (those before a window are given
// back as it slides, and may be evicted), so entry i's block is keyed by
// the full group's link for entry i: that link already decides, by
// equality, the whole prefix [0, (i + 1) · block_size).
//
// A hit of M whole blocks needs the full group's blocks [0, M) cached and
// the sliding group's for every entry a row starting at M · block_size
// reads: first_needed(M · block_size) .. M - 1. The entries before are
// unmapped in the new sequence's sliding table. The full group's longest
// hit is tried first, then shorter ones until the sliding group has its
// window (or none is left).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "daemon/engine/block_manager.h"
#include "daemon/engine/sliding_group.h"

namespace kvasir {

// A hit in both groups (the sliding part empty without a sliding group).
struct HybridHit {
  PrefixHit full;  // the full group's blocks [0, M)
  // [M] (with a sliding group): the sliding group's blocks, kUnmapped
  // before the window of position M · block_size.
  std::vector<int32_t> swa;
  int32_t swa_evictable = 0;  // of those, blocks nobody holds now
  uint64_t swa_writer = 0;    // the latest batch still writing one (0: none)
  int64_t tokens(int32_t block_size) const { return full.tokens(block_size); }
  int32_t n_blocks() const { return int32_t(full.blocks.size()); }
};

class HybridCache {
 public:
  HybridCache(BlockManager& full, SlidingGroup& swa) : full_(full), swa_(swa) {}

  bool caching() const { return full_.caching(); }

  // The longest hit of whole blocks for `tokens` under `salt`, leaving at
  // least the last token to compute. Nothing held yet.
  HybridHit find_prefix(const std::vector<int32_t>& tokens, std::string_view salt) const;
  // Takes a hit as the start of two empty tables, and sets the cursor.
  void reuse(std::vector<int32_t>& table, std::vector<int32_t>& swa_table, const HybridHit& hit,
             CacheCursor& cur);
  // Caches the blocks of both tables full of positions [0, n_written),
  // past the cursor, pending on batch `writer`.
  void cache_full_blocks(const std::vector<int32_t>& table, const std::vector<int32_t>& swa_table,
                         const std::vector<int32_t>& tokens, int64_t n_written,
                         std::string_view salt, uint64_t writer, CacheCursor& cur);

  // A batch came back (confirm) or failed (drop_pending, both groups).
  void confirm(uint64_t batch);
  int32_t drop_pending(uint64_t from);
  // Whether a sequence's hit (n_shared full blocks, and the sliding blocks
  // its cursor recorded) read a block pending on a batch >= from.
  bool reads_pending(const std::vector<int32_t>& table, int32_t n_shared, const CacheCursor& cur,
                     uint64_t from) const;
  // A new epoch: nothing cached survives in either group.
  int32_t drop_cache();

 private:
  // The sliding blocks of entries [0, m) found under the full hit's links
  // (kUnmapped where none is).
  std::vector<int32_t> swa_found(const PrefixHit& full, const std::vector<int32_t>& tokens) const;

  BlockManager& full_;
  SlidingGroup& swa_;
};

}  // namespace kvasir
