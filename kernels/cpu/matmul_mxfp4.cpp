// MXFP4 weights (gpt-oss's experts) × 8-bit activations.
//
// A block of 32 weights is 17 bytes: one E8M0 scale byte e, then 16 bytes of
// e2m1 codes, byte j holding weight j (low nibble) and weight j + 16 (high
// nibble), as Q4_0 lays its nibbles out. A code's value is kFp4[code] / 2 ·
// 2^(e - 127); the table holds the e2m1 values doubled so they are integers
// (−12..12), and the scale is taken halved, 2^(e − 128), to match:
//   dot = d_x · 2^(e − 128) · Σ kFp4[q]·qx
// over the same 8-bit activation blocks Q8_0 uses (BlockQ8x), as llama.cpp
// pairs MXFP4 with Q8_0. No offset term: the codes are signed.
//
// The SIMD paths look the codes up with a byte shuffle (the 16-entry table
// fits a 128-bit lane), then take the signed × signed product as
// |w| × (x with w's sign), the u8 × s8 form vpmaddubsw needs. A pair of
// products is at most 2·12·127, far from vpmaddubsw's saturation.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu::detail {

float e8m0_half(uint8_t e) {
  // 2^(e − 128): below e = 2 the result is subnormal and built bit by bit.
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {

constexpr int64_t kBlockBytes = 17;
constexpr int8_t kFp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ---- scalar ---------------------------------------------------------------

float dot_scalar(const uint8_t* w, const BlockQ8x* xr, int64_t nb) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kBlockBytes;
    const BlockQ8x& xb = xr[b];
    int32_t sumi = 0;
    for (int i = 0; i < kQK / 2; ++i) {
      sumi += int32_t(kFp4[blk[1 + i] & 0x0f]) * xb.q[i];
      sumi += int32_t(kFp4[blk[1 + i] >> 4]) * xb.q[i + kQK / 2];
    }
    acc += (xb.d * e8m0_half(blk[0])) * float(sumi);
  }
  return acc;
}

struct Scalar {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  static void tile(const uint8_t* w, int64_t, const BlockQ8x* x, int64_t x_stride, int64_t cols,
                   float* y, int64_t y_stride) {
    for (int j = 0; j < NX; ++j) y[j * y_stride] = dot_scalar(w, x + j * x_stride, cols / kQK);
  }
};

#ifdef KV_HAVE_X86
#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace avx2 {

KV_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A block's 32 weights as signed bytes, in the activations' order (the 16 low
// nibbles, then the 16 high ones).
KV_AVX2 inline __m256i load_weights(const uint8_t* blk) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 1));
  const __m256i idx =
      _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4)));
  return _mm256_shuffle_epi8(table, idx);
}

// 8 int32 partial sums of w·x over one block.
KV_AVX2 inline __m256i block_dot(__m256i w, __m256i w_abs, const BlockQ8x& xb) {
  const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
  const __m256i p16 = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(xq, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

struct Tile {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  KV_AVX2 static void tile(const uint8_t* w, int64_t, const BlockQ8x* x, int64_t x_stride,
                           int64_t cols, float* y, int64_t y_stride) {
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < cols / kQK; ++b) {
      const uint8_t* blk = w + b * kBlockBytes;
      const __m256i wv = load_weights(blk);
      const __m256i w_abs = _mm256_sign_epi8(wv, wv);
      const float we = e8m0_half(blk[0]);
#pragma GCC unroll 4
      for (int j = 0; j < NX; ++j) {
        const BlockQ8x& xb = x[j * x_stride + b];
        const __m256i p = block_dot(wv, w_abs, xb);
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(we * xb.d), acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) y[j * y_stride] = hsum(acc[j]);
  }
};

}  // namespace avx2

// GCC 12's avx512fintrin.h builds results on _mm512_undefined_*(), a
// self-initialised variable that -Wuninitialized reports when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KV_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))

namespace avx512 {

// Two blocks per 512-bit register (b in the low half, b + 1 in the high);
// an odd last block takes the 256-bit path. AVX-512 has no vpsignb: the
// activations' signs flip under a mask of the weights' sign bits instead.
struct Tile {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  KV_AVX512 static void tile(const uint8_t* w, int64_t, const BlockQ8x* x, int64_t x_stride,
                             int64_t cols, float* y, int64_t y_stride) {
    const int64_t nb = cols / kQK;
    const __m512i table =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4)));
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512 acc[NX];
    __m256 tail[NX];
    for (int j = 0; j < NX; ++j) {
      acc[j] = _mm512_setzero_ps();
      tail[j] = _mm256_setzero_ps();
    }
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
      const uint8_t* blk = w + b * kBlockBytes;
      const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 1));
      const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kBlockBytes + 1));
      const __m512i raw =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(_mm_srli_epi16(r0, 4), r0)),
                             _mm256_set_m128i(_mm_srli_epi16(r1, 4), r1), 1);
      const __m512i wv = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, low4));
      const __m512i w_abs = _mm512_abs_epi8(wv);
      const __mmask64 neg = _mm512_movepi8_mask(wv);
      const float we0 = e8m0_half(blk[0]), we1 = e8m0_half(blk[kBlockBytes]);
