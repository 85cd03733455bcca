// daemon/engine/block_manager.h — the one owner of KV block ids (docs/architecture.md).
//
// Fixed-size blocks, a free list, a table per sequence (the table itself is
// kept by the sequence and travels with each batch). Every stage holds the
// same number of blocks, so one table serves all stages.
#pragma once

#include <cstdint>
#include <vector>

namespace kvasir {

class BlockManager {
 public:
  BlockManager(int32_t n_blocks, int32_t block_size);

  int32_t blocks_for(int64_t tokens) const { return blocks_for(tokens, block_size_); }
  // The same for any block size: the bridge sizes a request before queuing
  // it, on the caller's thread, without the scheduler's block manager.
  static int32_t blocks_for(int64_t tokens, int32_t block_size) {
    return int32_t((tokens + block_size - 1) / block_size);
  }
  // Grows `table` to cover positions [0, tokens). All or nothing: false
  // (table unchanged) if the free pool is short.
  bool ensure(std::vector<int32_t>& table, int64_t tokens);
  // Returns every block of `table` to the pool and clears it.
  void release(std::vector<int32_t>& table);

  int32_t total() const { return n_blocks_; }
  int32_t free() const { return int32_t(free_.size()); }
  int32_t block_size() const { return block_size_; }

 private:
  int32_t n_blocks_, block_size_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first
};

}  // namespace kvasir
