// Weights repacked 16 rows a block (rows16.h): the repacking, the scalar
// kernel (the bits contract written out), the x86 kernels
// (rows16_x86.inc) and the driver.
#include "kernels/cpu/rows16.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu {
namespace detail {
namespace {

// rows16.h's layout of a type: a group block's bytes (16 original
// blocks), where its quants start, where an original block's quants start,
// and m_w / d_w (Q4_0, Q5_0; Q4_1 carries its m, Q8_0 has no offset).
struct Layout {
  int64_t bytes, quants, from;
  float offset;
};
constexpr Layout layout(DType t) {
  switch (t) {
    case DType::Q8_0:
      return {16 * 34, 32, 2, 0.f};
    case DType::Q4_0:
      return {16 * 18, 32, 2, -8.f};
    case DType::Q4_1:
      return {16 * 20, 64, 4, 0.f};
    case DType::Q5_0:
      return {16 * 22, 96, 6, -16.f};
    default:
      return {0, 0, 0, 0.f};
  }
}
constexpr int64_t kScalesAt = 0;   // d[16] f16
constexpr int64_t kSecondAt = 32;  // Q4_1: m[16] f16; Q5_0: qh[16][4]

// Activations: the matmul's 8-bit blocks, and (Q8_0) each block's Σ q_x,
// [n, nb] both.
struct Rows16X {
  const BlockQ8x* x;
  const int32_t* xsum;
  int64_t nb;
};

// The group blocks [g0, g1) of a weight: y[j * y_stride + 16 g + i].
using Rows16Fn = void (*)(const uint8_t* w, int64_t g0, int64_t g1, const Rows16X& x, int64_t n,
                          float* y, int64_t y_stride);

// ---- scalar: the contract -------------------------------------------------

// Weight row i's quant e (0..31) of a group block, as the integer the sum
// takes (Q8_0 signed, the others unsigned).
template <DType T>
int32_t quant(const uint8_t* g, int i, int e) {
  const uint8_t* q = g + layout(T).quants;
  if constexpr (T == DType::Q8_0) return int32_t(q[64 * (e / 4) + 4 * i + e % 4]) - 128;
  const int k = (e % 16) / 4, hi = e / 16;
  const uint8_t byte = q[64 * k + 4 * i + e % 4];
  int32_t v = hi ? byte >> 4 : byte & 0x0f;
  if constexpr (T == DType::Q5_0) v |= ((g[kSecondAt + 4 * i + k] >> (4 * hi + e % 4)) & 1) << 4;
  return v;
}

template <DType T>
void kernel_scalar(const uint8_t* w, int64_t g0, int64_t g1, const Rows16X& x, int64_t n, float* y,
                   int64_t y_stride) {
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t j = 0; j < n; ++j)
      for (int i = 0; i < kRows16; ++i) {
        float acc = 0.f;
        for (int64_t b = 0; b < x.nb; ++b) {
          const uint8_t* blk = w + (g * x.nb + b) * layout(T).bytes;
          const BlockQ8x& xb = x.x[j * x.nb + b];
          int32_t isum = 0;
          for (int e = 0; e < kQK; ++e) isum += quant<T>(blk, i, e) * int32_t(xb.q[e]);
          const float d = fp16_to_f32(load_u16(blk + kScalesAt + 2 * i));
          acc = std::fma(float(isum), d * xb.d, acc);
          if constexpr (T != DType::Q8_0) {
            const float m = T == DType::Q4_1 ? fp16_to_f32(load_u16(blk + kSecondAt + 2 * i))
                                             : layout(T).offset * d;
            acc = std::fma(m, xb.s, acc);
          }
        }
        y[j * y_stride + g * kRows16 + i] = acc;
      }
}

// ---- x86 ------------------------------------------------------------------
#ifdef KV_HAVE_X86
// GCC 12's avx512fintrin.h builds results on _mm512_undefined_*(), a
// self-initialised variable that -Wuninitialized reports when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KV_ISA avx2
#define KV_TARGET __attribute__((target("avx2,fma,f16c")))
#define KV_BITS 256
#define KV_VNNI 0
#include "kernels/cpu/rows16_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_VNNI

#define KV_ISA avx_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define KV_VNNI 1
#define KV_DPBUSD(a, u, s) _mm256_dpbusd_avx_epi32(a, u, s)
#include "kernels/cpu/rows16_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DPBUSD

#define KV_ISA avx512vl_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define KV_DPBUSD(a, u, s) _mm256_dpbusd_epi32(a, u, s)
#include "kernels/cpu/rows16_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DPBUSD
#undef KV_VNNI
#undef KV_BITS

#define KV_ISA avx512
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define KV_BITS 512
#define KV_VNNI 0
#include "kernels/cpu/rows16_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_VNNI

#define KV_ISA avx512_vnni
#define KV_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define KV_VNNI 1
#define KV_DPBUSD(a, u, s) _mm512_dpbusd_epi32(a, u, s)
#include "kernels/cpu/rows16_x86.inc"
#undef KV_ISA
#undef KV_TARGET
#undef KV_DPBUSD
#undef KV_VNNI
#undef KV_BITS
#pragma GCC diagnostic pop
#endif  // KV_HAVE_X86

template <template <DType> class K>
Rows16Fn pick(DType type) {
  switch (type) {
    case DType::Q8_0:
      return K<DType::Q8_0>::run;
    case DType::Q4_0:
      return K<DType::Q4_0>::run;
    case DType::Q4_1:
      return K<DType::Q4_1>::run;
    case DType::Q5_0:
      return K<DType::Q5_0>::run;
    default:
      return nullptr;
  }
}

template <DType T>
struct Scalar {
  static constexpr Rows16Fn run = kernel_scalar<T>;
};

Rows16Fn rows16_kernel(DType type, SimdLevel level) {
#ifdef KV_HAVE_X86
  switch (level) {
    case SimdLevel::kAvx512Vnni:
      return pick<avx512_vnni::Kernel>(type);
    case SimdLevel::kAvx512:
      return pick<avx512::Kernel>(type);
    case SimdLevel::kAvxVnni:
      return cpu_has_vex_vnni() ? pick<avx_vnni::Kernel>(type) : pick<avx512vl_vnni::Kernel>(type);
    case SimdLevel::kAvx2:
      return pick<avx2::Kernel>(type);
    case SimdLevel::kScalar:
      break;
  }
#endif
  (void)level;
  return pick<Scalar>(type);
}

// The level a call runs at: the asked one, or the best below it the CPU has.
SimdLevel usable_level(SimdLevel level) {
  while (level != SimdLevel::kScalar && !simd_level_available(level))
    level = SimdLevel(int(level) - 1);
  return level;
}

}  // namespace

