// kernels/cpu/matmul_internal.h — shared by the matmul driver and its
// per-format kernels. Not part of the kernels' face.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/dtype.h"
#include "base/tensor.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace kvasir::cpu::detail {

constexpr int kQK = 32;  // weights per quantised block (and per K-quant sub-block)

// An activation block quantised to 8 bits: x ≈ d * q, s = d * sum(q).
struct BlockQ8x {
  float d;
  float s;
  int8_t q[kQK];
};
static_assert(sizeof(BlockQ8x) == 40);

// 256 activations quantised to 8 bits for K-quant weights (llama.cpp's
// block_q8_K numerics): x ≈ d·q with one f32 d = amax/127 per super-block,
// so a K-quant super-block's sub-block scales apply to integer sums and the
// f32 work is one product per super-block. bsums[k] = Σ q over weights
// 16k..16k+15 (Q4_K/Q5_K's mins term). q first and 64-byte aligned: a pair
// of sub-blocks is one aligned 64-byte load.
constexpr int kQK_K = 256;
struct alignas(64) BlockQ8K {
  int8_t q[kQK_K];
  int16_t bsums[kQK_K / 16];
  float d;
};
static_assert(sizeof(BlockQ8K) == 320);

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// A register tile: nw (1..kMaxNW; 4 where decode_streams says so) weight rows
// × nx (1..kMaxNX) activation rows.
//   y[i + j * y_stride] = dot(w + i * w_stride, x_j),   x_j = x + j * x_stride
// (w_stride in bytes, x_stride in elements of x's type). x is const float*
// for F32/F16/BF16 weights, const BlockQ8x* for Q8_0/Q4_0/Q4_1/Q5_0/MXFP4 (cols /
// 32 blocks per row) and const BlockQ8K* for the K-quants (cols / 256).
constexpr int kMaxNW = 2, kMaxNX = 4;
using DotFn = void (*)(const uint8_t* w, int64_t w_stride, int nw, const void* x, int64_t x_stride,
                       int nx, int64_t cols, float* y, int64_t y_stride);

// One dispatcher for every kernel family: K::template tile<NW, NX>(w, w_stride,
// x, x_stride, cols, y, y_stride) with x of type const X*, instantiated for
// every tile shape up to K::kNW × kMaxNX. Weight rows beyond K::kNW (a family
// whose wider tiles do not pay: register pressure) run as more tiles.
template <class K, class X, int NW>
void tile_nx(const uint8_t* w, int64_t w_stride, const X* x, int64_t x_stride, int nx, int64_t cols,
             float* y, int64_t y_stride) {
  switch (nx) {
    case 1:
      return K::template tile<NW, 1>(w, w_stride, x, x_stride, cols, y, y_stride);
    case 2:
      return K::template tile<NW, 2>(w, w_stride, x, x_stride, cols, y, y_stride);
    case 3:
      return K::template tile<NW, 3>(w, w_stride, x, x_stride, cols, y, y_stride);
    default:
      return K::template tile<NW, 4>(w, w_stride, x, x_stride, cols, y, y_stride);
  }
}

template <class K, class X>
void dispatch_tile(const uint8_t* w, int64_t w_stride, int nw, const void* xv, int64_t x_stride,
                   int nx, int64_t cols, float* y, int64_t y_stride) {
  const auto* x = static_cast<const X*>(xv);
  if constexpr (K::kNW >= 4) {
    if (nw >= 4) return tile_nx<K, X, 4>(w, w_stride, x, x_stride, nx, cols, y, y_stride);
  }
  if constexpr (K::kNW >= 2) {
    if (nw >= 2) return tile_nx<K, X, 2>(w, w_stride, x, x_stride, nx, cols, y, y_stride);
  }
  for (int i = 0; i < nw; ++i)
    tile_nx<K, X, 1>(w + i * w_stride, w_stride, x, x_stride, nx, cols, y + i, y_stride);
}

// A wide decode tile: up to kMaxNXWide activation rows in one pass over the
// weight rows (a decode row carrying speculative drafts: 1 + k positions,
// k <= 4 by default), where the narrow tiles would unpack each weight block
// again for the rows past kMaxNX (a Q8_0 output head at 5 rows spent nearly
// a third of its time in that second 2x1 tile: docs/speculative.md).
// K::kNXWide (<= kMaxNXWide) is the most rows its registers hold in one tile
// (AVX-512's 32); more take a narrow tile of kMaxNX rows first. Each output
// gets exactly the bits of the narrow tile: the same operations per (row,
// activation).
constexpr int kMaxNXWide = 8;

