#include "daemon/engine/block_manager.h"

#include "base/check.h"

namespace kvasir {

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size)
    : n_blocks_(n_blocks), block_size_(block_size) {
  KV_CHECK(n_blocks >= 0 && block_size > 0, "block manager: {} blocks of {}", n_blocks, block_size);
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockManager::ensure(std::vector<int32_t>& table, int64_t tokens) {
  const int32_t need = blocks_for(tokens) - int32_t(table.size());
  if (need <= 0) return true;
  if (need > free()) return false;
  for (int32_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (int32_t b : table) {
    KV_CHECK(b >= 0 && b < n_blocks_ && int32_t(free_.size()) < n_blocks_,
             "block manager: releasing block {} twice or out of range", b);
    free_.push_back(b);
  }
  table.clear();
}

}  // namespace kvasir