namespace {

// The activation rows x[n, cols] as the kernels take them (and, with
// sums, each block's Σ q_x for Q8_0), on the pool's threads when there are
// enough: into the calling thread's grow-only buffers (a worker naming
// them would get its own), valid until its next call.
Rows16X prepare(const float* x, int64_t n, int64_t cols, bool sums, SimdLevel level,
                ThreadPool* pool) {
  const int64_t nb = cols / kQK;
  thread_local std::vector<BlockQ8x> xq;  // grow-only
  thread_local std::vector<int32_t> xsum;
  if (xq.size() < size_t(n * nb)) {
    xq.resize(size_t(n * nb));
    xsum.resize(size_t(n * nb));
  }
  BlockQ8x* const xqp = xq.data();
  int32_t* const xsp = xsum.data();
  auto body = [&](int64_t j0, int64_t j1, int) {
    for (int64_t j = j0; j < j1; ++j) {
      quantize_row_q8x(x + j * cols, cols, xqp + j * nb, level);
      for (int64_t k = j * nb; sums && k < (j + 1) * nb; ++k) {
        int32_t s = 0;
        for (int e = 0; e < kQK; ++e) s += xqp[k].q[e];
        xsp[k] = s;
      }
    }
  };
  if (pool && n * cols >= (int64_t(1) << 16))  // as matmul.cpp's quantize_rows
    pool->parallel_for(n, body);
  else
    body(0, n, 0);
  return {xqp, xsp, nb};
}

}  // namespace

