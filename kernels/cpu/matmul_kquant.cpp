// K-quant weights (Q4_K, Q5_K, Q6_K) × 8-bit activations. The activation
// blocks of 32 (BlockQ8x) line up with the K-quants' sub-blocks:
//   Q4_K/Q5_K sub-block s:  dot = d·sc_s·d_x · Σ q·qx  −  dmin·m_s · s_x
//   Q6_K block of 32 (two sub-blocks of 16, scales sc_a, sc_b):
//                           dot = d·d_x · (sc_a·Σ_a (q−32)·qx + sc_b·Σ_b (q−32)·qx)
// where s_x = d_x·Σ qx. Every level forms the same integer sums.
#include <cstring>

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

// ---- x86 ------------------------------------------------------------------
#ifdef KV_HAVE_X86

using kq::unpack_scales_k4;

// 256 bits wide: AVX2 (vpmaddubsw + vpmaddwd), and the two 256-bit vpdpbusd
// encodings for the kAvxVnni level (Q4_K/Q5_K only: Q6_K's two sub-block
// scales per block are applied by the vpmaddwd that vpdpbusd would replace).
#define KV_ISA avx2
#define KV_TARGET __attribute__((target("avx2,fma,f16c")))
#define KV_DOT_U8S8(a, b) _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
#define KV_WITH_Q6 1
#include "kernels/cpu/matmul_kquant_x86.inc"
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8

#define KV_ISA avx_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define KV_DOT_U8S8(a, b) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), a, b)
#define KV_WITH_Q6 0
#include "kernels/cpu/matmul_kquant_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8

// GCC 12's avx512fintrin.h builds results on _mm512_undefined_*(), a
// self-initialised variable that -Wuninitialized reports when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KV_ISA avx512vl_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define KV_DOT_U8S8(a, b) _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b)
#include "kernels/cpu/matmul_kquant_x86.inc"
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8

// 512 bits wide: two sub-blocks (Q4_K/Q5_K) or two blocks of 32 (Q6_K) per
// instruction; Q6_K with vpmaddubsw at both levels (as above).
#define KV_ISA avx512
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define KV_DOT_U8S8_512(a, b) _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1))
#define KV_WITH_Q6 1
#include "kernels/cpu/matmul_kquant_avx512.inc"
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8_512

#define KV_ISA avx512_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define KV_DOT_U8S8_512(a, b) _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, b)
#define KV_WITH_Q6 0
#include "kernels/cpu/matmul_kquant_avx512.inc"
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_DOT_U8S8_512
#pragma GCC diagnostic pop

#endif  // KV_HAVE_X86

}  // namespace

DotFn kquant_dot_kernel(DType type, SimdLevel level) {
  if (type != DType::Q4_K && type != DType::Q5_K && type != DType::Q6_K) return nullptr;
#ifdef KV_HAVE_X86
  // Q6_K has no VNNI path of its own: those levels run the one below.
  switch (level) {
    case SimdLevel::kAvx512Vnni:
      return type == DType::Q6_K ? avx512::kernel(type) : avx512_vnni::kernel(type);
    case SimdLevel::kAvx512:
      return avx512::kernel(type);
    case SimdLevel::kAvxVnni:
      if (type == DType::Q6_K) return avx2::kernel(type);
      return cpu_has_vex_vnni() ? avx_vnni::kernel(type) : avx512vl_vnni::kernel(type);
    case SimdLevel::kAvx2:
      return avx2::kernel(type);
    case SimdLevel::kScalar:
      break;
  }
#endif
  (void)level;
  switch (type) {
    case DType::Q4_K:
      return dispatch_tile<Scalar<DType::Q4_K>, BlockQ8x>;
    case DType::Q5_K:
      return dispatch_tile<Scalar<DType::Q5_K>, BlockQ8x>;
    default:
      return dispatch_tile<Scalar<DType::Q6_K>, BlockQ8x>;
  }
}

}  // namespace kvasir::cpu::detail
