// The K-quant batch kernel (n >= 8 activation rows): Q4_K, Q5_K and Q6_K at
// the 512-bit levels. The decode tiles (matmul_kquant_avx512.inc) decode a
// super-block's packed scales and split its quants inside every 2 × 4
// register tile: in a prefill each weight super-block was decoded again for
// every 4 activation rows. Here a block of weight rows is unpacked once per
// call into the thread's scratch (quants as bytes, the sub-block scales as
// the int16 vectors the decode tile permutes them into), and the register
// tile grows to 4 × 4. The integer sums and the f32 arithmetic of an output
// are the decode tile's, in its order: the same bits (docs/kernels.md,
// "K-quant batch kernel", has why the weights are unpacked per call, not
// kept).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu::detail {
namespace {

constexpr int kSubs = kq::kSuper / kQK;  // sub-blocks of 32 per super-block (8)

#ifdef KV_HAVE_X86

using kq::unpack_scales_k4;

// One super-block of one weight row, unpacked for the batch tiles.
struct alignas(64) Unpacked {  // Q4_K, Q5_K
  uint8_t q[kq::kSuper];       // sub-block s at [32 s, 32 s + 32): 0..15 (Q5_K 0..31)
  int16_t sc[kSubs / 2][32];   // pair k: lanes 0-15 sc[2k], 16-31 sc[2k+1]
                               // (vpdpbusd copy: sc[0..1], pair_sums_dpbusd's)
  int16_t m[2 * kSubs];        // m[s] twice: vpmaddwd with the bsums gives M[s]
  float d, dmin;
};
struct alignas(64) Unpacked6 {  // Q6_K
  uint8_t q[kq::kSuper];        // block c at [32 c, 32 c + 32): q + 32, 0..63
                                // (vpdpbusd copy: q, −32..31, signed)
  int16_t sc[kSubs / 2][32];    // pair p: lanes 8m..8m+7 the scale of sub-block 4p + m
                                // (vpdpbusd copy: sc[0..1], pair_sums_q6's)
  int32_t ncorr[16];            // vpdpbusd copy: what the +128 offset adds, negated
  float d;
};

template <DType T>
struct Format {
  using U = Unpacked;
  static constexpr int64_t kBytes = T == DType::Q5_K ? kq::kQ5KBytes : kq::kQ4KBytes;
};
template <>
struct Format<DType::Q6_K> {
  using U = Unpacked6;
  static constexpr int64_t kBytes = kq::kQ6KBytes;
};

// Weight rows unpacked at a time: 16 rows of 2048 columns are 72 KiB of
// scratch (of 8192 columns four times that): they stay in L2 while every
// activation row passes over them.
constexpr int64_t kBlockRows = 16;
constexpr int kTileW = 4, kTileX = 4;  // register tile: 16 accumulators of 32

template <class U>
U* scratch_for(int64_t count) {
  thread_local std::vector<U> buf;  // grow-only
  if (buf.size() < size_t(count)) buf.resize(size_t(count));
  return buf.data();
}

// GCC 12's avx512fintrin.h builds results on _mm512_undefined_*(), a
// self-initialised variable that -Wuninitialized reports when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KV_ISA avx512
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define KV_MADD_ACC_512(acc, a, b) _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
#define KV_WITH_Q6 1
#define KV_WITH_DPBUSD 0
#include "kernels/cpu/matmul_kquant_batch_avx512.inc"
#undef KV_WITH_DPBUSD
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_MADD_ACC_512

#define KV_ISA avx512_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define KV_MADD_ACC_512(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#define KV_WITH_Q6 1
#define KV_WITH_DPBUSD 1
#include "kernels/cpu/matmul_kquant_batch_avx512.inc"
#undef KV_WITH_DPBUSD
#undef KV_WITH_Q6
#undef KV_ISA
#undef KV_TARGET
#undef KV_MADD_ACC_512
#pragma GCC diagnostic pop

#endif  // KV_HAVE_X86

}  // namespace

KQuantBatchFn kquant_batch_kernel(DType type, SimdLevel level) {
#ifdef KV_HAVE_X86
  // Q6_K's decode tile has no VNNI path of its own; its batch kernel does
  // (pair_sums_q6), so a batch's level is measured apart from decode's
  // (dispatch.cpp: path_of), in the same numerics family.
  const bool vnni = level == SimdLevel::kAvx512Vnni;
  if (level != SimdLevel::kAvx512 && !vnni) return nullptr;
  switch (type) {
    case DType::Q4_K:
      return vnni ? avx512_vnni::batch<DType::Q4_K> : avx512::batch<DType::Q4_K>;
    case DType::Q5_K:
      return vnni ? avx512_vnni::batch<DType::Q5_K> : avx512::batch<DType::Q5_K>;
    case DType::Q6_K:
      return vnni ? avx512_vnni::batch<DType::Q6_K> : avx512::batch<DType::Q6_K>;
    default:
      return nullptr;
  }
#else
  (void)type;
  (void)level;
  return nullptr;
#endif
}

}  // namespace kvasir::cpu::detail
