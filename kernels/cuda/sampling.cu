// Sampling on the GPU: one thread block (1024 threads) per row.
//
// The CPU sampler (stages/sampler.cpp) sorts a shortlist; here every cut is a
// radix select over an order-preserving 32-bit key of the logit, so nothing
// is sorted and no workspace is needed. Candidates are in canonical order
// (value desc, id asc). A "cut" (key, id) keeps the tokens at or before it in
// that order: key > cut.key, or key == cut.key and id <= cut.id.
//
//   select(stage, weight, thr): the first token in canonical order (among the
//   tokens that pass `stage`) at which the running sum of `weight` (1, or
//   the probability) reaches thr. Four passes of 8-bit histograms find its
//   key (walking bins from the top); a block-wide scan in id order then finds
//   which of the tokens with that key (equal values: equal weights) it is.
//
// Pipeline, as on the CPU: sanitise (NaN -> -inf, +inf -> max finite, -0 ->
// +0), max / argmax, greedy; w = exp((x - max) / T) (0 below an exponent of
// -87.3, as the CPU's exp); top-k = select(finite, 1, k); top-p =
// select(top-k ∩ w > 0, w, top_p * total); min-p keeps w >= min_p; the draw at
// u * total is select(..., w, target) with a strict crossing, or, with
// neither top-k nor top-p (the CPU's dense path), a scan in id order.
#include <cfloat>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/sampling_rng.h"

namespace kvasir::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr float kGreedyBelow = 1e-5f;  // vLLM's _SAMPLING_EPS, as the CPU

__device__ __forceinline__ float sanitize(float x) {
  if (isnan(x)) return -INFINITY;
  if (x > FLT_MAX) return FLT_MAX;
  return x == 0.f ? 0.f : x;  // -0 and +0 are one value: one key
}

