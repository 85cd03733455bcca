// Plain weights (F32, F16, BF16) × f32 activations, accumulated in f32.
#include <algorithm>

#include "base/half.h"
#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu::detail {
namespace {

template <DType T>
inline float load_scalar(const uint8_t* w, int64_t c) {
  if constexpr (T == DType::F32) {
    float v;
    std::memcpy(&v, w + 4 * c, 4);
    return v;
  } else if constexpr (T == DType::F16) {
    return fp16_to_f32(load_u16(w + 2 * c));
  } else {
    return bf16_to_f32(load_u16(w + 2 * c));
  }
}

template <DType T>
struct Scalar {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  static void tile(const uint8_t* w, int64_t, const float* x, int64_t x_stride, int64_t cols,
                   float* y, int64_t y_stride) {
    float acc[NX] = {};
    for (int64_t c = 0; c < cols; ++c) {
      const float wv = load_scalar<T>(w, c);
      for (int j = 0; j < NX; ++j) acc[j] += wv * x[j * x_stride + c];
    }
    for (int j = 0; j < NX; ++j) y[j * y_stride] = acc[j];
  }
};

#ifdef KV_HAVE_X86
#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))

KV_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <DType T>
KV_AVX2 inline __m256 load8(const uint8_t* w, int64_t c) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + c);
  } else if constexpr (T == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * c)));
  } else {
    const __m256i u =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * c)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
}

// The end of one output: the scalar columns from c on, then the two
// accumulators' sum. Shared by the decode and batch kernels so that a row
// gets the same bits in either (the same expressions, contracted alike).
template <DType T>
KV_AVX2 inline float finish_dot(__m256 a0, __m256 a1, const uint8_t* w, const float* x, int64_t c,
                                int64_t cols) {
  float tail = 0.f;
  for (; c < cols; ++c) tail += load_scalar<T>(w, c) * x[c];
  return hsum(_mm256_add_ps(a0, a1)) + tail;
}

// Two accumulators per activation row hide the FMA latency. Per output:
// a0 over the even 8-column chunks of each 16-column step, a1 over the odd
// ones, then one 8-column step into a0, then finish_dot. The batch tiles
// below keep exactly this order (tests/unit/kernels/test_matmul_batch.cpp).
template <DType T, int NX>
KV_AVX2 void dot_avx2_nx(const uint8_t* w, const float* x, int64_t x_stride, int64_t cols, float* y,
                         int64_t y_stride) {
  __m256 a0[NX], a1[NX];
  for (int j = 0; j < NX; ++j) a0[j] = a1[j] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m256 w0 = load8<T>(w, c), w1 = load8<T>(w, c + 8);
    for (int j = 0; j < NX; ++j) {
      a0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j * x_stride + c), a0[j]);
      a1[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j * x_stride + c + 8), a1[j]);
    }
  }
  for (; c + 8 <= cols; c += 8) {
    const __m256 w0 = load8<T>(w, c);
    for (int j = 0; j < NX; ++j)
      a0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j * x_stride + c), a0[j]);
  }
  for (int j = 0; j < NX; ++j)
    y[j * y_stride] = finish_dot<T>(a0[j], a1[j], w, x + j * x_stride, c, cols);
}

// One weight row per tile: two accumulators × 4 rows already use 8 of the
// 16 registers; a second weight row would spill.
template <DType T>
struct Avx2 {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  static void tile(const uint8_t* w, int64_t, const float* x, int64_t x_stride, int64_t cols,
                   float* y, int64_t y_stride) {
    dot_avx2_nx<T, NX>(w, x, x_stride, cols, y, y_stride);
  }
};

// ---- batch (4 or more activation rows) ------------------------------------
//
// The decode tile above loads two weight vectors for 2 × NX FMAs and, in a
// batch, reads every weight row once per 4 activation rows. The batch tile
// is NW = 2 weight rows × NX = 3 activation rows: 12 accumulators (each
// output keeps its a0 and a1, the decode order), 2 weight registers and one
// activation register: 15 of the 16. Per 8 columns it loads 2 weight and 3
// activation vectors for 6 FMAs (the decode tile: 1 + 4 for 4).
// An activation vector loaded once into a register for both weight rows:
// left to itself GCC folds the load into each FMA (16 loads per 12 FMAs
// instead of 10, two loads a cycle: the loads, not the FMAs, bound the
// tile). The empty asm only pins the value in a register.
KV_AVX2 inline __m256 load_x8(const float* p) {
  __m256 v = _mm256_loadu_ps(p);
  asm("" : "+x"(v));
  return v;
}

