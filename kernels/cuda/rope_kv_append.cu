// RoPE + KV append (kernels/cuda/rope_kv_append.h): one block per token.
// The block's threads walk the rotated pairs of q and k (one sincosf per
// pair and head), the dimensions past rot_dim, and v.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope_kv_append.h"

namespace kvasir::cuda {
namespace {

struct Rot {
  int32_t half;
  RopeLayout layout;
};

// Rotates pair i of a head row: writes the two outputs through `put`.
template <class Put>
__device__ __forceinline__ void rotate_pair(const float* row, int32_t i, Rot r, float angle,
                                            Put put) {
  float s, c;
  sincosf(angle, &s, &c);
  const int32_t i0 = r.layout == RopeLayout::kAdjacent ? 2 * i : i;
  const int32_t i1 = r.layout == RopeLayout::kAdjacent ? 2 * i + 1 : i + r.half;
  const float x0 = row[i0], x1 = row[i1];
  put(i0, x0 * c - x1 * s);
  put(i1, x0 * s + x1 * c);
}

// Cache slot of token t: the element offset of (block, head 0, slot, 0), or
// -1 (error set) when the batch does not place it.
__device__ int64_t cache_slot(const GpuKvLayer& kv, const GpuAttnBatch& b, int32_t t,
                              int32_t* error) {
  const int s = detail::find_seq(b.q_start, b.n_seqs, t);
  if (s < 0) {
    if (threadIdx.x == 0) detail::set_error(error, kErrorBatch);
    return -1;
  }
  const int64_t pos = int64_t(b.pos0[s]) + (t - b.q_start[s]);
  const int64_t logical = pos / kv.block_size;
  if (pos < 0 || logical >= b.max_blocks) {
    if (threadIdx.x == 0) detail::set_error(error, kErrorPosition);
    return -1;
  }
  const int32_t block = b.block_tables[int64_t(s) * b.max_blocks + logical];
  if (block < 0 || block >= kv.n_blocks) {
    if (threadIdx.x == 0) detail::set_error(error, kErrorBlockId);
    return -1;
  }
  return kv_offset(kv, block, 0, pos % kv.block_size);
}

__global__ void rope_kv_append_kernel(RopeKvAppendArgs a) {
  const GpuKvLayer& kv = a.kv;
  const int32_t t = blockIdx.x, hd = kv.head_dim, nq = a.n_heads, nk = kv.n_kv_heads;
  const int32_t half = a.rot_dim / 2;
  const Rot rot{half, a.layout};
  const float* row = a.qkv + int64_t(t) * (nq + 2 * nk) * hd;
  float* qo = a.q_out + int64_t(t) * nq * hd;
  const int64_t slot = cache_slot(kv, a.batch, t, a.error);
  // Consecutive heads of one slot are block_size * head_dim apart.
  const int64_t head_stride = int64_t(kv.block_size) * hd;
  const float p = float(a.pos[t]) / a.linear_factor;
  // Rotated pairs of q (heads 0..nq-1) and k (nq..nq+nk-1).
  for (int32_t idx = threadIdx.x; idx < (nq + nk) * half; idx += blockDim.x) {
    const int32_t h = idx / half, i = idx % half;
    const float angle = p * a.inv_freq[i];
    if (h < nq) {
      rotate_pair(row + h * hd, i, rot, angle, [&](int32_t d, float v) { qo[h * hd + d] = v; });
    } else if (slot >= 0) {
      const int64_t base = slot + (h - nq) * head_stride;
      rotate_pair(row + h * hd, i, rot, angle,
                  [&](int32_t d, float v) { kv.k[base + d] = __float2bfloat16_rn(v); });
    }
  }
  // Dimensions past rot_dim of q and k, as they are.
  const int32_t rest = hd - a.rot_dim;
  for (int32_t idx = threadIdx.x; idx < (nq + nk) * rest; idx += blockDim.x) {
    const int32_t h = idx / rest, d = a.rot_dim + idx % rest;
    if (h < nq)
      qo[h * hd + d] = row[h * hd + d];
    else if (slot >= 0)
      kv.k[slot + (h - nq) * head_stride + d] = __float2bfloat16_rn(row[h * hd + d]);
  }
  if (slot < 0) return;
  const float* v = row + (nq + nk) * hd;
  for (int32_t idx = threadIdx.x; idx < nk * hd; idx += blockDim.x) {
    const int32_t h = idx / hd, d = idx % hd;
    kv.v[slot + h * head_stride + d] = __float2bfloat16_rn(v[idx]);
  }
}

}  // namespace

cudaError_t launch_rope_kv_append(const RopeKvAppendArgs& a, cudaStream_t stream) {
  const GpuKvLayer& kv = a.kv;
  const GpuAttnBatch& b = a.batch;
  if (kv.n_blocks < 0 || kv.block_size <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0)
    return cudaErrorInvalidValue;
  if (a.n_heads <= 0 || int64_t(a.n_heads + 2 * kv.n_kv_heads) * kv.head_dim > (1 << 22))
    return cudaErrorInvalidValue;
  if (a.rot_dim < 0 || a.rot_dim % 2 != 0 || a.rot_dim > kv.head_dim) return cudaErrorInvalidValue;
  if (!(a.linear_factor > 0.f)) return cudaErrorInvalidValue;
  if (a.layout != RopeLayout::kAdjacent && a.layout != RopeLayout::kHalf)
    return cudaErrorInvalidValue;
  if (b.n_seqs < 0 || b.n_tokens < 0 || b.max_blocks < 0) return cudaErrorInvalidValue;
  if (b.n_tokens == 0) return cudaSuccess;
  if (b.n_seqs == 0 || kv.k == nullptr || kv.v == nullptr || a.qkv == nullptr ||
      a.q_out == nullptr || a.pos == nullptr || (a.rot_dim > 0 && a.inv_freq == nullptr) ||
      b.q_start == nullptr || b.pos0 == nullptr || b.block_tables == nullptr)
    return cudaErrorInvalidValue;
  rope_kv_append_kernel<<<unsigned(b.n_tokens), 128, 0, stream>>>(a);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
