// MoE grouping: one block of kMoeMaxExperts threads builds offsets, tiles,
// slots and pos; a second kernel gathers the rows (one block per grouped row).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_group.h"
#include "kernels/cuda/paged_kv_layout.h"

namespace kvasir::cuda {
namespace {

constexpr int kScanThreads = kMoeMaxExperts;  // one thread per expert in the scans

// Inclusive prefix sum of one value per thread over the block (Hillis-Steele;
// `buf` holds blockDim.x ints). Every thread gets its own prefix.
__device__ int block_inclusive_scan(int v, int* buf) {
  buf[threadIdx.x] = v;
  for (int off = 1; off < int(blockDim.x); off <<= 1) {
    __syncthreads();
    const int add = int(threadIdx.x) >= off ? buf[threadIdx.x - off] : 0;
    __syncthreads();
    buf[threadIdx.x] += add;
  }
  __syncthreads();
  return buf[threadIdx.x];
}

__global__ void __launch_bounds__(kScanThreads)
    moe_group_kernel(const int32_t* ids, int32_t pairs, int32_t n_experts, int32_t max_tiles,
                     int32_t* offsets, int32_t* slots, int32_t* pos, int32_t* tile_expert,
                     int32_t* tile_row, int32_t* error) {
  __shared__ int count[kMoeMaxExperts];
  __shared__ int cursor[kMoeMaxExperts];
  __shared__ int buf[kScanThreads];
  __shared__ int totals[2];
  const int tid = threadIdx.x;
  count[tid] = 0;
  __syncthreads();
  for (int i = tid; i < pairs; i += blockDim.x) {
    const int e = ids[i];
    if (e >= 0 && e < n_experts)
      atomicAdd(&count[e], 1);  // counts only: the order is fixed below
    else
      detail::set_error(error, kErrorExpertId);
  }
  __syncthreads();

  const int c = tid < n_experts ? count[tid] : 0;
  const int incl = block_inclusive_scan(c, buf);
  const int first = incl - c;
  if (tid < n_experts) {
    offsets[tid] = first;
    cursor[tid] = first;
  }
  if (tid == int(blockDim.x) - 1) totals[0] = incl;
  const int n_tiles = (c + kMoeTileRows - 1) / kMoeTileRows;
  const int tiles_incl = block_inclusive_scan(n_tiles, buf);  // syncs: totals[0] visible after
  if (tid == int(blockDim.x) - 1) totals[1] = tiles_incl;
  for (int q = 0; q < n_tiles; ++q) {
    tile_expert[tiles_incl - n_tiles + q] = tid;
    tile_row[tiles_incl - n_tiles + q] = first + q * kMoeTileRows;
  }
  __syncthreads();
  const int total = totals[0];
  if (tid == 0) offsets[n_experts] = total;
  for (int q = totals[1] + tid; q < max_tiles; q += blockDim.x) {
    tile_expert[q] = -1;
    tile_row[q] = 0;
  }
  for (int r = total + tid; r < pairs; r += blockDim.x) slots[r] = -1;

  // Placement, in pair order: warp 0 takes 32 pairs at a time; lanes with the
  // same expert rank themselves by lane, the lowest of them advances the
  // expert's cursor after all have read it.
  if (tid >= 32) return;
  const unsigned lane = tid;
  for (int base = 0; base < pairs; base += 32) {
    const int i = base + int(lane);
    int e = i < pairs ? ids[i] : -1;
    if (e < 0 || e >= n_experts) e = -1;
    const unsigned peers = __match_any_sync(detail::kFullMask, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    const int r = e >= 0 ? cursor[e] + rank : -1;
    __syncwarp();
    if (e >= 0 && rank == 0) cursor[e] += __popc(peers);
    __syncwarp();
    if (i < pairs) {
      pos[i] = r;
      if (r >= 0) slots[r] = i;
    }
  }
}

__global__ void moe_gather_kernel(const __nv_bfloat16* x, const int32_t* slots, int32_t top_k,
                                  int64_t hidden, __nv_bfloat16* xs) {
  const int64_t r = blockIdx.x;
  const int32_t s = slots[r];
  __nv_bfloat16* dst = xs + r * hidden;
  if (s < 0) {
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = __float2bfloat16_rn(0.f);
    return;
  }
  const __nv_bfloat16* src = x + int64_t(s / top_k) * hidden;
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = src[c];
}

}  // namespace

cudaError_t launch_moe_group(const MoeGroupArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.hidden < 1) return cudaErrorInvalidValue;
  if (a.n_experts < 1 || a.n_experts > kMoeMaxExperts) return cudaErrorInvalidValue;
  if (a.top_k < 1 || a.top_k > kMoeMaxTopK) return cudaErrorInvalidValue;
  if (a.n > INT32_MAX / a.top_k) return cudaErrorInvalidValue;
  const int64_t pairs = a.n * a.top_k;
  if (pairs > 0 && a.hidden > (int64_t(1) << 50) / pairs) return cudaErrorInvalidValue;
  if (a.offsets == nullptr) return cudaErrorInvalidValue;
  if (pairs > 0 && (a.ids == nullptr || a.x == nullptr || a.slots == nullptr || a.pos == nullptr ||
                    a.tile_expert == nullptr || a.tile_row == nullptr || a.xs == nullptr))
    return cudaErrorInvalidValue;
  // Also for n = 0: offsets are all zero then, so the later kernels see an
  // empty batch.
  moe_group_kernel<<<1, kScanThreads, 0, stream>>>(
      a.ids, int32_t(pairs), a.n_experts, int32_t(moe_max_tiles(pairs, a.n_experts)), a.offsets,
      a.slots, a.pos, a.tile_expert, a.tile_row, a.error);
  cudaError_t e = detail::launch_result();
  if (e != cudaSuccess || pairs == 0) return e;
  moe_gather_kernel<<<unsigned(pairs), 128, 0, stream>>>(a.x, a.slots, a.top_k, a.hidden, a.xs);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