// Fully unrolled, or -O2 keeps the accumulator arrays in memory.
#define KV_UNROLL _Pragma("GCC unroll 8")
template <DType T, int NW, int NX>
KV_AVX2 void tile_avx2(const uint8_t* w, int64_t w_stride, const float* x, int64_t x_stride,
                       int64_t cols, float* y, int64_t y_stride) {
  __m256 a0[NW][NX] = {}, a1[NW][NX] = {};  // zeros
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    __m256 wv[NW];
    KV_UNROLL for (int i = 0; i < NW; ++i) wv[i] = load8<T>(w + i * w_stride, c);
    KV_UNROLL for (int j = 0; j < NX; ++j) {
      const __m256 xv = load_x8(x + j * x_stride + c);
      KV_UNROLL for (int i = 0; i < NW; ++i) a0[i][j] = _mm256_fmadd_ps(wv[i], xv, a0[i][j]);
    }
    KV_UNROLL for (int i = 0; i < NW; ++i) wv[i] = load8<T>(w + i * w_stride, c + 8);
    KV_UNROLL for (int j = 0; j < NX; ++j) {
      const __m256 xv = load_x8(x + j * x_stride + c + 8);
      KV_UNROLL for (int i = 0; i < NW; ++i) a1[i][j] = _mm256_fmadd_ps(wv[i], xv, a1[i][j]);
    }
  }
  for (; c + 8 <= cols; c += 8) {
    __m256 wv[NW];
    KV_UNROLL for (int i = 0; i < NW; ++i) wv[i] = load8<T>(w + i * w_stride, c);
    KV_UNROLL for (int j = 0; j < NX; ++j) {
      const __m256 xv = load_x8(x + j * x_stride + c);
      KV_UNROLL for (int i = 0; i < NW; ++i) a0[i][j] = _mm256_fmadd_ps(wv[i], xv, a0[i][j]);
    }
  }
  KV_UNROLL for (int i = 0; i < NW; ++i) {
    KV_UNROLL for (int j = 0; j < NX; ++j) {
      y[i + j * y_stride] =
          finish_dot<T>(a0[i][j], a1[i][j], w + i * w_stride, x + j * x_stride, c, cols);
    }
  }
}

// The next cache block's bytes, prefetched into L2 a slice after each tile
// of the current block. Without it the block's first tile column pulls its
// weights from memory as one sequential stream, at the latency of a
// demand miss per line: 8.5 GB/s at 4 rows where the decode kernel's two
// streams reach 26 (bench_kernels_matmul stream mode, docs/kernels.md);
// issued a block ahead, the misses overlap each other and the block's
// arithmetic.
struct NextBlock {
  const uint8_t* p = nullptr;  // next line to prefetch
  const uint8_t* end = nullptr;
  int64_t per_tile = 0;  // bytes after each tile, rounded up to whole lines

  KV_AVX2 void after_tile() {
    const uint8_t* e = std::min(p + per_tile, end);
    for (; p < e; p += 64) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  }
};

// One column of tiles: the weight rows [r, re) of a block against nx
// activation rows, two weight rows at a time.
template <DType T, int NX>
KV_AVX2 void tile_column(const uint8_t* w, int64_t row_bytes, int64_t r, int64_t re, const float* x,
                         int64_t cols, float* y, int64_t y_stride, NextBlock& next) {
  for (; r + 2 <= re; r += 2) {
    tile_avx2<T, 2, NX>(w + r * row_bytes, row_bytes, x, cols, cols, y + r, y_stride);
    next.after_tile();
  }
  if (r < re) tile_avx2<T, 1, NX>(w + r * row_bytes, row_bytes, x, cols, cols, y + r, y_stride);
}