#pragma GCC unroll 4
      for (int j = 0; j < NX; ++j) {
        const BlockQ8x* xb = x + j * x_stride + b;
        const __m512i xq = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[0].q))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[1].q)), 1);
        const __m512i xs = _mm512_mask_sub_epi8(xq, neg, _mm512_setzero_si512(), xq);
        const __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(w_abs, xs), _mm512_set1_epi16(1));
        const __m512 scale = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(we0 * xb[0].d),
                                                  _mm512_set1_ps(we1 * xb[1].d));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[j]);
      }
    }
    if (b < nb) {
      const uint8_t* blk = w + b * kBlockBytes;
      const __m256i wv = avx2::load_weights(blk);
      const __m256i w_abs = _mm256_sign_epi8(wv, wv);
      const float we = e8m0_half(blk[0]);
      for (int j = 0; j < NX; ++j) {
        const BlockQ8x& xb = x[j * x_stride + b];
        const __m256i p = avx2::block_dot(wv, w_abs, xb);
        tail[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(we * xb.d), tail[j]);
      }
    }
    for (int j = 0; j < NX; ++j)
      y[j * y_stride] = _mm512_reduce_add_ps(acc[j]) + avx2::hsum(tail[j]);
  }
};

}  // namespace avx512

// ---- batch (matmul_mxfp4_batch_avx512.inc) --------------------------------
//
// The decode tile looks a block's codes up again for every 4 activation
// rows, and flips the activations' signs per weight row. The batch kernel
// unpacks a block of weight rows once per call into WPairs and prepares the
// activations once into XPairs, so a register tile's inner step is one
// integer dot, one convert, one scale product and one fma per (weight row,
// activation row, block pair). The integer dot takes the activations
// offset to unsigned, x + 128 (x ^ 0x80), against the signed weights, and
// starts from −128 · Σw per lane (WPair::corr): the lane sums are the
// decode tile's integers exactly, and so are the f32 operations after them
// (the same bits alone or in a batch).

// Two blocks of one weight row, unpacked.
struct alignas(64) WPair {
  int8_t w[64];      // the doubled e2m1 values, block b then b + 1 (activation order)
  int32_t corr[16];  // −128 × the sum of the 4 weights of each lane
  float s[16];       // 2^(e − 128): block b's in lanes 0-7, b + 1's in 8-15
};
// Two blocks of one activation row, prepared.
struct alignas(64) XPair {
  uint8_t q[64];  // q ^ 0x80 = q + 128, block b then b + 1
  float d[16];    // block b's d in lanes 0-7, b + 1's in 8-15
};
static_assert(sizeof(WPair) == 192 && sizeof(XPair) == 128);

// Weight rows unpacked at a time: 16 rows of gpt-oss's 2880 columns are
// 135 KiB of WPairs, which stay in L2 while every activation row passes.
constexpr int64_t kBlockRows = 16;
constexpr int kTileW = 4, kTileX = 4;  // 16 accumulators

template <class T>
T* scratch_for(int64_t count) {
  thread_local std::vector<T> buf;  // grow-only
  if (buf.size() < size_t(count)) buf.resize(size_t(count));
  return buf.data();
}

namespace avx512 {

KV_AVX512 void unpack_row(const uint8_t* row, int64_t np, WPair* out) {
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4)));
  for (int64_t p = 0; p < np; ++p) {
    const uint8_t* blk = row + 2 * p * kBlockBytes;
    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 1));
    const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kBlockBytes + 1));
    const __m512i raw =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(_mm_srli_epi16(r0, 4), r0)),
                           _mm256_set_m128i(_mm_srli_epi16(r1, 4), r1), 1);
    const __m512i wv = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, _mm512_set1_epi8(0x0f)));
    const __m512i sum4 =
        _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_set1_epi8(1), wv), _mm512_set1_epi16(1));
    _mm512_store_si512(out[p].w, wv);
    _mm512_store_si512(out[p].corr,
                       _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum4, 7)));
    _mm512_store_ps(out[p].s, _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(e8m0_half(blk[0])),
                                                   _mm512_set1_ps(e8m0_half(blk[kBlockBytes]))));
  }
}

KV_AVX512 void prepare_x(const BlockQ8x* x, int64_t np, XPair* out) {
  for (int64_t p = 0; p < np; ++p) {
    const __m512i q = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[2 * p].q))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[2 * p + 1].q)), 1);
    _mm512_store_si512(out[p].q, _mm512_xor_si512(q, _mm512_set1_epi8(char(0x80))));
    _mm512_store_ps(out[p].d, _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(x[2 * p].d),
                                                   _mm512_set1_ps(x[2 * p + 1].d)));
  }
}

// An odd last block, as Tile adds it: its own 256-bit accumulator.
KV_AVX512 float last_block(const uint8_t* blk, const BlockQ8x& xb) {
  const __m256i wv = avx2::load_weights(blk);
  const __m256i p = avx2::block_dot(wv, _mm256_sign_epi8(wv, wv), xb);
  const float we = e8m0_half(blk[0]);
  return avx2::hsum(
      _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(we * xb.d), _mm256_setzero_ps()));
}

}  // namespace avx512