__device__ __forceinline__ uint32_t key_of(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float value_of(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

struct Cut {
  uint32_t key;
  int32_t id;
};
__device__ __forceinline__ bool within(uint32_t key, int32_t id, Cut c) {
  return key > c.key || (key == c.key && id <= c.id);
}
constexpr Cut kNoCut{0u, INT_MAX};  // keeps every key (real keys are > 0)

enum Stage { kFinite = 0, kTopK = 1, kFinal = 2 };

struct Row {
  const float* x;
  int32_t vocab;
  float max;
  float inv_t;
  float min_p;
  Cut k_cut, p_cut;

  __device__ float weight(float v) const {
    if (v == -INFINITY) return 0.f;
    const float a = (v - max) * inv_t;
    return a < -87.3f ? 0.f : expf(a);
  }
  // Does token (value v, key, id) pass `stage`?
  __device__ bool pass(int stage, float v, uint32_t key, int32_t id) const {
    if (v == -INFINITY) return false;
    if (stage == kFinite) return true;
    const float w = weight(v);
    if (!(w > 0.f) || !within(key, id, k_cut)) return false;
    if (stage == kTopK) return true;
    return within(key, id, p_cut) && (min_p <= 0.f || w >= min_p);
  }
};

struct Shared {
  unsigned count[256];
  double mass[256];
  double dscan[kThreads / 32];
  float fscan[32];
  int iscan[kThreads / 32];
  int found;
  Cut cut;
  int32_t token;
};

__device__ double block_sum_d(double v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, o);
  __syncthreads();
  if (lane == 0) sh.dscan[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? sh.dscan[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, o);
  return v;
}

// Exclusive prefix over threads (in thread order) of an int; returns it.
__device__ int block_excl_scan(int v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(detail::kFullMask, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();
  if (lane == 31) sh.iscan[warp] = incl;
  __syncthreads();
  int base = 0;
  for (int w = 0; w < warp; ++w) base += sh.iscan[w];
  return base + incl - v;
}

// Block-wide scan of a double over threads (in thread order): this thread's
// range [*start, *end). Built so that a thread's start is bit-for-bit the
// previous thread's end (both are base + the same inclusive prefix): every
// target in [0, total) falls in exactly one thread's range, whatever the
// rounding.
__device__ void block_range_scan_d(double v, Shared& sh, double* start, double* end) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const double n = __shfl_up_sync(detail::kFullMask, incl, o);
    if (lane >= o) incl += n;
  }
  double excl = __shfl_up_sync(detail::kFullMask, incl, 1);
  __syncthreads();
  if (lane == 31) sh.dscan[warp] = incl;
  __syncthreads();
  double base = 0.0;
  for (int w = 0; w < warp; ++w) base += sh.dscan[w];
  *start = lane == 0 ? base : base + excl;
  *end = base + incl;
}

// Total weight (mass or count) of the tokens passing `stage`.
__device__ double stage_total(const Row& r, int stage, bool mass, Shared& sh) {
  double s = 0.0;
  for (int32_t i = threadIdx.x; i < r.vocab; i += kThreads) {
    const float v = sanitize(r.x[i]);
    if (r.pass(stage, v, key_of(v), i)) s += mass ? double(r.weight(v)) : 1.0;
  }
  return block_sum_d(s, sh);
}

// The first token, in canonical order among those passing `stage`, at which
// the running weight reaches thr (>= thr, or > thr when strict). Returns
// false (all threads) if the total never reaches it.
__device__ bool select_cut(const Row& r, int stage, bool mass, double thr, bool strict, Shared& sh,
                           Cut* out) {
  uint32_t prefix = 0, mask = 0;
  double above = 0.0;  // weight of passing tokens before the current prefix
  unsigned n_tie = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.count[b] = 0, sh.mass[b] = 0.0;
    __syncthreads();
    for (int32_t i = threadIdx.x; i < r.vocab; i += kThreads) {
      const float v = sanitize(r.x[i]);
      const uint32_t key = key_of(v);
      if ((key & mask) != prefix || !r.pass(stage, v, key, i)) continue;
      const int bin = (key >> shift) & 255;
      atomicAdd(&sh.count[bin], 1u);
      if (mass) atomicAdd(&sh.mass[bin], double(r.weight(v)));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1, last_nonempty = -1;
      double acc = above;
      for (int b = 255; b >= 0; --b) {
        if (sh.count[b] == 0) continue;
        last_nonempty = b;
        const double w = mass ? sh.mass[b] : double(sh.count[b]);
        if (strict ? acc + w > thr : acc + w >= thr) {
          chosen = b;
          break;
        }
        acc += w;
      }
      // A later pass may miss by rounding (atomic sums in another order):
      // then the prefix's last token is the answer.
      if (chosen < 0 && shift < 24) {
        chosen = last_nonempty;
        acc -= mass ? sh.mass[chosen] : double(sh.count[chosen]);
      }
      sh.found = chosen;
      sh.mass[0] = acc;  // pass "above" through shared memory (bins are dead now)
      sh.count[0] = chosen >= 0 ? sh.count[chosen] : 0;
    }
    __syncthreads();
    const int chosen = sh.found;
    if (chosen < 0) return false;  // never reached (first pass only)
    above = sh.mass[0];
    n_tie = sh.count[0];
    prefix |= uint32_t(chosen) << shift;
    mask |= 255u << shift;
    __syncthreads();
  }
  // prefix is the key; which of its n_tie tokens (id order) crosses?
  const float tv = value_of(prefix);
  const double w = mass ? double(r.weight(tv)) : 1.0;
  long long n = 1;
  if (w > 0.0 && thr > above) {
    n = (long long)ceil((thr - above) / w);
    if (n < 1) n = 1;
    // ceil of a rounded quotient may be one off either way: settle it on
    // the crossing test itself.
    auto crosses = [&](long long k) {
      const double cum = above + double(k) * w;
      return strict ? cum > thr : cum >= thr;
    };
    while (n < (long long)n_tie && !crosses(n)) ++n;
    while (n > 1 && crosses(n - 1)) --n;
  }
  if (n > (long long)n_tie) n = n_tie;
  // n-th lowest id among passing tokens with this key: chunked scan in id order.
  const int32_t chunk = (r.vocab + kThreads - 1) / kThreads;
  const int32_t lo = min(r.vocab, int32_t(threadIdx.x) * chunk), hi = min(r.vocab, lo + chunk);
  int mine = 0;
  for (int32_t i = lo; i < hi; ++i) {
    const float v = sanitize(r.x[i]);
    mine += key_of(v) == prefix && r.pass(stage, v, prefix, i);
  }
  const int before = block_excl_scan(mine, sh);
  if (before < n && before + mine >= n) {
    int c = before;
    for (int32_t i = lo; i < hi; ++i) {
      const float v = sanitize(r.x[i]);
      if (key_of(v) == prefix && r.pass(stage, v, prefix, i) && ++c == n) {
        sh.cut = Cut{prefix, i};
        break;
      }
    }
  }
  __syncthreads();
  *out = sh.cut;
  __syncthreads();
  return true;
}