// Weight bytes per cache block: the block stays in L2 while every
// activation row passes over it, so each weight row comes from memory once
// per call; the 3 activation rows of a tile column stay in L1 meanwhile,
// and the next block arrives beside it (NextBlock).
constexpr int64_t kWeightBlockBytes = 128 << 10;

// Output rows [r0, r1) for all n >= 4 activation rows: y[j * y_stride + r].
// Tile columns of 3 activation rows; n % 3 == 1 ends with two of 2 (a
// column of one would load two weight vectors per two FMAs).
template <DType T>
KV_AVX2 void batch_avx2(const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1, const float* x,
                        int64_t n, int64_t cols, float* y, int64_t y_stride) {
  const int64_t block = std::max<int64_t>(2, kWeightBlockBytes / row_bytes) & ~int64_t(1);
  const int64_t n3 = n % 3 == 1 ? n - 4 : n - n % 3;  // rows in columns of 3
  const int64_t columns = n3 / 3 + (n - n3) / 2;
  // The first block has nothing ahead of it to hide behind: its lines are
  // requested up front.
  NextBlock first{w + r0 * row_bytes, w + std::min(r0 + block, r1) * row_bytes, 0};
  first.per_tile = first.end - first.p;
  first.after_tile();
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = std::min(rb + block, r1);
    const int64_t tiles = columns * ((re - rb) / 2);
    NextBlock next{w + re * row_bytes, w + std::min(re + block, r1) * row_bytes, 0};
    next.per_tile = tiles > 0 ? ((next.end - next.p) / tiles + 64) & ~int64_t(63) : 0;
    int64_t j = 0;
    for (; j < n3; j += 3)
      tile_column<T, 3>(w, row_bytes, rb, re, x + j * cols, cols, y + j * y_stride, y_stride, next);
    for (; j < n; j += 2)
      tile_column<T, 2>(w, row_bytes, rb, re, x + j * cols, cols, y + j * y_stride, y_stride, next);
  }
}

// ---- batch, 512-bit tiles (the same bits) -----------------------------------
//
// A ZMM accumulator over a 16-column step holds the decode order's a0 in
// lanes 0-7 and a1 in lanes 8-15: one 512-bit FMA is the two 256-bit FMAs
// of that step, lane for lane, so the tile gives the decode kernel's bits.
// With one register per output and 32 registers, the tile is NW = 4 weight
// rows × NX = 6 activation rows: 24 accumulators, 4 weight vectors and one
// activation vector. Per 16 columns it loads 4 + 6 vectors for 24 FMAs
// (the 256-bit batch tile: 10 loads for 12 FMAs of half the width), so
// the FMAs, not the loads, bound it.
#define KV_AVX512F __attribute__((target("avx2,fma,f16c,avx512f,avx512vl")))
// GCC 12's avx512fintrin.h builds results on _mm512_undefined_*(), a
// self-initialised variable that -Wuninitialized reports when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

template <DType T>
KV_AVX512F inline __m512 load16(const uint8_t* w, int64_t c) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(w) + c);
  } else if constexpr (T == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * c)));
  } else {
    const __m512i u =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * c)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
}

KV_AVX512F inline __m512 load_x16(const float* p) {
  __m512 v = _mm512_loadu_ps(p);
  asm("" : "+v"(v));
  return v;
}

// finish_dot of four outputs with no columns left, side by side: each
// accumulator's lanes are added in pairs exactly as there (a0 + a1, the
// two 128-bit halves, lanes 0+2 and 1+3, then those two; float addition
// is commutative, so which operand is which does not matter), then one
// 4-float store. The decode's "+ tail" of an empty tail (0.f) is left out:
// it changes only a -0 sum, and none is -0 (the accumulators start at +0
// and round to nearest). Scalar, the 24 sums of a 4 x 6 tile took ~10
// instructions each, on the ports the FMAs use: 12% of the tile's time
// over 576 columns (perf annotate of a served prefill).
KV_AVX512F inline void store_sums4(__m512 z0, __m512 z1, __m512 z2, __m512 z3, float* y) {
  // [z0.a0 | z1.a0] + [z0.a1 | z1.a1]: lanes i and i + 8 of each.
  const __m512 v01 = _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(z0, z1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 v23 = _mm512_add_ps(_mm512_shuffle_f32x4(z2, z3, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(z2, z3, _MM_SHUFFLE(3, 2, 3, 2)));
  // The 128-bit halves of each: one output per 128-bit lane from here on.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 t = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 r = _mm512_add_ps(t, _mm512_movehdup_ps(t));
  const __m512 lane0 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0,
                                                               0, 0, 0, 0, 0),
                                             r);
  _mm_storeu_ps(y, _mm512_castps512_ps128(lane0));
}

