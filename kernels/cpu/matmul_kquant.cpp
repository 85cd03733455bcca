// K-quant weights (Q4_K, Q5_K, Q6_K) × 8-bit activations. The activation
// blocks of 32 (BlockQ8x) line up with the K-quants' sub-blocks:
//   Q4_K/Q5_K sub-block s:  dot = d·sc_s·d_x · Σ q·qx  −  dmin·m_s · s_x
//   Q6_K block of 32 (two sub-blocks of 16, scales sc_a, sc_b):
//                           dot = d·d_x · (sc_a·Σ_a (q−32)·qx + sc_b·Σ_b (q−32)·qx)
// where s_x = d_x·Σ qx. Scalar and AVX2 form the same integer sums.
#include "base/half.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu::detail {
namespace {

constexpr int kSubs = kq::kSuper / kQK;  // activation blocks per super-block (8)

// ---- scalar ---------------------------------------------------------------

template <bool Q5>
float dot_q45_scalar(const uint8_t* w, const BlockQ8x* x, int64_t n_super) {
  constexpr int64_t bytes = Q5 ? kq::kQ5KBytes : kq::kQ4KBytes;
  float acc = 0.f;
  uint8_t q[32];
  for (int64_t sb = 0; sb < n_super; ++sb) {
    const uint8_t* blk = w + sb * bytes;
    const float d = kq::half_at(blk), dmin = kq::half_at(blk + 2);
    for (int s = 0; s < kSubs; ++s) {
      const BlockQ8x& xb = x[sb * kSubs + s];
      uint8_t sc, m;
      kq::scale_min_k4(s, blk + 4, sc, m);
      kq::quants_q45(blk, Q5, s, q);
      int32_t sumi = 0;
      for (int l = 0; l < 32; ++l) sumi += int32_t(q[l]) * xb.q[l];
      acc += float(sumi) * (d * float(sc) * xb.d) - dmin * float(m) * xb.s;
    }
  }
  return acc;
}

float dot_q6_scalar(const uint8_t* w, const BlockQ8x* x, int64_t n_super) {
  float acc = 0.f;
  int8_t q[32];
  for (int64_t sb = 0; sb < n_super; ++sb) {
    const uint8_t* blk = w + sb * kq::kQ6KBytes;
    const float d = kq::half_at(blk + 208);
    for (int c = 0; c < kSubs; ++c) {
      const BlockQ8x& xb = x[sb * kSubs + c];
      kq::quants_q6(blk, c, q);
      int32_t s0 = 0, s1 = 0;
      for (int l = 0; l < 16; ++l) s0 += int32_t(q[l]) * xb.q[l];
      for (int l = 16; l < 32; ++l) s1 += int32_t(q[l]) * xb.q[l];
      const int32_t sumi = kq::scale_q6(blk, c, 0) * s0 + kq::scale_q6(blk, c, 1) * s1;
      acc += float(sumi) * (d * xb.d);
    }
  }
  return acc;
}

template <DType T>
struct Scalar {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  static void tile(const uint8_t* w, int64_t, const BlockQ8x* x, int64_t x_stride, int64_t cols,
                   float* y, int64_t y_stride) {
    const int64_t ns = cols / kq::kSuper;
    for (int j = 0; j < NX; ++j) {
      const BlockQ8x* xj = x + j * x_stride;
      y[j * y_stride] =
          T == DType::Q6_K ? dot_q6_scalar(w, xj, ns) : dot_q45_scalar<T == DType::Q5_K>(w, xj, ns);
    }
  }
};

// ---- AVX2 -----------------------------------------------------------------
#ifdef KV_HAVE_X86
#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))

KV_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

KV_AVX2 inline __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 8 × int32: sums of 4 adjacent u8(a)·s8(b). No saturation: |pair| ≤ 2·31·128.
KV_AVX2 inline __m256i dot_u8s8(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

// Q4_K / Q5_K: one 32-byte load of qs serves sub-blocks 2k (low nibbles) and
// 2k+1 (high nibbles); Q5_K adds 16 where bit s of qh[l] is set.
template <bool Q5, int NX>
KV_AVX2 void tile_q45_avx2(const uint8_t* w, const BlockQ8x* x, int64_t x_stride, int64_t cols,
                           float* y, int64_t y_stride) {
  constexpr int64_t bytes = Q5 ? kq::kQ5KBytes : kq::kQ4KBytes;
  const int64_t ns = cols / kq::kSuper;
  const __m256i low4 = _mm256_set1_epi8(0x0f), sixteen = _mm256_set1_epi8(16);
  __m256 acc[NX];
  float mins[NX];
  for (int j = 0; j < NX; ++j) {
    acc[j] = _mm256_setzero_ps();
    mins[j] = 0.f;
  }
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* blk = w + sb * bytes;
    const float d = _cvtsh_ss(load_u16(blk)), dmin = _cvtsh_ss(load_u16(blk + 2));
    float dsc[kSubs], dm[kSubs];
    for (int s = 0; s < kSubs; ++s) {
      uint8_t sc, m;
      kq::scale_min_k4(s, blk + 4, sc, m);
      dsc[s] = d * float(sc);
      dm[s] = dmin * float(m);
    }
    const __m256i qh = Q5 ? load256(blk + 16) : _mm256_setzero_si256();
    const BlockQ8x* xs = x + sb * kSubs;
    for (int k = 0; k < kSubs / 2; ++k) {
      const __m256i raw = load256(blk + (Q5 ? 48 : 16) + 32 * k);
      __m256i lo = _mm256_and_si256(raw, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      if constexpr (Q5) {
        const __m256i b0 = _mm256_set1_epi8(char(1 << (2 * k)));
        const __m256i b1 = _mm256_set1_epi8(char(1 << (2 * k + 1)));
        lo = _mm256_or_si256(
            lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), sixteen));
        hi = _mm256_or_si256(
            hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), sixteen));
      }
      for (int j = 0; j < NX; ++j) {
        const BlockQ8x& x0 = xs[j * x_stride + 2 * k];
        const BlockQ8x& x1 = xs[j * x_stride + 2 * k + 1];
        const __m256i p0 = dot_u8s8(lo, load256(reinterpret_cast<const uint8_t*>(x0.q)));
        const __m256i p1 = dot_u8s8(hi, load256(reinterpret_cast<const uint8_t*>(x1.q)));
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(dsc[2 * k] * x0.d), acc[j]);
        acc[j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(dsc[2 * k + 1] * x1.d), acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j)
      for (int s = 0; s < kSubs; ++s) mins[j] += dm[s] * xs[j * x_stride + s].s;
  }
  for (int j = 0; j < NX; ++j) y[j * y_stride] = hsum(acc[j]) - mins[j];
}