void rows16_matmul_at(const Rows16View& w, const float* x, int64_t n, float* y, int64_t r0,
                      int64_t r1, ThreadPool* pool, SimdLevel level) {
  KV_CHECK(rows16_supports(w.type, w.rows, w.cols), "rows16: no layout for {} [{}, {}]",
           dtype_name(w.type), w.rows, w.cols);
  KV_CHECK(r0 >= 0 && r0 <= r1 && r1 <= w.rows && r0 % kRows16 == 0 && r1 % kRows16 == 0,
           "rows16: row range [{}, {}) of {} not on 16-row groups", r0, r1, w.rows);
  if (n <= 0 || r0 == r1) return;
  level = usable_level(level);
  const Rows16X act = prepare(x, n, w.cols, w.type == DType::Q8_0, level, pool);
  const Rows16Fn fn = rows16_kernel(w.type, level);
  const int64_t g0 = r0 / kRows16, groups = (r1 - r0) / kRows16;
  if (!pool || pool->size() <= 1 || groups == 1)
    return fn(w.data, g0, g0 + groups, act, n, y, w.rows);
  pool->parallel_for(
      groups, [&](int64_t b, int64_t e, int) { fn(w.data, g0 + b, g0 + e, act, n, y, w.rows); });
}

namespace {

// Moves one original block (row i of its group) into its group block, or
// (back) out of it: the bytes rows16.h lays out.
void place(DType type, uint8_t* orig, uint8_t* group, int i, bool back) {
  auto move = [back](uint8_t* o, uint8_t* g, size_t bytes) {
    back ? std::memcpy(o, g, bytes) : std::memcpy(g, o, bytes);
  };
  move(orig, group + kScalesAt + 2 * i, 2);  // d
  const bool q8 = type == DType::Q8_0;
  const int64_t quants = layout(type).quants, from = layout(type).from;
  if (type == DType::Q4_1) move(orig + 2, group + kSecondAt + 2 * i, 2);  // m
  // Q8_0: byte k of a group line is weight 4k + e, stored + 128; the
  // nibble types' original byte 4k + e is already (4k + e, 16 + 4k + e).
  for (int k = 0; k < (q8 ? 8 : 4); ++k)
    for (int e = 0; e < 4; ++e) {
      uint8_t* o = orig + from + 4 * k + e;
      uint8_t* g = group + quants + 64 * k + 4 * i + e;
      if (back)
        *o = q8 ? uint8_t(*g ^ 0x80) : *g;
      else
        *g = q8 ? uint8_t(*o ^ 0x80) : *o;
    }
  if (type != DType::Q5_0) return;
  uint8_t* gh = group + kSecondAt + 4 * i;  // qh[i][k]: bits 4k.. and 16 + 4k.. of the u32
  uint32_t qh = 0;
  if (back) {
    for (int k = 0; k < 4; ++k)
      qh |= uint32_t(gh[k] & 0x0f) << (4 * k) | uint32_t(gh[k] >> 4) << (16 + 4 * k);
    std::memcpy(orig + 2, &qh, 4);
  } else {
    std::memcpy(&qh, orig + 2, 4);
    for (int k = 0; k < 4; ++k)
      gh[k] = uint8_t(((qh >> (4 * k)) & 0x0f) | ((qh >> (16 + 4 * k)) & 0x0f) << 4);
  }
}

std::vector<uint8_t> convert(DType type, const void* data, int64_t rows, int64_t cols, bool back) {
  KV_CHECK(rows16_supports(type, rows, cols), "rows16: no layout for {} [{}, {}]", dtype_name(type),
           rows, cols);
  const int64_t nb = cols / kQK, gb = rows16_group_bytes(type), bb = gb / kRows16;
  std::vector<uint8_t> out(size_t(rows * nb * bb));
  auto* in = const_cast<uint8_t*>(static_cast<const uint8_t*>(data));
  uint8_t* orig = back ? out.data() : in;
  uint8_t* packed = back ? in : out.data();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      place(type, orig + (r * nb + b) * bb, packed + ((r / kRows16) * nb + b) * gb,
            int(r % kRows16), back);
  return out;
}

}  // namespace
}  // namespace detail