template <DType T, int NW, int NX>
KV_AVX512F void tile_avx512(const uint8_t* w, int64_t w_stride, const float* x, int64_t x_stride,
                            int64_t cols, float* y, int64_t y_stride) {
  __m512 acc[NW][NX];
  KV_UNROLL for (int i = 0; i < NW; ++i) {
    KV_UNROLL for (int j = 0; j < NX; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    __m512 wv[NW];
    KV_UNROLL for (int i = 0; i < NW; ++i) wv[i] = load16<T>(w + i * w_stride, c);
    KV_UNROLL for (int j = 0; j < NX; ++j) {
      const __m512 xv = load_x16(x + j * x_stride + c);
      KV_UNROLL for (int i = 0; i < NW; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  if constexpr (NW == 4) {
    if (c == cols) {  // no 8-column step, no scalar tail: four outputs per reduction
      KV_UNROLL for (int j = 0; j < NX; ++j)
        store_sums4(acc[0][j], acc[1][j], acc[2][j], acc[3][j], y + j * y_stride);
      return;
    }
  }
  // The decode order's halves, then its 8-column step into a0.
  KV_UNROLL for (int i = 0; i < NW; ++i) {
    const uint8_t* wi = w + i * w_stride;
    KV_UNROLL for (int j = 0; j < NX; ++j) {
      __m256 a0 = _mm512_castps512_ps256(acc[i][j]);
      const __m256 a1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i][j]), 1));
      int64_t ce = c;
      if (ce + 8 <= cols) {
        a0 = _mm256_fmadd_ps(load8<T>(wi, ce), _mm256_loadu_ps(x + j * x_stride + ce), a0);
        ce += 8;
      }
      y[i + j * y_stride] = finish_dot<T>(a0, a1, wi, x + j * x_stride, ce, cols);
    }
  }
}

// One column of tiles: weight rows [r, re) against NX activation rows,
// four weight rows at a time, the rest one by one.
template <DType T, int NX>
KV_AVX512F void tile_column_512(const uint8_t* w, int64_t row_bytes, int64_t r, int64_t re,
                                const float* x, int64_t cols, float* y, int64_t y_stride,
                                NextBlock& next) {
  for (; r + 4 <= re; r += 4) {
    tile_avx512<T, 4, NX>(w + r * row_bytes, row_bytes, x, cols, cols, y + r, y_stride);
    next.after_tile();
  }
  for (; r < re; ++r)
    tile_avx512<T, 1, NX>(w + r * row_bytes, row_bytes, x, cols, cols, y + r, y_stride);
}

template <DType T>
KV_AVX512F void column_512(int64_t nx, const uint8_t* w, int64_t row_bytes, int64_t r, int64_t re,
                           const float* x, int64_t cols, float* y, int64_t y_stride,
                           NextBlock& next) {
  switch (nx) {
    case 6:
      return tile_column_512<T, 6>(w, row_bytes, r, re, x, cols, y, y_stride, next);
    case 5:
      return tile_column_512<T, 5>(w, row_bytes, r, re, x, cols, y, y_stride, next);
    case 4:
      return tile_column_512<T, 4>(w, row_bytes, r, re, x, cols, y, y_stride, next);
    case 3:
      return tile_column_512<T, 3>(w, row_bytes, r, re, x, cols, y, y_stride, next);
    case 2:
      return tile_column_512<T, 2>(w, row_bytes, r, re, x, cols, y, y_stride, next);
    default:
      return tile_column_512<T, 1>(w, row_bytes, r, re, x, cols, y, y_stride, next);
  }
}

