// K-quant weights (Q4_K, Q5_K, Q6_K) × 8-bit activations in blocks of 256
// (BlockQ8K, one f32 d_x per super-block), llama.cpp's Q8_K scheme: the
// sub-block scales apply to integer sums, and the f32 work is one product
// per super-block. Every level computes, per output and super-block, the
// same 8 int32 lanes (lane l: bytes 4l..4l+3 of every 32 weights, each
// sub-block's products times its scale),
//   Q4_K/Q5_K  S[l] = Σ_s sc_s · Σ_{b<4} q[32s+4l+b]·qx[32s+4l+b]
//              M[s] = m_s · (bsum[2s] + bsum[2s+1])      (the mins)
//   Q6_K       S[l] = Σ_c sc[2c + l/4] · Σ_{b<4} (q−32)·qx  at 32c+4l+b
// and the same f32 operations in the same order:
//   acc[l]  = fma(float(S[l]), d·d_x, acc[l])
//   accm[s] = fma(float(M[s]), dmin·d_x, accm[s])        (Q4_K/Q5_K)
//   y = hsum8(acc) − hsum8(accm),  hsum8(v) = ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7))
// so every level (scalar, 256 and 512 bits, decode tiles and the batch
// kernel) gives the same bits. Q6_K's −32 offset stays in the quants (q−32,
// as before) rather than going through bsums: the 8-bit products of (q−32)
// fit int16 pairs, and the batch kernel computes maddubs(32, qx) once for
// every weight row of its tile, so the bsums form would save little.
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd_math.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu::detail {
namespace {

constexpr int kSubs = kq::kSuper / kQK;  // sub-blocks of 32 per super-block (8)

// ---- scalar ---------------------------------------------------------------

// The x86 levels' horizontal sum of 8 lanes, operation for operation.
inline float hsum8(const float v[8]) {
  const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
  return (a0 + a2) + (a1 + a3);
}

template <bool Q5>
float dot_q45_scalar(const uint8_t* w, const BlockQ8K* x, int64_t n_super) {
  constexpr int64_t bytes = Q5 ? kq::kQ5KBytes : kq::kQ4KBytes;
  float acc[8] = {}, accm[8] = {};
  uint8_t q[32];
  for (int64_t sb = 0; sb < n_super; ++sb) {
    const uint8_t* blk = w + sb * bytes;
    const BlockQ8K& xb = x[sb];
    const float dd = kq::half_at(blk) * xb.d, ddm = kq::half_at(blk + 2) * xb.d;
    int32_t lanes[8] = {};
    for (int s = 0; s < kSubs; ++s) {
      uint8_t sc, m;
      kq::scale_min_k4(s, blk + 4, sc, m);
      kq::quants_q45(blk, Q5, s, q);
      for (int l = 0; l < 8; ++l) {
        int32_t p = 0;
        for (int b = 0; b < 4; ++b) p += int32_t(q[4 * l + b]) * xb.q[32 * s + 4 * l + b];
        lanes[l] += int32_t(sc) * p;
      }
      const int32_t mins = int32_t(m) * (xb.bsums[2 * s] + xb.bsums[2 * s + 1]);
      accm[s] = std::fma(float(mins), ddm, accm[s]);
    }
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(float(lanes[l]), dd, acc[l]);
  }
  return hsum8(acc) - hsum8(accm);
}

float dot_q6_scalar(const uint8_t* w, const BlockQ8K* x, int64_t n_super) {
  float acc[8] = {};
  int8_t q[32];
  for (int64_t sb = 0; sb < n_super; ++sb) {
    const uint8_t* blk = w + sb * kq::kQ6KBytes;
    const BlockQ8K& xb = x[sb];
    const float dd = kq::half_at(blk + 208) * xb.d;
    int32_t lanes[8] = {};
    for (int c = 0; c < kSubs; ++c) {
      kq::quants_q6(blk, c, q);
      for (int l = 0; l < 8; ++l) {
        int32_t p = 0;
        for (int b = 0; b < 4; ++b) p += int32_t(q[4 * l + b]) * xb.q[32 * c + 4 * l + b];
        lanes[l] += int32_t(kq::scale_q6(blk, c, l / 4)) * p;
      }
    }
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(float(lanes[l]), dd, acc[l]);
  }
  return hsum8(acc);
}

template <DType T>
struct Scalar {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  static void tile(const uint8_t* w, int64_t, const BlockQ8K* x, int64_t x_stride, int64_t cols,
                   float* y, int64_t y_stride) {
    const int64_t ns = cols / kq::kSuper;
    for (int j = 0; j < NX; ++j) {
      const BlockQ8K* xj = x + j * x_stride;
      y[j * y_stride] =
          T == DType::Q6_K ? dot_q6_scalar(w, xj, ns) : dot_q45_scalar<T == DType::Q5_K>(w, xj, ns);
    }
  }
};

// d = amax/127 in f32 (llama.cpp's Q8_K keeps an f32 d too), q = x/d
// rounded half to even, bsums per 16.
void quantize_q8k_scalar(const float* x, int64_t cols, BlockQ8K* out) {
  for (int64_t b = 0; b < cols / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    float amax = 0.f;
    for (int i = 0; i < kQK_K; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    for (int k = 0; k < kQK_K / 16; ++k) {
      int32_t sum = 0;
      for (int i = 16 * k; i < 16 * k + 16; ++i) {
        const int32_t q = int32_t(std::nearbyint(xb[i] * id));  // half to even
        out[b].q[i] = int8_t(q);
        sum += q;
      }
      out[b].bsums[k] = int16_t(sum);
    }
    out[b].d = d;
  }
}

// ---- x86 ------------------------------------------------------------------
#ifdef KV_HAVE_X86

using kq::unpack_scales_k4;

#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))

// quantize_q8k_scalar's blocks, 32 activations at a time.
KV_AVX2 void quantize_q8k_avx2(const float* x, int64_t cols, BlockQ8K* out) {
  const __m256 sign_mask = _mm256_set1_ps(-0.f);
  for (int64_t b = 0; b < cols / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < kQK_K / 8; ++i)
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(xb + 8 * i)));
    const float d = hmax256(amax) / 127.f;
    const __m256 idv = _mm256_set1_ps(d != 0.f ? 1.f / d : 0.f);
    for (int k = 0; k < kQK_K / 32; ++k) {
      __m256i q[4];
      for (int i = 0; i < 4; ++i)  // half to even
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * k + 8 * i), idv));
      out[b].bsums[2 * k] = int16_t(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      out[b].bsums[2 * k + 1] = int16_t(hsum_i32(_mm256_add_epi32(q[2], q[3])));
      // 32 int32 → 32 int8 in order (packs work within 128-bit lanes).
      __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q + 32 * k), p);
    }
    out[b].d = d;
  }
}