bool rows16_supports(DType type, int64_t rows, int64_t cols) {
  return rows16_group_bytes(type) > 0 && rows > 0 && cols > 0 && rows % kRows16 == 0 &&
         cols % detail::kQK == 0;
}

int64_t rows16_group_bytes(DType type) {
  return detail::layout(type).bytes;
}

std::vector<uint8_t> repack16(DType type, const void* data, int64_t rows, int64_t cols) {
  return detail::convert(type, data, rows, cols, false);
}

std::vector<uint8_t> unpack16(DType type, const void* data, int64_t rows, int64_t cols) {
  return detail::convert(type, data, rows, cols, true);
}

void rows16_dequantize_row(const Rows16View& w, int64_t r, float* out) {
  KV_CHECK(rows16_supports(w.type, w.rows, w.cols), "rows16: no layout for {} [{}, {}]",
           dtype_name(w.type), w.rows, w.cols);
  KV_CHECK(r >= 0 && r < w.rows, "rows16_dequantize_row: row {} out of range [0, {})", r, w.rows);
  // The row's original blocks back, then dequantize_row's own arithmetic.
  const int64_t nb = w.cols / detail::kQK, gb = rows16_group_bytes(w.type), bb = gb / kRows16;
  thread_local std::vector<uint8_t> row;  // grow-only
  if (row.size() < size_t(nb * bb)) row.resize(size_t(nb * bb));
  auto* packed = const_cast<uint8_t*>(w.data);  // only read: place(..., back = true)
  for (int64_t b = 0; b < nb; ++b)
    detail::place(w.type, row.data() + b * bb, packed + ((r / kRows16) * nb + b) * gb,
                  int(r % kRows16), true);
  TensorView v;
  v.type = w.type;
  v.n_dims = 2;
  v.ne[0] = w.cols;
  v.ne[1] = 1;
  v.data = row.data();
  v.nbytes = uint64_t(nb * bb);
  dequantize_row(v, 0, out);
}

void rows16_matmul(const Rows16View& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  detail::rows16_matmul_at(w, x, n, y, 0, w.rows, pool, simd_level());
}

void rows16_matmul_group(const Rows16View* w, float* const* y, int count, const float* x, int64_t n,
                         ThreadPool* pool) {
  KV_CHECK(count >= 0 && count <= kMaxRows16Group, "rows16: {} products in a group, at most {}",
           count, kMaxRows16Group);
  if (n <= 0 || count == 0) return;
  bool sums = false;
  int64_t start[kMaxRows16Group + 1] = {0};  // product i's groups: [start[i], start[i + 1])
  detail::Rows16Fn fn[kMaxRows16Group];
  const SimdLevel level = detail::usable_level(simd_level());
  for (int i = 0; i < count; ++i) {
    KV_CHECK(rows16_supports(w[i].type, w[i].rows, w[i].cols) && w[i].cols == w[0].cols,
             "rows16: product {} ({} [{}, {}]) has no layout or not product 0's columns", i,
             dtype_name(w[i].type), w[i].rows, w[i].cols);
    sums = sums || w[i].type == DType::Q8_0;
    fn[i] = detail::rows16_kernel(w[i].type, level);
    start[i + 1] = start[i] + w[i].rows / kRows16;
  }
  const detail::Rows16X act = detail::prepare(x, n, w[0].cols, sums, level, pool);
  // Each group block is one weight's 16 rows, so any split of the joint
  // range gives every output the bits of its own rows16_matmul.
  auto body = [&](int64_t g0, int64_t g1, int) {
    for (int i = 0; i < count; ++i) {
      const int64_t b = std::max(g0, start[i]), e = std::min(g1, start[i + 1]);
      if (b < e) fn[i](w[i].data, b - start[i], e - start[i], act, n, y[i], w[i].rows);
    }
  };
  if (pool && pool->size() > 1 && start[count] > 1)
    pool->parallel_for(start[count], body);
  else
    body(0, start[count], 0);
}

}  // namespace kvasir::cpu
