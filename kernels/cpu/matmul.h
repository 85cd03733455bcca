// kernels/cpu/matmul.h — y = x · Wᵀ with W in its stored type.
//
// W is a TensorView of shape [out = rows, in = cols] (GGUF: ne[0] = in).
// Supported weight types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K,
// Q6_K, MXFP4. Quantised types quantise each activation row to 8 bits
// (blocks of 32, d = amax/127) once per call and use integer dot products
// (AVX2 when the CPU has it, chosen at run time; scalar otherwise — see
// simd.h). F32/F16/BF16 accumulate in f32.
//
// Work is split over output rows; each thread runs every weight row of its
// range over a tile of activation rows (4 at a time), so a weight block is
// loaded once for many activation rows. The quantised activations live in a
// grow-only thread_local buffer of the calling thread: no allocation per call
// in steady state.
#pragma once

#include <cstdint>

#include "base/tensor.h"
#include "kernels/cpu/thread_pool.h"

namespace kvasir::cpu {

// x: [n, w.cols()] f32, y: [n, w.rows()] f32 (y must not alias x). pool may be
// nullptr (runs on the caller). Throws kvasir::Error on an unsupported type,
// cols not a multiple of the block size, or a tensor smaller than its shape.
void matmul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool);

// One product of a group (matmul_group): a weight and where its output goes.
struct MatmulOut {
  const TensorView* w = nullptr;
  float* y = nullptr;  // [n, w->rows()] f32
};

// y_i = x · W_iᵀ for the `count` products of one input (q, k and v; gate and
// up) as one parallel call: one activation quantisation and one join instead
// of one each (at two threads a decode step spent 15% of its CPU time
// waiting at joins; docs/kernels.md, "What bounds decode"). Outputs are
// bit-identical to `count` matmul calls, which it makes instead when the
// products would not take the same kernel input (different SIMD levels,
// quantised beside float weights, the AMX path, more than 8 products).
// Throws as matmul does, and when the weights' columns differ.
void matmul_group(const MatmulOut* outs, int count, const float* x, int64_t n, ThreadPool* pool);

// Keeps w in the AMX tiles' layout for later matmuls of it (kernels/cpu/
// amx.h): the tiles then skip packing the weight on every call and run from
// fewer rows (measured per type: simd.h KernelChoice::amx_packed_rows).
// The caller promises w's bytes neither change nor go away before
// drop_packed(w). Packed copies take 1.2x (Q8_0) to 2.2x (4-bit types) the
// weight's bytes; all kept in the process stay within budget_bytes. False
// (nothing kept, matmul unchanged) where the tiles would not run w: no
// usable AMX, no tile path for the type, the dispatch picked the AVX-512
// kernels for it, a forced level, KVASIR_AMX_PACK=0 (for comparisons), or
// over budget.
bool keep_packed(const TensorView& w, uint64_t budget_bytes);
void drop_packed(const TensorView& w);

// Keeps w repacked 16 rows a block (rows16.h) in a process-wide table
// found by w.data (type and shape checked; counted: every keep needs its
// drop): every later matmul / matmul_group of w runs rows16_matmul on the
// copy, at every row count, so a product's bits do not depend on how many
// rows share its batch, and dequantize_row reads the copy too (the same
// bits). The copy is the weight's size; once this returns true, nothing
// here reads w's bytes until the last drop (the owner may release their
// pages), but they must stay valid: a later keep repacks them again.
// The decision depends on the type, the shape and the switch alone, so
// every process decides alike. False (nothing kept) where rows16_supports
// is false or KVASIR_ROWS16=0 is set (for comparisons).
bool keep_rows16(const TensorView& w);
void drop_rows16(const TensorView& w);
// Whether keep_rows16 may keep anything: KVASIR_ROWS16 is not "0".
bool rows16_enabled();

// Dequantise row r of w into out[w.cols()] (f32). Used for embeddings; a
// weight kept repacked (keep_rows16) is read from its copy.
// Throws kvasir::Error if r is out of range or the type is unsupported.
void dequantize_row(const TensorView& w, int64_t r, float* out);

}  // namespace kvasir::cpu
