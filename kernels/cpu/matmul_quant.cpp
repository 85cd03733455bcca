// Quantised weights (Q8_0, Q4_0, Q4_1) × 8-bit activations: integer dot
// products per block of 32, scaled and summed in f32.
//
//   Q8_0:  dot = d_w * d_x * Σ qw*qx
//   Q4_0:  w = d_w*(q-8)  →  dot = d_w * d_x * Σ q*qx  - 8 * d_w * s_x
//   Q4_1:  w = d_w*q + m  →  dot = d_w * d_x * Σ q*qx  + m_w * s_x
// where s_x = d_x * Σ qx. Q4_0 is Q4_1 with m_w = -8 d_w.
#include <cmath>

#include "base/half.h"
#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu::detail {
namespace {

enum class QKind { kQ8_0, kQ4_0, kQ4_1 };

template <QKind K>
constexpr int64_t block_bytes() {
  return K == QKind::kQ8_0 ? 34 : K == QKind::kQ4_0 ? 18 : 20;
}

// ---- scalar ---------------------------------------------------------------

template <QKind K>
void dot_scalar(const uint8_t* w, const void* xv, int64_t x_stride, int nx, int64_t cols, float* y,
                int64_t y_stride) {
  const auto* x = static_cast<const BlockQ8x*>(xv);
  const int64_t nb = cols / kQK;
  for (int j = 0; j < nx; ++j) {
    const BlockQ8x* xr = x + j * x_stride;
    float acc = 0.f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + b * block_bytes<K>();
      const BlockQ8x& xb = xr[b];
      const float d = fp16_to_f32(load_u16(blk));
      int32_t sumi = 0;
      float min_term = 0.f;
      if constexpr (K == QKind::kQ8_0) {
        const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
        for (int i = 0; i < kQK; ++i) sumi += int32_t(q[i]) * xb.q[i];
      } else {
        const uint8_t* qs = blk + (K == QKind::kQ4_1 ? 4 : 2);
        for (int i = 0; i < kQK / 2; ++i) {
          sumi += int32_t(qs[i] & 0x0f) * xb.q[i];
          sumi += int32_t(qs[i] >> 4) * xb.q[i + kQK / 2];
        }
        const float m = K == QKind::kQ4_1 ? fp16_to_f32(load_u16(blk + 2)) : -8.f * d;
        min_term = m * xb.s;
      }
      acc += float(sumi) * (d * xb.d) + min_term;
    }
    y[j * y_stride] = acc;
  }
}

// The scales are kept at half precision, as llama.cpp's Q8_0/Q8_1 activation
// blocks keep them: x ≈ fp16(d) * q. The rounding is part of what the parity
// test against llama.cpp measures, so both paths round identically.
inline void store_scales(BlockQ8x& blk, float d, int32_t sum) {
  blk.d = fp16_to_f32(f32_to_fp16(d));
  blk.s = fp16_to_f32(f32_to_fp16(d * float(sum)));
}

void quantize_scalar(const float* x, int64_t cols, BlockQ8x* out) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0.f;
    for (int i = 0; i < kQK; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    int32_t sum = 0;
    for (int i = 0; i < kQK; ++i) {
      const int32_t q = int32_t(std::nearbyint(xb[i] * id));  // half to even
      out[b].q[i] = int8_t(q);
      sum += q;
    }
    store_scales(out[b], d, sum);
  }
}

// ---- AVX2 -----------------------------------------------------------------
#ifdef KV_HAVE_X86
#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))

KV_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

KV_AVX2 inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

template <QKind K, int NX>
KV_AVX2 void dot_avx2_nx(const uint8_t* w, const BlockQ8x* x, int64_t x_stride, int64_t cols,
                         float* y, int64_t y_stride) {
  const int64_t nb = cols / kQK;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc[NX];
  float mins[NX];
  for (int j = 0; j < NX; ++j) {
    acc[j] = _mm256_setzero_ps();
    mins[j] = 0.f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * block_bytes<K>();
    const float d = _cvtsh_ss(load_u16(blk));
    __m256i wq;  // unsigned nibbles (Q4) or raw int8 (Q8_0)
    __m256i wabs;
    float m = 0.f;
    if constexpr (K == QKind::kQ8_0) {
      wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      wabs = _mm256_sign_epi8(wq, wq);
    } else {
      const __m128i raw =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (K == QKind::kQ4_1 ? 4 : 2)));
      wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
      wabs = wq;
      m = K == QKind::kQ4_1 ? _cvtsh_ss(load_u16(blk + 2)) : -8.f * d;
    }
    for (int j = 0; j < NX; ++j) {
      const BlockQ8x& xb = x[j * x_stride + b];
      __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
      if constexpr (K == QKind::kQ8_0) xq = _mm256_sign_epi8(xq, wq);
      const __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, xq), ones);
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(d * xb.d), acc[j]);
      if constexpr (K != QKind::kQ8_0) mins[j] += m * xb.s;
    }
  }
  for (int j = 0; j < NX; ++j) y[j * y_stride] = hsum(acc[j]) + mins[j];
}

template <QKind K>
void dot_avx2(const uint8_t* w, const void* xv, int64_t x_stride, int nx, int64_t cols, float* y,
              int64_t y_stride) {
  const auto* x = static_cast<const BlockQ8x*>(xv);
  switch (nx) {
    case 1:
      return dot_avx2_nx<K, 1>(w, x, x_stride, cols, y, y_stride);
    case 2:
      return dot_avx2_nx<K, 2>(w, x, x_stride, cols, y, y_stride);
    case 3:
      return dot_avx2_nx<K, 3>(w, x, x_stride, cols, y, y_stride);
    default:
      return dot_avx2_nx<K, 4>(w, x, x_stride, cols, y, y_stride);
  }
}

KV_AVX2 void quantize_avx2(const float* x, int64_t cols, BlockQ8x* out) {
  const __m256 sign_mask = _mm256_set1_ps(-0.f);
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float* xb = x + b * kQK;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, v[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));  // half-even
    const __m256i sum =
        _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    // Pack 32 int32 → 32 int8, restoring order (packs work within 128-bit lanes).
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), p);
    store_scales(out[b], d, hsum_i32(sum));
  }
}
#endif  // KV_HAVE_X86

}  // namespace

DotFn quant_dot_kernel(DType type, SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level == SimdLevel::kAvx2) {
    switch (type) {
      case DType::Q8_0:
        return dot_avx2<QKind::kQ8_0>;
      case DType::Q4_0:
        return dot_avx2<QKind::kQ4_0>;
      case DType::Q4_1:
        return dot_avx2<QKind::kQ4_1>;
      default:
        return nullptr;
    }
  }
#endif
  (void)level;
  switch (type) {
    case DType::Q8_0:
      return dot_scalar<QKind::kQ8_0>;
    case DType::Q4_0:
      return dot_scalar<QKind::kQ4_0>;
    case DType::Q4_1:
      return dot_scalar<QKind::kQ4_1>;
    default:
      return nullptr;
  }
}

void quantize_row_q8x(const float* x, int64_t cols, BlockQ8x* out, SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level == SimdLevel::kAvx2) return quantize_avx2(x, cols, out);
#endif
  (void)level;
  quantize_scalar(x, cols, out);
}

}  // namespace kvasir::cpu::detail
