// kernels/cpu/rows16.h — quantised weights repacked 16 rows a block, one
// SIMD lane per weight row, and their matmul. matmul / matmul_group run a
// weight kept repacked (matmul.h keep_rows16) here: docs/kernels.md,
// "Weights repacked 16 rows a block".
//
// Layout. A Q8_0, Q4_0, Q4_1 or Q5_0 weight [rows, cols] with rows % 16 == 0
// and cols % 32 == 0 becomes [rows / 16, cols / 32] group blocks; a group
// block holds the 16 rows' blocks of those 32 columns in the same number of
// bytes as the 16 original blocks, so a repacked copy is the original's size:
//
//   Q8_0 (544 = 16 x 34): d[16] f16 | q[8][16][4] u8
//   Q4_0 (288 = 16 x 18): d[16] f16 | q[4][16][4] nibbles
//   Q4_1 (320 = 16 x 20): d[16] f16 | m[16] f16 | q[4][16][4] nibbles
//   Q5_0 (352 = 16 x 22): d[16] f16 | qh[16][4] | q[4][16][4] nibbles
//
// q[k][i][e] belongs to weight row i (of the 16): for Q8_0 the byte is
// w + 128 of the row's weight 4k + e; for the others its low nibble is
// weight 4k + e and its high nibble weight 16 + 4k + e. Q5_0's qh[i][k]
// holds the fifth bits of those weights: bit e of weight 4k + e, bit 4 + e
// of weight 16 + 4k + e. So one 64-byte line of q is one zmm (two ymm)
// whose lane i is weight row i, and an activation group of 4 bytes is
// broadcast to every lane.
//
// Bits contract. The activations are quantised as matmul quantises them
// (matmul_internal.h BlockQ8x: d_x, s_x = d_x · Σ q_x). Every output
// y[j, r] starts at +0 and takes, per block b in order,
//
//   isum = Σ q_w · q_x      exact (Q8_0: the signed quants; the others:
//                           the unsigned ones, 0..15 or 0..31)
//   acc  = fma(float(isum), d_w · d_x, acc)
//   acc  = fma(m_w, s_x, acc)   (not Q8_0; m_w: Q4_1's m, -8 d_w for
//                                Q4_0, -16 d_w for Q5_0)
//
// Every level (scalar, avx2, avx_vnni, avx512, avx512_vnni) computes
// exactly that — the integer sums are exact and each lane runs these f32
// operations — so the bits do not depend on the level, the number of
// activation rows, the row range or the threads. They are the AMX tiles'
// operations too (amx.cpp scale_add_scalar): for Q8_0, Q4_0 and Q4_1 the
// outputs equal amx_matmul's bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/dtype.h"
#include "base/tensor.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace kvasir::cpu {

constexpr int64_t kRows16 = 16;  // weight rows per group block

// A repacked weight: its type and shape beside its bytes.
struct Rows16View {
  DType type = DType::Q8_0;
  int64_t rows = 0, cols = 0;     // the weight's shape, as before repacking
  const uint8_t* data = nullptr;  // [rows / 16, cols / 32, group_bytes(type)]
};

// Whether a weight of this type and shape can be repacked.
bool rows16_supports(DType type, int64_t rows, int64_t cols);
// Bytes of one group block (16 x the type's block bytes); 0 if unsupported.
int64_t rows16_group_bytes(DType type);

// The original weight data[rows, cols] (rows of blocks, as GGUF stores it)
// repacked, and back. Throw kvasir::Error where rows16_supports is false.
std::vector<uint8_t> repack16(DType type, const void* data, int64_t rows, int64_t cols);
std::vector<uint8_t> unpack16(DType type, const void* data, int64_t rows, int64_t cols);

// Row r of the weight as f32, the bits dequantize_row (matmul.h) gives
// the original: what a tied embedding's lookup needs once its table is
// repacked. Throws kvasir::Error where r is out of range.
void rows16_dequantize_row(const Rows16View& w, int64_t r, float* out);

// y[n, w.rows] = x[n, w.cols] · Wᵀ (y must not alias x), at simd_level().
// Threads take whole group blocks (16 output rows). pool may be nullptr.
void rows16_matmul(const Rows16View& w, const float* x, int64_t n, float* y, ThreadPool* pool);

// y[i] = x · W_iᵀ for up to kMaxRows16Group weights of the same columns
// (q, k, v; gate, up) as one call: one activation quantisation and one
// split of all their group blocks over the pool. Every output has the bits
// rows16_matmul gives it. Throws kvasir::Error on an unsupported weight or
// differing columns.
constexpr int kMaxRows16Group = 8;
void rows16_matmul_group(const Rows16View* w, float* const* y, int count, const float* x, int64_t n,
                         ThreadPool* pool);

namespace detail {

// A weight kept repacked (matmul.h keep_rows16): the copy and its view.
struct Rows16Kept {
  Rows16View view;
  std::vector<uint8_t> bytes;
};
// The kept copy of w (same data, type and shape), or null. One atomic load
// while nothing is kept.
std::shared_ptr<const Rows16Kept> rows16_find(const TensorView& w);
// The types of which some weight is kept now, in Q8_0, Q4_0, Q4_1, Q5_0
// order: what the SIMD summary lists as "<type>/rows16:<level>".
std::vector<DType> rows16_kept_types();

// The output rows [r0, r1) (multiples of 16) of rows16_matmul at an
// explicit level (clamped to what the CPU has), every activation row; the
// other outputs are not written. For tests, benchmarks and a caller that
// splits the rows itself.
void rows16_matmul_at(const Rows16View& w, const float* x, int64_t n, float* y, int64_t r0,
                      int64_t r1, ThreadPool* pool, SimdLevel level);

}  // namespace detail
}  // namespace kvasir::cpu
