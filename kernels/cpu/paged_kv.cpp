// Paged KV cache: checks and kv_append. paged_attention is in attention.cpp.
#include "kernels/cpu/paged_kv.h"

#include <algorithm>

#include "base/check.h"
#include "base/half.h"
#include "kernels/cpu/paged_kv_internal.h"

namespace kvasir::cpu {
namespace detail {

int64_t check_kv_rows(const KvLayerView& kv, const AttnRow* rows, int n_rows, int32_t window) {
  KV_CHECK(kv.type == DType::F16 || kv.type == DType::F32, "paged KV: type {} (want F16 or F32)",
           dtype_name(kv.type));
  KV_CHECK(kv.n_blocks >= 0 && kv.block_size > 0 && kv.n_kv_heads > 0 && kv.head_dim > 0,
           "paged KV: bad layout ({} blocks of {} tokens, {} kv heads of dim {})", kv.n_blocks,
           kv.block_size, kv.n_kv_heads, kv.head_dim);
  KV_CHECK(n_rows >= 0 && (n_rows == 0 || rows != nullptr), "paged KV: bad row list");
  KV_CHECK(window >= 0, "paged KV: window {} is negative", window);
  int64_t total = 0;
  for (int r = 0; r < n_rows; ++r) {
    const AttnRow& row = rows[r];
    KV_CHECK(row.pos0 >= 0 && row.n_tokens >= 0 && row.n_table >= 0,
             "paged KV: row {}: pos0 {}, n_tokens {}, n_table {} must not be negative", r, row.pos0,
             row.n_tokens, row.n_table);
    total += row.n_tokens;
    if (row.n_tokens == 0) continue;
    const int64_t last = int64_t(row.pos0) + row.n_tokens - 1;
    const int64_t last_block = last / kv.block_size;
    KV_CHECK(last_block < row.n_table,
             "paged KV: row {}: position {} needs logical block {} but the table has {}", r, last,
             last_block, row.n_table);
    KV_CHECK(row.block_table != nullptr, "paged KV: row {} has no block table", r);
    const int64_t first = window > 0 ? std::max<int64_t>(0, int64_t(row.pos0) - window + 1) : 0;
    for (int64_t b = first / kv.block_size; b <= last_block; ++b) {
      const int32_t id = row.block_table[b];
      KV_CHECK(id >= 0 && id < kv.n_blocks,
               "paged KV: row {}: logical block {} maps to block {} outside [0, {})", r, b, id,
               kv.n_blocks);
    }
  }
  if (total > 0) KV_CHECK(kv.k != nullptr && kv.v != nullptr, "paged KV: null K or V");
  return total;
}

}  // namespace detail

void kv_append(const KvLayerView& kv, const AttnRow* rows, int n_rows, const float* k,
               const float* v, int32_t window) {
  // All checks before any write; a row writes only its own positions, which
  // lie in the window of its first (window >= 1).
  const int64_t total = detail::check_kv_rows(kv, rows, n_rows, window);
  if (total == 0) return;
  KV_CHECK(k != nullptr && v != nullptr, "kv_append: null keys or values");
  const int64_t hd = kv.head_dim, nkv = kv.n_kv_heads;
  int64_t t_global = 0;
  for (int r = 0; r < n_rows; ++r) {
    const AttnRow& row = rows[r];
    for (int32_t t = 0; t < row.n_tokens; ++t, ++t_global) {
      const int64_t pos = int64_t(row.pos0) + t;
      const int64_t phys = row.block_table[pos / kv.block_size];
      const int64_t slot = pos % kv.block_size;
      for (int64_t h = 0; h < nkv; ++h) {
        const float* ks = k + (t_global * nkv + h) * hd;
        const float* vs = v + (t_global * nkv + h) * hd;
        const int64_t off = detail::kv_offset(kv, phys, h, slot);
        if (kv.type == DType::F32) {
          float* kd = static_cast<float*>(kv.k) + off;
          float* vd = static_cast<float*>(kv.v) + off;
          for (int64_t i = 0; i < hd; ++i) {
            kd[i] = ks[i];
            vd[i] = vs[i];
          }
        } else {
          uint16_t* kd = static_cast<uint16_t*>(kv.k) + off;
          uint16_t* vd = static_cast<uint16_t*>(kv.v) + off;
          for (int64_t i = 0; i < hd; ++i) {
            kd[i] = f32_to_fp16(ks[i]);
            vd[i] = f32_to_fp16(vs[i]);
          }
        }
      }
    }
  }
}

}  // namespace kvasir::cpu
