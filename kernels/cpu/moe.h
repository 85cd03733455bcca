// kernels/cpu/moe.h — a mixture-of-experts FFN on the CPU: the router's
// top-k, the tokens of a batch grouped by expert, each chosen expert's SwiGLU
// FFN on its stored (quantised) weights with the matmul kernels, and the
// weighted combine.
//
// A layer's experts are a stack of 2-D matrices, one TensorView per expert
// (a GGUF 3-D tensor sliced, or a folder's per-expert tensors). A process
// may hold a contiguous range of a layer's experts (MoeExperts::first):
// tokens routed elsewhere contribute nothing here, so the outputs of the
// processes that hold the other ranges add up to the layer's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/tensor.h"
#include "kernels/cpu/thread_pool.h"

namespace kvasir::cpu {

struct MoeRouteConfig {
  int32_t n_experts = 0;   // router outputs per token
  int32_t top_k = 0;       // experts chosen per token, 1..n_experts
  bool norm_topk = false;  // divide the k weights by their sum
};

// logits: [n, n_experts] f32 (the router's). Per token: p = softmax(logits)
// over all experts (in double), the k largest p in descending order (equal p:
// the lower id first) → ids [n, top_k]; their p → weights [n, top_k],
// divided by their sum when norm_topk (the sum clamped below at 2^-14, as
// llama.cpp does). With norm_topk this equals a softmax over the k largest
// logits (Mixtral's formulation). Throws kvasir::Error on a bad config or a
// non-finite logit.
void moe_route(const MoeRouteConfig& cfg, const float* logits, int64_t n, int32_t* ids,
               float* weights);

// counts[e] += the (token, j) choices of ids [n, top_k] (moe_route's) that
// chose expert e, for e < n_experts: the expert load a stage publishes
// (base/expert_load.h). Plain adds into the caller's array, once per layer
// call; throws kvasir::Error on an id outside [0, n_experts).
void moe_count_routed(const int32_t* ids, int64_t n, int32_t top_k, int32_t n_experts,
                      uint64_t* counts);

// The experts of one layer that a process holds: experts [first, first +
// gate.size()) of n_total, each FFN_e(x) = down_e · (silu(gate_e · x) ⊙ up_e · x)
// with gate_e, up_e: [ffn, hidden] and down_e: [hidden, ffn] (TensorView
// orientation: ne[0] = input size).
// gpt-oss adds a bias after each of the three matmuls and takes the clamped
// SwiGLU (norm.h swiglu_oai) instead of silu(gate) ⊙ up.
enum class MoeAct { kSwiglu, kSwigluOai };

struct MoeExperts {
  int32_t n_total = 0;
  int32_t first = 0;
  std::span<const TensorView> gate, up, down;
  // Null (no biases), or the layer's biases of every expert, indexed by
  // expert id (not by held index): gate_bias, up_bias [n_total, ffn],
  // down_bias [n_total, hidden] — GGUF's ffn_*_exps.bias as stored.
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  MoeAct act = MoeAct::kSwiglu;
  float alpha = 1.702f, limit = 7.f;  // kSwigluOai's constants
};

// Grow-only buffers of moe_ffn (no allocation per call in steady state).
struct MoeScratch {
  std::vector<int32_t> offsets;  // [experts held + 1]
  std::vector<int32_t> slots;    // [n * top_k] (token * top_k + j), grouped by expert
  std::vector<float> xs;         // [n, hidden]  one expert's tokens, gathered
  std::vector<float> gate, up;   // [n, ffn]
  std::vector<float> ys;         // [n, hidden]
};

// out[t] = Σ_j weights[t, j] · FFN_{ids[t, j]}(x[t]) over the j whose expert
// is held (others add nothing; a token with none gets zeros; with no expert
// held at all, out is left as it is: the caller knows its width).
// x: [n, hidden], ids / weights: [n, top_k] (moe_route's), out: [n, hidden]
// (overwritten; must not alias x). The (token, j) pairs are grouped by
// expert (a counting sort), so each chosen expert's weights are read once
// per call, for all its tokens at once; an expert no token chose is not
// read. Per token the terms are added in expert order. Throws
// kvasir::Error on an id outside [0, n_total), mismatched stacks or shapes.
void moe_ffn(const MoeExperts& e, const float* x, int64_t n, int32_t top_k, const int32_t* ids,
             const float* weights, float* out, MoeScratch& s, ThreadPool* pool);

// An expert group's member (docs/expert-groups.md): the FFN rows of the
// (token, j) pairs routed to the experts held, unweighted, at row
// token * top_k + j of y [n * top_k, hidden] (rows of pairs routed elsewhere
// are left as they are). Each expert sees the same tokens, in the same
// order, as in moe_ffn, so its rows are the same bits. Throws as moe_ffn.
void moe_expert_rows(const MoeExperts& e, const float* x, int64_t n, int32_t top_k,
                     const int32_t* ids, float* y, MoeScratch& s, ThreadPool* pool);

// An expert group's leader: adds to out [n, hidden] the terms of experts
// [first, first + held) of n_total, w[t, j] · y[t * top_k + j] (y: a
// member's moe_expert_rows), expert by expert ascending and tokens ascending
// within an expert — the order and the very loop moe_ffn adds with, so
// moe_ffn over [0, a) then moe_combine over [a, b), [b, n_total) … gives the
// bits of moe_ffn over all the experts. Throws kvasir::Error on an id outside
// [0, n_total) or a range outside it.
void moe_combine(int32_t n_total, int32_t first, int32_t held, int64_t n, int32_t top_k,
                 const int32_t* ids, const float* weights, const float* y, int64_t hidden,
                 float* out, MoeScratch& s);

// out[t, :] += sigmoid(gate[t]) · y[t, :] for t < n (y, out: [n, dim]; gate:
// [n]) — Qwen2-MoE's gated shared expert.
void add_sigmoid_gated(const float* y, const float* gate, int64_t n, int64_t dim, float* out);

}  // namespace kvasir::cpu
