// Paged attention (causal, GQA, online softmax, optional split-KV).
//
// Grid: x = (token, query head) pairs, y = partitions of the context.
// Block: 4 warps. Warp w of partition p takes positions
// p*P + w, p*P + w + 4, ... (P = kAttnPartition, or the whole context when
// not split); for each key the warp forms q·k with one bf16x2 pair per lane
// per 64 dims and a shuffle reduction, then updates its running max m, sum l
// and accumulator acc (online softmax, all f32). The 4 warps merge in shared
// memory. Unsplit: the block writes out = acc / l in bf16. Split: it writes
// (m, l, acc) to the workspace and attention_combine merges the partitions.
//
// Every index is checked on the device: a token outside every sequence, a
// position past max_context or the table, or a block id out of range make
// that (token, head)'s output NaN and set the error flag; nothing is read out
// of bounds.
#include <algorithm>
#include <cfloat>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxHeadDim = 256;

// Partial results of one (token, head, partition) in the workspace:
//   ml:  [n_pairs][n_parts][2]            (m, l)
//   acc: [n_pairs][n_parts][head_dim]     unnormalised, relative to m
struct Partials {
  float* ml;
  float* acc;
  int32_t n_parts;
};

__device__ __forceinline__ float nan_f() {
  return __int_as_float(0x7fc00000);
}

// kPairs = bf16 pairs per lane: head_dim <= 64 * kPairs.
template <int kPairs>
__global__ void __launch_bounds__(kWarps * 32)
    attention_kernel(GpuKvLayer kv, GpuAttnBatch b, const float* q, int32_t n_heads, float scale,
                     __nv_bfloat16* out, Partials part, int32_t* error) {
  __shared__ float sh_m[kWarps], sh_l[kWarps];
  __shared__ float sh_acc[kWarps][kMaxHeadDim];
  __shared__ int sh_bad;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t pair = blockIdx.x;  // token * n_heads + head
  const int32_t t = pair / n_heads, h = pair % n_heads;
  const int32_t group = n_heads / kv.n_kv_heads;
  const int32_t kvh = h / group;
  const int32_t hd = kv.head_dim;
  const int32_t p = blockIdx.y;

  if (threadIdx.x == 0) sh_bad = 0;
  __syncthreads();

  // Locate the token; any inconsistency poisons this pair.
  const int s = detail::find_seq(b.q_start, b.n_seqs, t);
  int64_t ctx = 0;  // positions 0 .. ctx - 1 are attended
  if (s < 0) {
    if (threadIdx.x == 0) sh_bad = kErrorBatch;
  } else {
    ctx = int64_t(b.pos0[s]) + (t - b.q_start[s]) + 1;
    const int64_t last_block = (ctx - 1) / kv.block_size;
    if (ctx < 1 || ctx > b.max_context || last_block >= b.max_blocks) {
      if (threadIdx.x == 0) sh_bad = kErrorPosition;
    }
  }
  __syncthreads();

  const int64_t span = part.n_parts > 1 ? kAttnPartition : ctx;
  const int64_t lo = int64_t(p) * span;
  const int64_t hi = min(ctx, lo + span);

  float qv[2 * kPairs], acc[2 * kPairs];
  const float* qrow = q + int64_t(pair) * hd;
#pragma unroll
  for (int e = 0; e < kPairs; ++e) {
    const int d = 2 * (lane + 32 * e);
    qv[2 * e] = d < hd ? qrow[d] * scale : 0.f;
    qv[2 * e + 1] = d + 1 < hd ? qrow[d + 1] * scale : 0.f;
    acc[2 * e] = acc[2 * e + 1] = 0.f;
  }
  float m = -FLT_MAX, l = 0.f;

  if (sh_bad == 0) {
    const int32_t* table = b.block_tables + int64_t(s) * b.max_blocks;
    for (int64_t j = lo + warp; j < hi; j += kWarps) {
      const int32_t block = table[j / kv.block_size];
      if (block < 0 || block >= kv.n_blocks) {
        if (lane == 0) sh_bad = kErrorBlockId;
        break;
      }
      const int64_t off = kv_offset(kv, block, kvh, j % kv.block_size);
      const __nv_bfloat162* kr = reinterpret_cast<const __nv_bfloat162*>(kv.k + off);
      const __nv_bfloat162* vr = reinterpret_cast<const __nv_bfloat162*>(kv.v + off);
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < kPairs; ++e) {
        const int pi = lane + 32 * e;
        if (2 * pi < hd) {
          const float2 kf = __bfloat1622float2(kr[pi]);
          dot += qv[2 * e] * kf.x + qv[2 * e + 1] * kf.y;
        }
      }
      dot = detail::warp_sum(dot);
      const float m_new = fmaxf(m, dot);
      const float c = expf(m - m_new);
      const float w = expf(dot - m_new);
      l = l * c + w;
#pragma unroll
      for (int e = 0; e < kPairs; ++e) {
        const int pi = lane + 32 * e;
        if (2 * pi < hd) {
          const float2 vf = __bfloat1622float2(vr[pi]);
          acc[2 * e] = acc[2 * e] * c + w * vf.x;
          acc[2 * e + 1] = acc[2 * e + 1] * c + w * vf.y;
        }
      }
      m = m_new;
    }
  }

  // Merge the warps.
  if (lane == 0) {
    sh_m[warp] = m;
    sh_l[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < kPairs; ++e) {
    const int d = 2 * (lane + 32 * e);
    if (d < hd) {
      sh_acc[warp][d] = acc[2 * e];
      if (d + 1 < hd) sh_acc[warp][d + 1] = acc[2 * e + 1];
    }
  }
  __syncthreads();
  const int bad = sh_bad;
  float M = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w)
    if (sh_l[w] > 0.f) M = fmaxf(M, sh_m[w]);
  float L = 0.f, cw[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    cw[w] = sh_l[w] > 0.f ? expf(sh_m[w] - M) : 0.f;
    L += sh_l[w] * cw[w];
  }
  if (bad != 0 && threadIdx.x == 0) detail::set_error(error, bad);

  if (part.n_parts > 1) {
    const int64_t pi = int64_t(pair) * part.n_parts + p;
    if (threadIdx.x == 0) {
      part.ml[2 * pi] = bad ? nan_f() : M;
      part.ml[2 * pi + 1] = bad ? nan_f() : L;
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float a = 0.f;
      for (int w = 0; w < kWarps; ++w) a += sh_acc[w][d] * cw[w];
      part.acc[pi * hd + d] = bad ? nan_f() : a;
    }
  } else {
    __nv_bfloat16* o = out + int64_t(pair) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float a = 0.f;
      for (int w = 0; w < kWarps; ++w) a += sh_acc[w][d] * cw[w];
      o[d] = __float2bfloat16_rn(bad ? nan_f() : a / L);
    }
  }
}