// Q6_K: q (0..63) as u8; Σ (q−32)·qx = maddubs(q, qx) − maddubs(32, qx) in
// int16 (|each| ≤ 2·63·128), then vpmaddwd with the two sub-blocks' scales
// (int16 lanes 0-7 are weights 0-15, lanes 8-15 weights 16-31).
template <int NX>
KV_AVX2 void tile_q6_avx2(const uint8_t* w, const BlockQ8x* x, int64_t x_stride, int64_t cols,
                          float* y, int64_t y_stride) {
  const int64_t ns = cols / kq::kSuper;
  const __m256i low4 = _mm256_set1_epi8(0x0f), three = _mm256_set1_epi8(3);
  const __m256i m32 = _mm256_set1_epi8(32);
  __m256 acc[NX];
  for (int j = 0; j < NX; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* blk = w + sb * kq::kQ6KBytes;
    const float d = _cvtsh_ss(load_u16(blk + 208));
    const BlockQ8x* xs = x + sb * kSubs;
    for (int h = 0; h < 2; ++h) {
      const __m256i ql[2] = {load256(blk + 64 * h), load256(blk + 64 * h + 32)};
      const __m256i qh = load256(blk + 128 + 32 * h);
      for (int t = 0; t < 4; ++t) {
        const int c = 4 * h + t;
        const __m256i lo = t < 2 ? _mm256_and_si256(ql[t & 1], low4)
                                 : _mm256_and_si256(_mm256_srli_epi16(ql[t & 1], 4), low4);
        const __m256i hi2 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * t)), three);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi2, 4));
        const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(kq::scale_q6(blk, c, 1)),
                                             _mm_set1_epi16(kq::scale_q6(blk, c, 0)));
        for (int j = 0; j < NX; ++j) {
          const BlockQ8x& xb = xs[j * x_stride + c];
          const __m256i xq = load256(reinterpret_cast<const uint8_t*>(xb.q));
          const __m256i p16 =
              _mm256_sub_epi16(_mm256_maddubs_epi16(q, xq), _mm256_maddubs_epi16(m32, xq));
          const __m256i p32 = _mm256_madd_epi16(p16, scv);
          acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(d * xb.d), acc[j]);
        }
      }
    }
  }
  for (int j = 0; j < NX; ++j) y[j * y_stride] = hsum(acc[j]);
}

// One weight row per tile: the K-quants' scale decoding per super-block
// already dominates a second row's savings (kept simple; see docs/kernels.md).
template <DType T>
struct Avx2 {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  static void tile(const uint8_t* w, int64_t, const BlockQ8x* x, int64_t x_stride, int64_t cols,
                   float* y, int64_t y_stride) {
    if constexpr (T == DType::Q6_K)
      tile_q6_avx2<NX>(w, x, x_stride, cols, y, y_stride);
    else
      tile_q45_avx2<T == DType::Q5_K, NX>(w, x, x_stride, cols, y, y_stride);
  }
};
#endif  // KV_HAVE_X86

}  // namespace

DotFn kquant_dot_kernel(DType type, SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level >= SimdLevel::kAvx2) {
    switch (type) {
      case DType::Q4_K:
        return dispatch_tile<Avx2<DType::Q4_K>, BlockQ8x>;
      case DType::Q5_K:
        return dispatch_tile<Avx2<DType::Q5_K>, BlockQ8x>;
      case DType::Q6_K:
        return dispatch_tile<Avx2<DType::Q6_K>, BlockQ8x>;
      default:
        return nullptr;
    }
  }
#endif
  (void)level;
  switch (type) {
    case DType::Q4_K:
      return dispatch_tile<Scalar<DType::Q4_K>, BlockQ8x>;
    case DType::Q5_K:
      return dispatch_tile<Scalar<DType::Q5_K>, BlockQ8x>;
    case DType::Q6_K:
      return dispatch_tile<Scalar<DType::Q6_K>, BlockQ8x>;
    default:
      return nullptr;
  }
}

}  // namespace kvasir::cpu::detail