template <class K, class X, int NW>
void tile_nx_wide(const uint8_t* w, int64_t w_stride, const X* x, int64_t x_stride, int nx,
                  int64_t cols, float* y, int64_t y_stride) {
  if (nx > K::kNXWide) {  // kMaxNX rows, then the rest
    K::template tile<NW, kMaxNX>(w, w_stride, x, x_stride, cols, y, y_stride);
    return tile_nx_wide<K, X, NW>(w, w_stride, x + kMaxNX * x_stride, x_stride, nx - kMaxNX, cols,
                                  y + kMaxNX * y_stride, y_stride);
  }
  switch (nx) {
    case 5:
      if constexpr (K::kNXWide >= 5)
        return K::template tile<NW, 5>(w, w_stride, x, x_stride, cols, y, y_stride);
      break;
    case 6:
      if constexpr (K::kNXWide >= 6)
        return K::template tile<NW, 6>(w, w_stride, x, x_stride, cols, y, y_stride);
      break;
    case 7:
      if constexpr (K::kNXWide >= 7)
        return K::template tile<NW, 7>(w, w_stride, x, x_stride, cols, y, y_stride);
      break;
    case 8:
      if constexpr (K::kNXWide >= 8)
        return K::template tile<NW, 8>(w, w_stride, x, x_stride, cols, y, y_stride);
      break;
    default:
      break;
  }
  return tile_nx<K, X, NW>(w, w_stride, x, x_stride, nx, cols, y, y_stride);
}

template <class K, class X>
void dispatch_tile_wide(const uint8_t* w, int64_t w_stride, int nw, const void* xv,
                        int64_t x_stride, int nx, int64_t cols, float* y, int64_t y_stride) {
  const auto* x = static_cast<const X*>(xv);
  if (nw >= 2) return tile_nx_wide<K, X, 2>(w, w_stride, x, x_stride, nx, cols, y, y_stride);
  for (int i = 0; i < nw; ++i)
    tile_nx_wide<K, X, 1>(w + i * w_stride, w_stride, x, x_stride, nx, cols, y + i, y_stride);
}

// A batch kernel (F32/F16/BF16 weights, n >= kMaxNX activation rows): the
// output rows [r0, r1) for every activation row, with its own register
// tiles and cache blocking. w: the whole weight (row_bytes a row); x: [n,
// cols]; y[j * y_stride + r]. Each output gets exactly the bits the decode
// tile (DotFn, n < kMaxNX) gives it: the same f32 operations in the same
// order, whatever n, the range or the tile it falls in.
using BatchFn = void (*)(const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1,
                         const float* x, int64_t n, int64_t cols, float* y, int64_t y_stride);
// nullptr where the type has none at the level (then the DotFn tiles run).
BatchFn float_batch_kernel(DType type, SimdLevel level);

// A K-quant batch kernel (from 8 activation rows, matmul.cpp
// kKQuantBatchRows): output rows [r0, r1) for every activation row, the
// weight's super-blocks unpacked once per call instead of once per register
// tile (matmul_kquant_batch.cpp). x: [n, cols / 256]. Each output gets
// exactly the bits the decode tile (DotFn) of the same level gives it.
using KQuantBatchFn = void (*)(const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1,
                               const BlockQ8K* x, int64_t n, int64_t cols, float* y,
                               int64_t y_stride);
// nullptr where the type has none at the level (then the DotFn tiles run).
KQuantBatchFn kquant_batch_kernel(DType type, SimdLevel level);
// Turns that kernel off (the decode tiles run K-quant batches, as
// KVASIR_KQUANT_BATCH=0 does) or on, so bench/kernels can pair the two in
// one run. Call only while no matmul runs.
void set_kquant_batch_for_bench(bool on);

// Caps the weight rows per tile (1..kMaxNW) so bench/kernels can time the
// 1×4 and 2×4 tiles in one run. Call only while no matmul runs.
void set_max_tile_rows_for_bench(int nw);

