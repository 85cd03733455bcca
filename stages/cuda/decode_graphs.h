// stages/cuda/decode_graphs.h — CUDA graphs of decode steps, one per shape
// (stages/cuda/decode_graph_plan.h), on the stage's one stream.
//
// A shape's first step runs eagerly (a warm-up: cuBLASLt plans, lazily
// loaded kernels, all made outside a capture); its second is captured,
// instantiated and launched; every later one replays the graph. A capture
// or instantiation that fails is logged once and that shape runs eagerly
// from then on; the step itself is then run eagerly, so nothing is lost
// (during a capture nothing executes). At most kMaxDecodeGraphs shapes get
// a graph; others run eagerly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>

#include "base/status.h"

namespace kvasir::cuda {

constexpr size_t kMaxDecodeGraphs = 128;

class DecodeGraphs {
 public:
  DecodeGraphs() = default;
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;
  ~DecodeGraphs();

  // Enqueues the step `body` enqueues on `stream` (eagerly, or as the graph
  // of `key`). body must enqueue the same work with the same arguments every
  // time it is called for one key, and nothing but work on `stream`.
  Status run(uint64_t key, cudaStream_t stream, const std::function<Status()>& body);

  size_t graphs() const { return n_graphs_; }
  uint64_t replays() const { return replays_; }

 private:
  struct Entry {
    int uses = 0;
    bool eager_only = false;
    cudaGraphExec_t exec = nullptr;
  };
  Status capture(Entry& e, uint64_t key, cudaStream_t stream, const std::function<Status()>& body);

  std::map<uint64_t, Entry> entries_;
  size_t n_graphs_ = 0;
  uint64_t replays_ = 0;
};

}  // namespace kvasir::cuda