// Merges the partitions of each (token, head): one block per pair. Empty
// partitions (past the token's context) have l == 0 and weigh nothing; a NaN
// from a poisoned pair propagates.
__global__ void attention_combine(Partials part, int32_t hd, __nv_bfloat16* out) {
  const int64_t pair = blockIdx.x;
  const float* ml = part.ml + pair * part.n_parts * 2;
  float M = -FLT_MAX;
  bool nan = false;
  for (int i = 0; i < part.n_parts; ++i) {
    if (isnan(ml[2 * i])) nan = true;
    if (ml[2 * i + 1] > 0.f) M = fmaxf(M, ml[2 * i]);
  }
  float L = 0.f;
  for (int i = 0; i < part.n_parts; ++i)
    if (ml[2 * i + 1] > 0.f) L += ml[2 * i + 1] * expf(ml[2 * i] - M);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.f;
    for (int i = 0; i < part.n_parts; ++i)
      if (ml[2 * i + 1] > 0.f)
        a += part.acc[(pair * part.n_parts + i) * hd + d] * expf(ml[2 * i] - M);
    out[pair * hd + d] = __float2bfloat16_rn(nan ? nan_f() : a / L);
  }
}

// Split only when the batch is too small to fill the GPU by itself (decode):
// kAttnSplitBelowPairs (attention.h).
int64_t wanted_parts(int64_t n_pairs, int32_t max_context) {
  if (n_pairs >= kAttnSplitBelowPairs || max_context <= kAttnPartition) return 1;
  return (int64_t(max_context) + kAttnPartition - 1) / kAttnPartition;
}

