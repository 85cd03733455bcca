// stages/backend.h — what computes a stage's slice: the one interface of the
// CPU slice executor (stages/cpu_backend.h) and of the CUDA plugin
// (stages/cuda_plugin.h), as the stage's start-up handshake
// (stages/stage_main.cpp) and its agent (stages/agent.h) drive it.
//
// The handshake calls, in this order and each at most once:
//   capacity_blocks()   reported to the daemon (status sized)
//   preload()           while the daemon decides the block count
//   allocate_kv(n, s)   the daemon's block counts (full and sliding groups)
//   attach_boundaries() then status ready
// then the agent calls forward() once per batch until shutdown, and the
// backend is destroyed when the stage leaves. Failures before serving throw
// kvasir::Error: the stage writes its message to the segment and exits
// with status failed.
#pragma once

#include <cstdint>
#include <span>

#include "stages/forward.h"
#include "stages/preload.h"

namespace kvasir {

class StageBackend {
 public:
  // Frees everything the backend holds: KV, weights or their mapping,
  // device memory, boundaries (a GPU stage's peers see its slots go).
  virtual ~StageBackend() = default;

  // The model's vocabulary: the width of the tail's logits rows.
  virtual int32_t vocab() const = 0;

  // KV blocks this stage can hold: at least 1 (a backend that holds none
  // is refused when it is built, with a message naming the setting).
  virtual int64_t capacity_blocks() const = 0;

  // Pages the slice in while the daemon decides the block count, reporting
  // progress through cfg (the CPU executor maps its weights, so reading
  // them now keeps the first batch from paying for a cold page cache; a GPU
  // stage uploaded its weights when it was built and has nothing to do).
  // Returns false when cfg.progress asked to stop (the daemon is stopping).
  virtual bool preload(const PreloadConfig& cfg) = 0;

  // Allocates n_blocks KV blocks (1..capacity_blocks()), zeroed: the pool
  // every block id of a batch falls in; with n_blocks_swa > 0 (a sliding
  // group), the sliding-window layers hold n_blocks_swa instead, and the
  // whole must fit what capacity_blocks() said. Throws kvasir::Error
  // (kOutOfMemory when the memory is not there after all, kDevice, ...).
  virtual void allocate_kv(int32_t n_blocks, int32_t n_blocks_swa = 0) = 0;

  // Connects this stage's boundaries: a GPU stage opens device boundaries
  // to GPU neighbours (ipc/cuda_boundary.h), waiting for a peer's slots to
  // be published; elsewhere, and on the CPU, the segment's host boundaries
  // need nothing. Returns false when the daemon began stopping while it
  // waited; throws kvasir::Error on any other failure.
  virtual bool attach_boundaries() = 0;

  // One batch, the contract of SliceExecutor::forward (stages/forward.h):
  // hidden_in [n_tokens, hidden] (null at the head), hidden_out (null at the
  // tail), logits of the rows that want them (tail); a backend that samples
  // on its device also fills batch.sampled_token / sampled_logprob for the
  // rows it sampled. Throws kvasir::Error whose code says what failed:
  // kInvalidArgument for a malformed batch (the batch fails, the stage goes
  // on), kDevice / kOutOfMemory for the device.
  virtual void forward(const ForwardBatch& batch, const float* hidden_in, float* hidden_out,
                       float* logits) = 0;

  // The expert load (base/expert_load.h): the model's experts (0 for a
  // dense model, or a backend that does not count), and the last
  // successful forward's (token, choice) pairs per expert over the slice's
  // layers ([n_experts], empty when it does not count). The stage publishes
  // them (ipc::add_stage_routed); the CUDA backend does not count (0, its
  // Mixtral-style MoE included).
  virtual int32_t n_experts() const { return 0; }
  virtual std::span<const uint64_t> routed() const { return {}; }
};

}  // namespace kvasir
