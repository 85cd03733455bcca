// Paged KV cache: checks and kv_append. paged_attention is in attention.cpp.
#include "kernels/cpu/paged_kv.h"

#include <algorithm>

#include "base/check.h"
#include "base/half.h"
#include "kernels/cpu/paged_kv_internal.h"
#include "kernels/cpu/simd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu {
namespace {

// One head's n values to F16, as f32_to_fp16 rounds them (to nearest even).
void to_fp16_scalar(const float* s, uint16_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(s[i]);
}

#ifdef KV_HAVE_X86
// The same with F16C, 8 at a time: vcvtps2ph rounds to nearest even too,
// so every number gets f32_to_fp16's bits; a NaN keeps its payload's top
// bits there and not in f32_to_fp16, so a group holding one goes the
// scalar way. Scalar, the conversion was 2% of a served F32 stage's
// prefill time (perf), more than the copies it rides on.
__attribute__((target("avx2,f16c"))) void to_fp16_f16c(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(s + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
      to_fp16_scalar(s + i, d + i, 8);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  to_fp16_scalar(s + i, d + i, n - i);
}
#endif

using ToFp16 = void (*)(const float*, uint16_t*, int64_t);

ToFp16 to_fp16_kernel() {
#ifdef KV_HAVE_X86
  if (simd_level() >= SimdLevel::kAvx2) return to_fp16_f16c;
#endif
  return to_fp16_scalar;
}

}  // namespace

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
  const ToFp16 to_fp16 = kv.type == DType::F16 ? to_fp16_kernel() : nullptr;
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
          to_fp16(ks, static_cast<uint16_t*>(kv.k) + off, hd);
          to_fp16(vs, static_cast<uint16_t*>(kv.v) + off, hd);
        }
      }
    }
  }
}

}  // namespace kvasir::cpu