// ---- batch at the 256-bit levels (matmul_mxfp4_batch_avx2.inc) ------------
//
// The same scheme a block at a time: the AVX2 decode tile has no pairs and
// no odd last block. 16 ymm registers hold a 2 × 4 tile's 8 accumulators,
// the 4 activation rows' blocks and the temporaries.

// One block of one weight row, unpacked.
struct alignas(32) WBlock {
  int8_t w[32];     // the doubled e2m1 values (activation order)
  int32_t corr[8];  // −128 × the sum of the 4 weights of each lane
  float s[8];       // 2^(e − 128) in every lane
};
// One block of one activation row, prepared.
struct alignas(32) XBlock {
  uint8_t q[32];  // q ^ 0x80 = q + 128
  float d[8];     // d in every lane
};
static_assert(sizeof(WBlock) == 96 && sizeof(XBlock) == 64);

constexpr int kTileW256 = 2, kTileX256 = 4;  // 8 accumulators

namespace avx2 {

KV_AVX2 void unpack_row(const uint8_t* row, int64_t nb, WBlock* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kBlockBytes;
    const __m256i wv = load_weights(blk);
    const __m256i sum4 =
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), wv), _mm256_set1_epi16(1));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out[b].w), wv);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out[b].corr),
                       _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum4, 7)));
    _mm256_store_ps(out[b].s, _mm256_set1_ps(e8m0_half(blk[0])));
  }
}

KV_AVX2 void prepare_x(const BlockQ8x* x, int64_t nb, XBlock* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out[b].q),
                       _mm256_xor_si256(q, _mm256_set1_epi8(char(0x80))));
    _mm256_store_ps(out[b].d, _mm256_set1_ps(x[b].d));
  }
}

}  // namespace avx2

#define KV_ISA avx2_batch
#define KV_TARGET KV_AVX2
#define KV_DOT_U8S8_256(c, u, s) \
  _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
#include "kernels/cpu/matmul_mxfp4_batch_avx2.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8_256

#define KV_ISA avx_vnni_batch
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define KV_DOT_U8S8_256(c, u, s) _mm256_dpbusd_avx_epi32(c, u, s)
#include "kernels/cpu/matmul_mxfp4_batch_avx2.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8_256

// The same 256-bit vpdpbusd, EVEX-encoded: the kAvxVnni level on CPUs with
// AVX-512 VNNI but not AVX-VNNI (matmul_quant.cpp says which).
#define KV_ISA avx512vl_vnni_batch
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define KV_DOT_U8S8_256(c, u, s) _mm256_dpbusd_epi32(c, u, s)
#include "kernels/cpu/matmul_mxfp4_batch_avx2.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8_256

#define KV_ISA avx512_batch
#define KV_TARGET KV_AVX512
#define KV_DOT_U8S8_512(c, u, s) \
  _mm512_add_epi32(c, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)))
#include "kernels/cpu/matmul_mxfp4_batch_avx512.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8_512

#define KV_ISA avx512_vnni_batch
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define KV_DOT_U8S8_512(c, u, s) _mm512_dpbusd_epi32(c, u, s)
#include "kernels/cpu/matmul_mxfp4_batch_avx512.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8_512

#pragma GCC diagnostic pop
#endif  // KV_HAVE_X86

}  // namespace

// The decode tiles of the kAvxVnni and kAvx512Vnni levels are the level
// below's: there vpdpbusd would only fuse vpmaddubsw + vpmaddwd of one
// product per loaded block. The batch kernel has a vpdpbusd copy.
Mxfp4BatchFn mxfp4_batch_kernel(SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level == SimdLevel::kAvx512Vnni) return avx512_vnni_batch::batch;
  if (level == SimdLevel::kAvx512) return avx512_batch::batch;
  if (level == SimdLevel::kAvxVnni)
    return cpu_has_vex_vnni() ? avx_vnni_batch::batch : avx512vl_vnni_batch::batch;
  if (level == SimdLevel::kAvx2) return avx2_batch::batch;
#endif
  (void)level;
  return nullptr;
}

DotFn mxfp4_dot_kernel(SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level >= SimdLevel::kAvx512) return dispatch_tile<avx512::Tile, BlockQ8x>;
  if (level >= SimdLevel::kAvx2) return dispatch_tile<avx2::Tile, BlockQ8x>;
#endif
  (void)level;
  return dispatch_tile<Scalar, BlockQ8x>;
}

void dequantize_row_mxfp4(const uint8_t* row, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const uint8_t* blk = row + b * kBlockBytes;
    const float d = e8m0_half(blk[0]);
    for (int i = 0; i < kQK / 2; ++i) {
      out[b * kQK + i] = d * float(kFp4[blk[1 + i] & 0x0f]);
      out[b * kQK + i + kQK / 2] = d * float(kFp4[blk[1 + i] >> 4]);
    }
  }
}

}  // namespace kvasir::cpu::detail
