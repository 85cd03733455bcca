// daemon/engine/sliding_group.h — the KV blocks of a model's sliding-window
// layers, freed as the window moves (docs/scheduler.md, "Sliding-window
// groups").
//
// A model whose layers differ in attention type (Gemma 3: every 6th layer
// global, the others over the last `window` positions) has two groups of
// layers, each with its own block id space: the full group's blocks are the
// BlockManager's (block_manager.h; prefix caching, copies and all), the
// sliding group's this class's, over a BlockPool of its own. A sequence
// holds a table per group, both of the same logical length (entry i covers
// positions [i·block_size, (i+1)·block_size)); in the sliding table the
// entries wholly before the window of every position the sequence will
// still compute are *unmapped* (kUnmapped) and their blocks back in the
// pool. The shape is vLLM v1's SlidingWindowManager beside its full
// attention manager.
//
// When is a block past use? A row at pos0 reads keys from
// window_start(pos0) = max(0, pos0 - window + 1) on (paged_attention reads
// nothing before it), and every later row of the sequence starts at or past
// its n_scheduled: chunks follow each other, a decode follows its prefill,
// speculative drafts only move it forward (rejected drafts' positions are
// rewritten from there), and a recompute after a preemption or a lost stage
// gives the whole table back first and starts again from position 0. So
// at each row's formation the entries before window_start(n_scheduled) /
// block_size go back (slide). A batch still in the ring may read such a
// block: the block is handed out again only to a later batch, and every
// stage runs batches in order, so that batch has read it in each stage's
// own layers before the later one writes it there.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/engine/block_pool.h"

namespace kvasir {

// The sliding group's shape, as the daemon decides it (window 0: none).
struct SlidingKv {
  int32_t window = 0;    // positions a sliding layer's query sees
  int32_t n_blocks = 0;  // the group's pool
};

class SlidingGroup {
 public:
  static constexpr int32_t kUnmapped = -1;

  // window 0 (or n_blocks 0): no sliding group; every call is a no-op and
  // the sliding layers use the full group's table (the masking path).
  // caching: its full blocks are cached too (hybrid_cache.h), so a block
  // the window passed goes to the evictable list, not straight to free.
  SlidingGroup(int32_t window, int32_t n_blocks, int32_t block_size, bool caching = false);

  bool on() const { return window_ > 0; }
  int32_t window() const { return window_; }
  int32_t block_size() const { return pool_.block_size(); }
  int32_t total() const { return on() ? pool_.total() : 0; }
  int32_t free() const { return on() ? pool_.available() : 0; }
  bool caching() const { return on() && caching_; }

  // The most blocks one sequence ever holds here when its rows carry at
  // most max_row positions: ceil((window - 1 + max_row) / block_size) + 1
  // (its row's positions, the window of its first, and one block the
  // window starts inside).
  static int32_t max_held(int32_t window, int32_t block_size, int32_t max_row);

  // First table entry a row at `pos` may read (entries below it may go).
  int32_t first_needed(int64_t pos) const;
  // New blocks growing `table` to cover positions [0, tokens) takes.
  int32_t need(const std::vector<int32_t>& table, int64_t tokens) const;
  // Grows `table` to cover positions [0, tokens) with new blocks, all
  // mapped. All or nothing: false (table unchanged) if the pool is short.
  bool ensure(std::vector<int32_t>& table, int64_t tokens);
  // Unmaps the entries wholly before the window of position `next` (the
  // first the sequence will still compute) and gives their blocks back.
  // Returns how many went back.
  int32_t slide(std::vector<int32_t>& table, int64_t next);
  // Gives back the blocks past those covering positions [0, tokens)
  // (speculative decoding's rejected drafts).
  void trim(std::vector<int32_t>& table, int64_t tokens);
  // Gives back every mapped block and clears the table.
  void release(std::vector<int32_t>& table);
  // Mapped entries of `table`: the blocks a sequence really holds here.
  static int32_t held(const std::vector<int32_t>& table);

  // The cache (hybrid_cache.h keeps the rules): a block holding a table
  // entry's positions is keyed by the full group's link for that entry.
  std::optional<BlockPool::Link> find(const BlockPool::Link& key, const int32_t* tokens) const {
    return caching() ? pool_.find_keyed(key, tokens) : std::nullopt;
  }
  // Caches held block b under `key`, pending on batch `writer` (nothing
  // when b is cached already, or another block holds the same).
  void cache(int32_t b, const BlockPool::Link& key, const int32_t* tokens, uint64_t writer);
  // One more holder of a cached block (a hit).
  void ref(int32_t b) { pool_.ref(b); }
  const BlockPool& pool() const { return pool_; }
  void confirm(uint64_t batch) { pool_.confirm(batch); }
  int32_t drop_pending(uint64_t from) { return pool_.drop_pending(from); }
  int32_t drop_cache() { return pool_.drop_all(); }

 private:
  int32_t window_;
  bool caching_;
  BlockPool pool_;
};

}  // namespace kvasir