// The tile kernel of a weight type at a level (a level without a path of its
// own for the type gives the one below it: the same pointer); nullptr for a
// type the family does not handle.
DotFn quant_dot_kernel(DType type, SimdLevel level);
DotFn kquant_dot_kernel(DType type, SimdLevel level);
DotFn float_dot_kernel(DType type, SimdLevel level);
DotFn dot_kernel(DType type, SimdLevel level);  // any family
// The wide tile (nx up to kMaxNXWide) of a type at a level; nullptr where it
// has none (then rows past kMaxNX take more narrow tiles).
DotFn quant_wide_kernel(DType type, SimdLevel level);
DotFn wide_dot_kernel(DType type, SimdLevel level);  // any family
// Decode's weight streams per tile of dot_kernel(type, level) over rows of
// `cols`: 4 where its tile takes 4 rows (nw = 4, at w_stride apart; only
// decode passes it: matmul.cpp, decode_rows) and that measured faster,
// else 2.
int decode_streams(DType type, SimdLevel level, int64_t cols);
constexpr int64_t kFourStreamCols = 12288;  // from this many columns, 4 (K-quants)
// Likewise for the K-quants (matmul_kquant.cpp).
int kquant_decode_streams(DType type, SimdLevel level, int64_t cols);
// MXFP4 (matmul_mxfp4.cpp): its tile at a level, over BlockQ8x activations.
DotFn mxfp4_dot_kernel(SimdLevel level);
// The MXFP4 batch kernel (from kMxfp4BatchRows activation rows, matmul.cpp):
// output rows [r0, r1) for every activation row, each weight block unpacked
// once per call (matmul_mxfp4.cpp). x: [n, cols / 32]. Each output gets
// exactly the bits the decode tile of the same numerics family gives it.
using Mxfp4BatchFn = void (*)(const uint8_t* w, int64_t row_bytes, int64_t r0, int64_t r1,
                              const BlockQ8x* x, int64_t n, int64_t cols, float* y,
                              int64_t y_stride);
// nullptr at kScalar (then the decode tiles run).
Mxfp4BatchFn mxfp4_batch_kernel(SimdLevel level);
// Turns it off (as KVASIR_MXFP4_BATCH=0 does) or on, so bench/kernels can
// pair it with the tiles in one run. Call only while no matmul runs.
void set_mxfp4_batch_for_bench(bool on);
// 2^(e - 128): an E8M0 scale halved, as the doubled e2m1 table wants it.
float e8m0_half(uint8_t e);
// A row of MXFP4 blocks (cols % 32 == 0) as f32.
void dequantize_row_mxfp4(const uint8_t* row, int64_t cols, float* out);

// matmul at an explicit level (the choice skipped): for the dispatch's probe
// and for benchmarks.
void matmul_at(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool,
               SimdLevel level);

// The level matmul uses for (type, class): the forced level, the measured
// choice, or (first call of that kernel, auto mode) a measurement now with
// `cols` columns. Thread-safe; one atomic load once chosen.
SimdLevel kernel_level(DType type, RowsClass rows, int64_t cols);
// Whether the batch kernel of the type runs on AMX tiles (after
// kernel_level chose it; false when forced, or without AMX).
bool kernel_amx(DType type);
// From how many rows a weight kept packed (amx.h) runs on the tiles; 0: as
// kernel_amx says.
int kernel_amx_packed_rows(DType type);
void forget_kernel_choices();

// The 256-bit vpdpbusd the kAvxVnni level uses: VEX (avxvnni) when the CPU
// has it, else EVEX (avx512vnni + avx512vl).
bool cpu_has_vex_vnni();
bool cpu_has_evex_vnni256();

// Quantises x[cols] (cols % 32 == 0) into cols / 32 blocks. Every level gives
// bit-identical blocks (round half to even, same scale arithmetic).
void quantize_row_q8x(const float* x, int64_t cols, BlockQ8x* out, SimdLevel level);
// Quantises x[cols] (cols % 256 == 0) into cols / 256 blocks for the
// K-quant kernels; bit-identical blocks at every level, likewise.
void quantize_row_q8k(const float* x, int64_t cols, BlockQ8K* out, SimdLevel level);

}  // namespace kvasir::cpu::detail