// Below this many activation rows the 256-bit kernel runs instead: with
// the weights streaming from memory (a served decode micro-batch), one
// column of 4-row tiles read them slower than its two columns of 2-row
// tiles (bench_kernels_matmul stream F32: 0.79x at 6 rows, level at 8,
// 1.05x at 12, 1.30x at 16; docs/kernels.md).
constexpr int64_t kWideFromRows = 12;

// As batch_avx2 (cache blocks of kWeightBlockBytes, the next one
// prefetched), with ceil(n / 6) tile columns of 6 activation rows or
// fewer, their sizes within one of each other: 128 rows run as 18 columns
// of 6 and 4 of 5, not 21 of 6 and one of 2 (whose 4 x 2 tiles load 6
// vectors per 8 FMAs).
template <DType T>
KV_AVX512F void batch_avx512(const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1,
                             const float* x, int64_t n, int64_t cols, float* y, int64_t y_stride) {
  if (n < kWideFromRows) return batch_avx2<T>(w, row_bytes, r0, r1, x, n, cols, y, y_stride);
  const int64_t block = std::max<int64_t>(4, kWeightBlockBytes / row_bytes) & ~int64_t(3);
  const int64_t columns = (n + 5) / 6;
  NextBlock first{w + r0 * row_bytes, w + std::min(r0 + block, r1) * row_bytes, 0};
  first.per_tile = first.end - first.p;
  first.after_tile();
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = std::min(rb + block, r1);
    const int64_t tiles = columns * ((re - rb) / 4);
    NextBlock next{w + re * row_bytes, w + std::min(re + block, r1) * row_bytes, 0};
    next.per_tile = tiles > 0 ? ((next.end - next.p) / tiles + 64) & ~int64_t(63) : 0;
    for (int64_t k = 0, j = 0; k < columns; ++k) {
      const int64_t nx = n / columns + (k < n % columns);
      column_512<T>(nx, w, row_bytes, rb, re, x + j * cols, cols, y + j * y_stride, y_stride,
                    next);
      j += nx;
    }
  }
}
#pragma GCC diagnostic pop
#endif  // KV_HAVE_X86

}  // namespace

BatchFn float_batch_kernel(DType type, SimdLevel level) {
#ifdef KV_HAVE_X86
  // The 512-bit tiles give the 256-bit kernels' bits (the decode order),
  // so they run wherever the process may use AVX-512 (simd_level(): the
  // CPU's widest level unless KVASIR_SIMD set a lower one), whichever
  // level the dispatch chose for the type.
  const bool wide = level >= SimdLevel::kAvx512 || simd_level() >= SimdLevel::kAvx512;
  if (level >= SimdLevel::kAvx2) {
    switch (type) {
      case DType::F32:
        return wide ? batch_avx512<DType::F32> : batch_avx2<DType::F32>;
      case DType::F16:
        return wide ? batch_avx512<DType::F16> : batch_avx2<DType::F16>;
      case DType::BF16:
        return wide ? batch_avx512<DType::BF16> : batch_avx2<DType::BF16>;
      default:
        return nullptr;
    }
  }
#endif
  (void)type;
  (void)level;
  return nullptr;
}

DotFn float_dot_kernel(DType type, SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level >= SimdLevel::kAvx2) {
    switch (type) {
      case DType::F32:
        return dispatch_tile<Avx2<DType::F32>, float>;
      case DType::F16:
        return dispatch_tile<Avx2<DType::F16>, float>;
      case DType::BF16:
        return dispatch_tile<Avx2<DType::BF16>, float>;
      default:
        return nullptr;
    }
  }
#endif
  (void)level;
  switch (type) {
    case DType::F32:
      return dispatch_tile<Scalar<DType::F32>, float>;
    case DType::F16:
      return dispatch_tile<Scalar<DType::F16>, float>;
    case DType::BF16:
      return dispatch_tile<Scalar<DType::BF16>, float>;
    default:
      return nullptr;
  }
}

}  // namespace kvasir::cpu::detail