int64_t bytes_per_part(int64_t n_pairs, int32_t head_dim) {
  return n_pairs * (int64_t(head_dim) + 2) * int64_t(sizeof(float));
}

}  // namespace

size_t paged_attention_workspace_bytes(int32_t n_tokens, int32_t n_heads, int32_t head_dim,
                                       int32_t max_context) {
  if (n_tokens <= 0 || n_heads <= 0 || head_dim <= 0 || max_context <= 0) return 0;
  const int64_t n_pairs = int64_t(n_tokens) * n_heads;
  const int64_t parts = wanted_parts(n_pairs, max_context);
  return parts > 1 ? size_t(parts * bytes_per_part(n_pairs, head_dim)) : 0;
}

cudaError_t launch_paged_attention(const PagedAttentionArgs& a, cudaStream_t stream) {
  const GpuKvLayer& kv = a.kv;
  const GpuAttnBatch& b = a.batch;
  if (kv.n_blocks < 0 || kv.block_size <= 0 || kv.n_kv_heads <= 0) return cudaErrorInvalidValue;
  if (kv.head_dim <= 0 || kv.head_dim > kMaxHeadDim || kv.head_dim % 2 != 0)
    return cudaErrorInvalidValue;  // bf16x2 loads need an even head_dim
  if (a.n_heads <= 0 || a.n_heads % kv.n_kv_heads != 0) return cudaErrorInvalidValue;
  if (!(a.scale > 0.f) || !(a.scale < FLT_MAX)) return cudaErrorInvalidValue;
  if (b.n_seqs < 0 || b.n_tokens < 0 || b.max_blocks < 0 || b.max_context < 0)
    return cudaErrorInvalidValue;
  if (b.n_tokens == 0) return cudaSuccess;
  if (b.n_seqs == 0 || kv.k == nullptr || kv.v == nullptr || a.q == nullptr || a.out == nullptr ||
      b.q_start == nullptr || b.pos0 == nullptr || b.block_tables == nullptr)
    return cudaErrorInvalidValue;
  const int64_t n_pairs = int64_t(b.n_tokens) * a.n_heads;
  if (n_pairs > 0x7fffffff) return cudaErrorInvalidValue;

  int64_t parts = wanted_parts(n_pairs, b.max_context);
  const int64_t per = bytes_per_part(n_pairs, kv.head_dim);
  if (parts > 1 && (a.workspace == nullptr || int64_t(a.workspace_bytes) < 2 * per)) parts = 1;
  if (parts > 1) parts = std::min(parts, int64_t(a.workspace_bytes) / per);
  if (parts > 65535) parts = 65535;
  Partials part{nullptr, nullptr, int32_t(parts)};
  if (parts > 1) {
    part.ml = a.workspace;
    part.acc = a.workspace + n_pairs * parts * 2;
  }
  // With fewer partitions than wanted, each must still cover the context:
  // the kernel uses kAttnPartition positions per partition, so cap
  // max_context accordingly (a token past it is flagged, never cut).
  if (parts > 1 && parts * kAttnPartition < b.max_context) {
    parts = 1;
    part = Partials{nullptr, nullptr, 1};
  }

  const dim3 grid{static_cast<unsigned>(n_pairs), static_cast<unsigned>(parts)};
  const int threads = kWarps * 32;
  if (kv.head_dim <= 64)
    attention_kernel<1>
        <<<grid, threads, 0, stream>>>(kv, b, a.q, a.n_heads, a.scale, a.out, part, a.error);
  else if (kv.head_dim <= 128)
    attention_kernel<2>
        <<<grid, threads, 0, stream>>>(kv, b, a.q, a.n_heads, a.scale, a.out, part, a.error);
  else
    attention_kernel<4>
        <<<grid, threads, 0, stream>>>(kv, b, a.q, a.n_heads, a.scale, a.out, part, a.error);
  if (cudaError_t e = detail::launch_result(); e != cudaSuccess) return e;
  if (parts > 1) {
    attention_combine<<<unsigned(n_pairs), 128, 0, stream>>>(part, kv.head_dim, a.out);
    return detail::launch_result();
  }
  return cudaSuccess;
}

}  // namespace kvasir::cuda