// 256 bits wide: AVX2 (vpmaddubsw, then vpmaddwd with the sub-block scales
// and vpaddd), and the two 256-bit vpdpwssd encodings for the kAvxVnni
// level (Q4_K/Q5_K; Q6_K keeps AVX2's kernel there: the same integers).
#define KV_ISA avx2
#define KV_TARGET __attribute__((target("avx2,fma,f16c")))
#define KV_MADD_ACC(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#define KV_WITH_Q6 1
#include "kernels/cpu/matmul_kquant_x86.inc"
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_MADD_ACC

#define KV_ISA avx_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define KV_MADD_ACC(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#define KV_WITH_Q6 0
#include "kernels/cpu/matmul_kquant_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_MADD_ACC

// GCC 12's avx512fintrin.h builds results on _mm512_undefined_*(), a
// self-initialised variable that -Wuninitialized reports when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KV_ISA avx512vl_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define KV_MADD_ACC(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#include "kernels/cpu/matmul_kquant_x86.inc"
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_MADD_ACC

// 512 bits wide: two sub-blocks (Q4_K/Q5_K) or two blocks of 32 (Q6_K) per
// instruction; Q6_K with avx512's kernel at both levels (as above).
#define KV_ISA avx512
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define KV_MADD_ACC_512(acc, a, b) _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
#define KV_WITH_Q6 1
#include "kernels/cpu/matmul_kquant_avx512.inc"
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_MADD_ACC_512

#define KV_ISA avx512_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define KV_MADD_ACC_512(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#define KV_WITH_Q6 0
#include "kernels/cpu/matmul_kquant_avx512.inc"
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_MADD_ACC_512
#pragma GCC diagnostic pop

#endif  // KV_HAVE_X86

}  // namespace

// The 512-bit tiles take 4 rows. Four streams measured faster on rows of
// 14,336 columns (an FFN's down projection: 1.10x, one thread, weights
// from DRAM) and level on rows of 4,096 (docs/kernels.md, "Weight streams
// in decode"): they stay with 2 there, and so do rows between (8,192, the
// 1B shape's down projection, was not measured).
int kquant_decode_streams(DType type, SimdLevel level, int64_t cols) {
  (void)type;
  const bool wide = level == SimdLevel::kAvx512 || level == SimdLevel::kAvx512Vnni;
  return wide && cols >= kFourStreamCols ? 4 : 2;
}

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
      return dispatch_tile<Scalar<DType::Q4_K>, BlockQ8K>;
    case DType::Q5_K:
      return dispatch_tile<Scalar<DType::Q5_K>, BlockQ8K>;
    default:
      return dispatch_tile<Scalar<DType::Q6_K>, BlockQ8K>;
  }
}

void quantize_row_q8k(const float* x, int64_t cols, BlockQ8K* out, SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level >= SimdLevel::kAvx2) return quantize_q8k_avx2(x, cols, out);
#endif
  (void)level;
  quantize_q8k_scalar(x, cols, out);
}

}  // namespace kvasir::cpu::detail