// Dense draw (CPU: draw_dense): first token in id order whose running
// probability exceeds target; if rounding leaves it unreached, the last
// drawable token.
__device__ int32_t draw_id_order(const Row& r, double target, Shared& sh) {
  const int32_t chunk = (r.vocab + kThreads - 1) / kThreads;
  const int32_t lo = min(r.vocab, int32_t(threadIdx.x) * chunk), hi = min(r.vocab, lo + chunk);
  double mine = 0.0;
  int32_t last = -1;
  for (int32_t i = lo; i < hi; ++i) {
    const float v = sanitize(r.x[i]);
    if (r.pass(kFinal, v, key_of(v), i)) mine += double(r.weight(v)), last = i;
  }
  if (threadIdx.x == 0) sh.token = -1;
  double before, after;
  block_range_scan_d(mine, sh, &before, &after);
  __syncthreads();
  if (mine > 0.0 && before <= target && after > target) {
    double cum = before;
    int32_t pick = last;
    for (int32_t i = lo; i < hi; ++i) {
      const float v = sanitize(r.x[i]);
      if (!r.pass(kFinal, v, key_of(v), i)) continue;
      cum += double(r.weight(v));
      if (cum > target) {
        pick = i;
        break;
      }
    }
    sh.token = pick;
  }
  __syncthreads();
  int32_t tok = sh.token;
  if (tok < 0) {  // unreached: the highest drawable id
    int best = last;
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(detail::kFullMask, best, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh.iscan[threadIdx.x >> 5] = best;
    __syncthreads();
    tok = -1;
    for (int w = 0; w < kThreads / 32; ++w) tok = max(tok, sh.iscan[w]);
  }
  __syncthreads();
  return tok;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, const GpuSamplingRow* rows, int32_t vocab, int32_t* tokens,
                  int32_t* flags) {
  __shared__ Shared sh;
  const int64_t row_i = blockIdx.x;
  const GpuSamplingRow p = rows[row_i];
  Row r{};
  r.x = logits + row_i * vocab;
  r.vocab = vocab;
  r.k_cut = r.p_cut = kNoCut;
  int32_t flag = 0;

  // Controls re-checked (NaN fails every comparison): bad ones -> greedy.
  bool greedy = !(p.temperature >= kGreedyBelow);
  if (!(p.temperature >= 0.f && p.temperature <= FLT_MAX) || !(p.top_p > 0.f && p.top_p <= 1.f) ||
      !(p.min_p >= 0.f && p.min_p <= 1.f) || p.top_k < 0) {
    flag |= kSampleBadParams;
    greedy = true;
  }

  // 1. max and argmax (ties to the lowest id).
  float best = -INFINITY;
  int32_t best_id = INT_MAX;
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = sanitize(r.x[i]);
    if (v > best) best = v, best_id = i;  // ids rise within a thread: first max kept
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(detail::kFullMask, best, o);
    const int32_t oi = __shfl_xor_sync(detail::kFullMask, best_id, o);
    if (ov > best || (ov == best && oi < best_id)) best = ov, best_id = oi;
  }
  if ((threadIdx.x & 31) == 0) {
    sh.fscan[threadIdx.x >> 5] = best;
    sh.iscan[threadIdx.x >> 5] = best_id;
  }
  __syncthreads();
  best = -INFINITY;
  best_id = INT_MAX;
  for (int w = 0; w < kThreads / 32; ++w)
    if (sh.fscan[w] > best || (sh.fscan[w] == best && sh.iscan[w] < best_id))
      best = sh.fscan[w], best_id = sh.iscan[w];
  __syncthreads();

  auto finish = [&](int32_t tok) {
    if (threadIdx.x == 0) {
      tokens[row_i] = tok;
      if (flags) flags[row_i] = flag;
    }
  };
  if (best == -INFINITY) {
    flag |= kSampleAllMasked;
    finish(0);
    return;
  }
  if (greedy) {
    finish(best_id);
    return;
  }

  r.max = best;
  r.inv_t = 1.f / p.temperature;
  r.min_p = 0.f;
  const bool top_k = p.top_k > 0 && p.top_k < vocab;
  const bool top_p = p.top_p < 1.f;
  Cut c;
  if (top_k && select_cut(r, kFinite, false, double(p.top_k), false, sh, &c)) r.k_cut = c;
  if (top_p) {
    const double total = stage_total(r, kTopK, true, sh);
    if (select_cut(r, kTopK, true, double(p.top_p) * total, false, sh, &c)) r.p_cut = c;
  }
  r.min_p = p.min_p;
  const double total = stage_total(r, kFinal, true, sh);
  const double target = sampler_uniform_hd(p.seed, p.position) * total;
  int32_t tok;
  if (!top_k && !top_p) {
    tok = draw_id_order(r, target, sh);
  } else if (select_cut(r, kFinal, true, target, true, sh, &c)) {
    tok = c.id;
  } else {
    // Unreached by rounding: the last survivor in canonical order (the
    // CPU's cand_.back()): the largest id among the smallest key.
    select_cut(r, kFinal, false, stage_total(r, kFinal, false, sh), false, sh, &c);
    tok = c.id;
  }
  finish(tok);
}

}  // namespace

cudaError_t launch_sample(const SampleArgs& a, cudaStream_t stream) {
  if (a.n_rows < 0 || a.vocab <= 0) return cudaErrorInvalidValue;
  if (a.n_rows == 0) return cudaSuccess;
  if (a.logits == nullptr || a.rows == nullptr || a.tokens == nullptr) return cudaErrorInvalidValue;
  sample_kernel<<<unsigned(a.n_rows), kThreads, 0, stream>>>(a.logits, a.rows, a.vocab, a.tokens,
                                                             a.flags);
  return detail::launch_result();
}

}  // namespace kvasir::cuda
