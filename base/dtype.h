// base/dtype.h — tensor element types, numbered as GGUF/GGML number them.
//
// Block formats store `block` weights in `bytes` bytes. A row of n weights of
// a block type must have n % block == 0. Layouts of the formats Kvasir
// computes with (scales are IEEE half):
//   Q8_0: { f16 d; int8 q[32]; }            w = d * q
//   Q4_0: { f16 d; uint8 qs[16]; }          w = d * (q - 8)
//   Q4_1: { f16 d; f16 m; uint8 qs[16]; }   w = d * q + m
//   4-bit: byte j holds weight j (low nibble) and weight j + 16 (high nibble).
//   Q4_K, Q5_K, Q6_K: super-blocks of 256, see kernels/cpu/kquant.h.
//   MXFP4: { uint8 e; uint8 qs[16]; }       w = e2m1(q) * 2^(e - 127)
//          (E8M0 scale; e2m1 codes, nibbles laid out as Q4_0's; gpt-oss's
//          experts; kernels/cpu/matmul_mxfp4.cpp)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace kvasir {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
  // Not a GGML type (GGUF files never hold it): safetensors' F8_E4M3, FP8
  // weights with per-tensor or per-channel scales (base/fp8.h, read by the
  // CUDA backend only; docs/model-formats.md).
  F8_E4M3 = 0x10000,
  // safetensors' U8: raw bytes, read only as gpt-oss's MXFP4 expert blocks
  // and scales, which the folder reader repacks into MXFP4 (not computable).
  U8 = 0x10001,
};

struct DTypeInfo {
  DType type;
  const char* name;
  int64_t block;    // weights per block (1 for plain types)
  int64_t bytes;    // bytes per block
  bool computable;  // the CPU kernels can use it as a weight
};

// nullptr when the raw value is not a type Kvasir knows.
const DTypeInfo* dtype_info(uint32_t raw);
const DTypeInfo& dtype_info(DType t);
inline const char* dtype_name(DType t) { return dtype_info(t).name; }

// Bytes of a row of n elements; nullopt if n is not a multiple of the block
// size or the size overflows.
std::optional<uint64_t> dtype_row_bytes(DType t, int64_t n);

// Bytes of a whole tensor of the given dims (innermost first); nullopt on a
// negative dim, a row not a multiple of the block, or overflow.
std::optional<uint64_t> dtype_tensor_bytes(DType t, const int64_t* ne, int n_dims);

}  // namespace kvasir
