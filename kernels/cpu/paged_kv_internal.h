// kernels/cpu/paged_kv_internal.h — checks and addressing shared by
// kv_append and paged_attention. Not part of the kernels' face.
#pragma once

#include <cstdint>

#include "kernels/cpu/paged_kv.h"

namespace kvasir::cpu::detail {

// Throws kvasir::Error unless the view is usable and every row's positions
// 0 .. pos0 + n_tokens - 1 map through its table to physical blocks in
// [0, n_blocks); with window > 0, only the positions from its first
// query's window start (pos0 - window + 1) on: the entries before it may be
// unmapped (-1), as a sliding group's freed blocks are. Returns the total
// number of new tokens T.
int64_t check_kv_rows(const KvLayerView& kv, const AttnRow* rows, int n_rows, int32_t window = 0);

// Element offset of (physical block, kv head, slot) in K or V.
inline int64_t kv_offset(const KvLayerView& kv, int64_t phys, int64_t head, int64_t slot) {
  return ((phys * kv.n_kv_heads + head) * kv.block_size + slot) * kv.head_dim;
}

}  // namespace kvasir::cpu::detail
