// Quantised weights (Q8_0, Q4_0, Q4_1, Q5_0) × 8-bit activations: integer
// dot products per block of 32, scaled and summed in f32.
//
//   Q8_0:  dot = d_w * d_x * Σ qw*qx
//   Q4_0:  w = d_w*(q-8)  →  dot = d_w * d_x * Σ q*qx  - 8 * d_w * s_x
//   Q4_1:  w = d_w*q + m  →  dot = d_w * d_x * Σ q*qx  + m_w * s_x
//   Q5_0:  w = d_w*(q-16), q = nibble | (bit j of qh) << 4
//                         →  dot = d_w * d_x * Σ q*qx  - 16 * d_w * s_x
// where s_x = d_x * Σ qx. Q4_0 is Q4_1 with m_w = -8 d_w, Q5_0 a Q4_0 whose
// quants carry a fifth bit. A Q5_0 block (22 bytes): f16 d, u32 qh (bit j:
// the high bit of weight j), 16 bytes of nibbles laid out as Q4_0's.
#include <cmath>

#include "base/half.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd_math.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu::detail {
namespace {

enum class QKind { kQ8_0, kQ4_0, kQ4_1, kQ5_0 };

template <QKind K>
constexpr int64_t block_bytes() {
  return K == QKind::kQ8_0 ? 34 : K == QKind::kQ4_0 ? 18 : K == QKind::kQ4_1 ? 20 : 22;
}

// Where a block's nibbles start, and its offset term's factor of d (Q4_1
// carries its own minimum instead).
template <QKind K>
constexpr int64_t nibbles_at() {
  return K == QKind::kQ4_1 ? 4 : K == QKind::kQ5_0 ? 6 : 2;
}
template <QKind K>
constexpr float offset_of_d() {
  return K == QKind::kQ5_0 ? -16.f : -8.f;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- scalar ---------------------------------------------------------------

template <QKind K>
float dot_scalar(const uint8_t* w, const BlockQ8x* xr, int64_t nb) {
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
      const uint8_t* qs = blk + nibbles_at<K>();
      const uint32_t qh = K == QKind::kQ5_0 ? load_u32(blk + 2) : 0;
      for (int i = 0; i < kQK / 2; ++i) {
        const int32_t lo = int32_t(qs[i] & 0x0f) | int32_t((qh >> i) & 1) << 4;
        const int32_t hi = int32_t(qs[i] >> 4) | int32_t((qh >> (i + kQK / 2)) & 1) << 4;
        sumi += lo * xb.q[i] + hi * xb.q[i + kQK / 2];
      }
      const float m = K == QKind::kQ4_1 ? fp16_to_f32(load_u16(blk + 2)) : offset_of_d<K>() * d;
      min_term = m * xb.s;
    }
    acc += float(sumi) * (d * xb.d) + min_term;
  }
  return acc;
}

template <QKind K>
struct Scalar {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  static void tile(const uint8_t* w, int64_t, const BlockQ8x* x, int64_t x_stride, int64_t cols,
                   float* y, int64_t y_stride) {
    for (int j = 0; j < NX; ++j) y[j * y_stride] = dot_scalar<K>(w, x + j * x_stride, cols / kQK);
  }
};

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
    const float d = hmax256(amax) / 127.f;
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

#ifndef KV_Q4_NW
#define KV_Q4_NW 2
#endif
#define KV_ISA avx2
#define KV_TARGET __attribute__((target("avx2,fma,f16c")))
#define KV_DOT_U8S8(a, b) _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
#include "kernels/cpu/matmul_quant_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8

#define KV_ISA avx_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define KV_DOT_U8S8(a, b) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), a, b)
#include "kernels/cpu/matmul_quant_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8

// The same 256-bit vpdpbusd, EVEX-encoded (avx512vnni + avx512vl): the
// kAvxVnni level on CPUs that have AVX-512 VNNI but not AVX-VNNI (Ice Lake
// and later Xeons as some hypervisors show them, Zen 4).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KV_ISA avx512vl_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define KV_DOT_U8S8(a, b) _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b)
#include "kernels/cpu/matmul_quant_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8
#pragma GCC diagnostic pop

// GCC 12's avx512fintrin.h builds results on _mm512_undefined_*(), a
// self-initialised variable that -Wuninitialized reports when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KV_ISA avx512
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define KV_DOT_U8S8_512(a, b) _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1))
#include "kernels/cpu/matmul_quant_avx512.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8_512

#define KV_ISA avx512_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define KV_DOT_U8S8_512(a, b) _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, b)
#include "kernels/cpu/matmul_quant_avx512.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8_512
#pragma GCC diagnostic pop

#endif  // KV_HAVE_X86

}  // namespace

DotFn quant_dot_kernel(DType type, SimdLevel level) {
#ifdef KV_HAVE_X86
  switch (level) {
    case SimdLevel::kAvx512Vnni:
      return avx512_vnni::kernel(type);
    case SimdLevel::kAvx512:
      return avx512::kernel(type);
    case SimdLevel::kAvxVnni:
      return cpu_has_vex_vnni() ? avx_vnni::kernel(type) : avx512vl_vnni::kernel(type);
    case SimdLevel::kAvx2:
      return avx2::kernel(type);
    case SimdLevel::kScalar:
      break;
  }
#endif
  (void)level;
  switch (type) {
    case DType::Q8_0:
      return dispatch_tile<Scalar<QKind::kQ8_0>, BlockQ8x>;
    case DType::Q4_0:
      return dispatch_tile<Scalar<QKind::kQ4_0>, BlockQ8x>;
    case DType::Q4_1:
      return dispatch_tile<Scalar<QKind::kQ4_1>, BlockQ8x>;
    case DType::Q5_0:
      return dispatch_tile<Scalar<QKind::kQ5_0>, BlockQ8x>;
    default:
      return nullptr;
  }
}

DotFn quant_wide_kernel(DType type, SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level == SimdLevel::kAvx512Vnni) return avx512_vnni::wide_kernel(type);
  if (level == SimdLevel::kAvx512) return avx512::wide_kernel(type);
#endif
  (void)type;
  (void)level;
  return nullptr;
}

void quantize_row_q8x(const float* x, int64_t cols, BlockQ8x* out, SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level >= SimdLevel::kAvx2) return quantize_avx2(x, cols, out);
#endif
  (void)level;
  quantize_scalar(x, cols, out);
}

}  // namespace kvasir::cpu::detail
