// The tiled path of paged_attention, for work items with many queries (a
// prefill chunk: up to 16 tokens × the group's query heads).
//
// The per-block path (attention.cpp) computes each score as a dot product
// with a horizontal reduction and keeps its accumulator in memory: ~25% of
// the FMA rate. Here the context is walked in tiles of kTile keys; each tile
// is gathered once per item from the paged cache into f32 scratch, the keys
// transposed ([hd][kTile]) so that a query's kTile scores are kTile/W vector
// accumulators fed by broadcasts of its elements (no reduction), and the
// values kept row-major ([kTile][hd]) so that p·V accumulates a slice of the
// output in registers. The softmax is the same online (streaming) form, one
// update per tile instead of one per block. What the tile costs to gather
// (convert, transpose) is shared by every query of the item, which is why
// decode items (one token) keep the per-block path.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/paged_kv_internal.h"
#include "kernels/cpu/simd_math.h"

#if defined(__x86_64__) || defined(__i386__)
#define KV_HAVE_X86 1
#include <immintrin.h>
#endif

namespace kvasir::cpu::detail {

#ifdef KV_HAVE_X86
namespace {

// Keys per tile, the same for both widths: a tile's transposed keys and its
// values (2 × 64 × hd floats, 32 KB at hd 64) stay within L1. (128 keys
// for AVX-512 would double that past L1: the tile no longer fits.)
constexpr int kTile = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A grow-only float buffer whose data is 64-byte aligned (whole cache lines:
// the AVX-512 loads of a tile row never straddle two).
class AlignedBuf {
 public:
  float* get(size_t n) {
    if (n > cap_) {
      store_.assign(n + 16, 0.f);
      auto addr = reinterpret_cast<uintptr_t>(store_.data());
      data_ = reinterpret_cast<float*>((addr + 63) & ~uintptr_t(63));
      cap_ = n;
    }
    return data_;
  }

 private:
  std::vector<float> store_;
  float* data_ = nullptr;
  size_t cap_ = 0;
};

// Per-thread scratch of the tiled path.
struct TileScratch {
  AlignedBuf kt;    // [hd, kTile] keys transposed
  AlignedBuf v;     // [kTile, hd] values
  AlignedBuf acc;   // [nq, hd] unnormalised outputs
  AlignedBuf m, l;  // [nq] running max and sum of the online softmax
  AlignedBuf s;     // [kTile] one query's scores, then its probabilities
};

// Eight elements of a cache row as f32.
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Gathers keys and values of positions [c0, c0 + n) of one row and kv head
// (n <= kTile): kt [hd, kTile] (columns >= n hold stale data the caller
// masks), v [n, hd]. Walks the blocks the tile overlaps (within a block the
// slots of one head are contiguous); keys are converted inside the
// transposes, straight from the cache. Positions before `from` (a sliding
// window's start, whose blocks may be unmapped: table entry -1) are not
// read: their key columns repeat the first read one and their values are
// zero, and the caller masks them.
template <class E>
__attribute__((target("avx2,fma,f16c"))) void gather_tile_of(const KvLayerView& kv,
                                                             const AttnRow& row, int head,
                                                             int64_t c0, int n, int64_t from,
                                                             TileScratch& sc) {
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  const E* kbase = static_cast<const E*>(kv.k);
  const E* vbase = static_cast<const E*>(kv.v);
  float* kt = sc.kt.get(size_t(kTile * hd));
  float* v = sc.v.get(size_t(kTile * hd));
  const E* key[kTile];  // key[j]: the cache row of position c0 + j
  const int64_t skip = std::clamp<int64_t>(from - c0, 0, n - 1);  // leading columns not read
  std::fill(v, v + skip * hd, 0.f);
  for (int64_t pos = c0 + skip; pos < c0 + n;) {
    const int64_t slot = pos % bs;
    const int64_t cnt = std::min(bs - slot, c0 + n - pos);
    const int64_t off = kv_offset(kv, row.block_table[pos / bs], head, slot);
    const int64_t j0 = pos - c0;
    for (int64_t j = 0; j < cnt; ++j) key[j0 + j] = kbase + off + j * hd;
    for (int64_t i = 0; i < cnt * hd; i += 8)  // hd is a multiple of 8
      _mm256_store_ps(v + j0 * hd + i, load8(vbase + off + i));
    pos += cnt;
  }
  const int n8 = (n + 7) & ~7;
  for (int64_t j = 0; j < skip; ++j) key[j] = key[skip];  // masked columns: any valid row
  for (int j = n; j < n8; ++j) key[j] = key[n - 1];
  // 8x8 transposes: keys [j, j+8) x elements [d, d+8) -> kt[d + i][j ..].
  for (int j = 0; j < n8; j += 8)
    for (int64_t d = 0; d < hd; d += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = load8(key[j + i] + d);
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      float* o = kt + d * kTile + j;
      _mm256_store_ps(o + 0 * kTile, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_store_ps(o + 1 * kTile, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_store_ps(o + 2 * kTile, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_store_ps(o + 3 * kTile, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_store_ps(o + 4 * kTile, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_store_ps(o + 5 * kTile, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_store_ps(o + 6 * kTile, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_store_ps(o + 7 * kTile, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
}

__attribute__((target("avx2,fma,f16c"))) void gather_tile(const KvLayerView& kv, const AttnRow& row,
                                                          int head, int64_t c0, int n,
                                                          int64_t from, TileScratch& sc) {
  if (kv.type == DType::F32)
    gather_tile_of<float>(kv, row, head, c0, n, from, sc);
  else
    gather_tile_of<uint16_t>(kv, row, head, c0, n, from, sc);
}

// ---- AVX2: 8 lanes ---------------------------------------------------------
#define KV_ISA avx2
#define KV_TARGET __attribute__((target("avx2,fma,f16c")))
struct Vec8 {
  using T = __m256;
  static constexpr int W = 8;
  KV_TARGET static T zero() { return _mm256_setzero_ps(); }
  KV_TARGET static T set1(float x) { return _mm256_set1_ps(x); }
  KV_TARGET static T load(const float* p) { return _mm256_load_ps(p); }
  KV_TARGET static void store(float* p, T x) { _mm256_store_ps(p, x); }
  KV_TARGET static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  KV_TARGET static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  KV_TARGET static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  KV_TARGET static T add(T a, T b) { return _mm256_add_ps(a, b); }
  KV_TARGET static T max(T a, T b) { return _mm256_max_ps(a, b); }
  KV_TARGET static T exp(T x) { return exp256(x); }
  KV_TARGET static float hsum(T x) { return hsum256(x); }
  KV_TARGET static float hmax(T x) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
  }
  // Lanes i >= n replaced by fill (n may be <= 0 or >= W).
  KV_TARGET static T keep_first(T x, int n, float fill) {
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 in = _mm256_cmp_ps(lane, _mm256_set1_ps(float(n)), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), x, in);
  }
  // Lanes outside [lo, hi) replaced by fill; keep_first when lo <= 0.
  KV_TARGET static T keep_range(T x, int lo, int hi, float fill) {
    if (lo <= 0) return keep_first(x, hi, fill);
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 in = _mm256_and_ps(_mm256_cmp_ps(lane, _mm256_set1_ps(float(hi)), _CMP_LT_OQ),
                                    _mm256_cmp_ps(lane, _mm256_set1_ps(float(lo)), _CMP_GE_OQ));
    return _mm256_blendv_ps(_mm256_set1_ps(fill), x, in);
  }
};
#define KV_VEC Vec8
#include "kernels/cpu/attention_tiled_x86.inc"
#undef KV_VEC
#undef KV_TARGET
#undef KV_ISA

// ---- AVX-512: 16 lanes -----------------------------------------------------
// GCC 12's avx512fintrin.h builds results on _mm512_undefined_*(), a
// self-initialised variable that -Wuninitialized reports when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KV_ISA avx512
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f")))
struct Vec16 {
  using T = __m512;
  static constexpr int W = 16;
  KV_TARGET static T zero() { return _mm512_setzero_ps(); }
  KV_TARGET static T set1(float x) { return _mm512_set1_ps(x); }
  KV_TARGET static T load(const float* p) { return _mm512_load_ps(p); }
  KV_TARGET static void store(float* p, T x) { _mm512_store_ps(p, x); }
  KV_TARGET static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  KV_TARGET static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  KV_TARGET static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  KV_TARGET static T add(T a, T b) { return _mm512_add_ps(a, b); }
  KV_TARGET static T max(T a, T b) { return _mm512_max_ps(a, b); }
  KV_TARGET static T exp(T x) { return exp512(x); }
  KV_TARGET static float hsum(T x) { return _mm512_reduce_add_ps(x); }
  KV_TARGET static float hmax(T x) { return _mm512_reduce_max_ps(x); }
  KV_TARGET static T keep_first(T x, int n, float fill) {
    const __mmask16 in = n >= W   ? __mmask16(0xFFFF)
                         : n <= 0 ? __mmask16(0)
                                  : __mmask16((1u << n) - 1);
    return _mm512_mask_blend_ps(in, _mm512_set1_ps(fill), x);
  }
  KV_TARGET static T keep_range(T x, int lo, int hi, float fill) {
    if (lo <= 0) return keep_first(x, hi, fill);
    const __mmask16 below = lo >= W ? __mmask16(0xFFFF) : __mmask16((1u << lo) - 1);
    return _mm512_mask_blend_ps(__mmask16(~below), _mm512_set1_ps(fill), keep_first(x, hi, fill));
  }
};
#define KV_VEC Vec16
#include "kernels/cpu/attention_tiled_x86.inc"
#undef KV_VEC
#undef KV_TARGET
#undef KV_ISA
#pragma GCC diagnostic pop

}  // namespace

int tiled_head_dim_multiple(bool avx512) {
  return avx512 ? 16 : 8;
}
void attend_item_tiled_avx2(const AttnJob& job, const AttnItem& it) {
  avx2::item(job, it);
}
void attend_item_tiled_avx512(const AttnJob& job, const AttnItem& it) {
  avx512::item(job, it);
}

#else  // not x86: never called (attention.cpp takes the per-block path)

int tiled_head_dim_multiple(bool) {
  return 0;
}
void attend_item_tiled_avx2(const AttnJob&, const AttnItem&) {}
void attend_item_tiled_avx512(const AttnJob&, const AttnItem&) {}

#endif

}  // namespace kvasir::cpu::detail
