#include "stages/cuda/decode_graphs.h"

#include <fmt/format.h>

#include "base/log.h"

namespace kvasir::cuda {

DecodeGraphs::~DecodeGraphs() {
  for (auto& [key, e] : entries_)
    if (e.exec) cudaGraphExecDestroy(e.exec);
}

Status DecodeGraphs::run(uint64_t key, cudaStream_t stream, const std::function<Status()>& body) {
  Entry& e = entries_[key];
  ++e.uses;
  if (e.exec) {
    const cudaError_t err = cudaGraphLaunch(e.exec, stream);
    if (err != cudaSuccess)
      return error_status(ErrorCode::kDevice, "cudaGraphLaunch: {} ({})", cudaGetErrorString(err),
                          int(err));
    ++replays_;
    return Status();
  }
  if (e.eager_only || e.uses == 1 || n_graphs_ >= kMaxDecodeGraphs) return body();
  return capture(e, key, stream, body);
}

// Captures body into a graph, instantiates it and launches it; on any
// failure the shape is marked eager-only and body runs eagerly.
Status DecodeGraphs::capture(Entry& e, uint64_t key, cudaStream_t stream,
                             const std::function<Status()>& body) {
  // Work queued before (the batch's uploads) stays outside the graph, and
  // ordered before it on the stream; finishing it first keeps the capture
  // free of any dependency on it.
  cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess)
    return error_status(ErrorCode::kDevice, "cudaStreamSynchronize: {}", cudaGetErrorString(err));
  err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  Status st = err == cudaSuccess ? body() : Status();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = err == cudaSuccess ? cudaStreamEndCapture(stream, &graph) : err;
  cudaGraphExec_t exec = nullptr;
  cudaError_t inst = cudaErrorUnknown;
  if (st.ok() && end == cudaSuccess && graph) inst = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (!st.ok() || end != cudaSuccess || inst != cudaSuccess) {
    cudaGetLastError();  // a failed capture's error is not sticky: clear it
    e.eager_only = true;
    KV_LOG_WARN("stage",
                "decode graph {:#x}: capture failed ({}; end {}; instantiate {}): this shape runs "
                "eagerly",
                key, st.ok() ? "ok" : st.message(), cudaGetErrorString(end),
                cudaGetErrorString(inst));
    return body();  // nothing ran during the capture
  }
  e.exec = exec;
  ++n_graphs_;
  KV_LOG_DEBUG("stage", "decode graph {:#x} captured ({} graphs)", key, n_graphs_);
  err = cudaGraphLaunch(exec, stream);
  if (err != cudaSuccess)
    return error_status(ErrorCode::kDevice, "cudaGraphLaunch: {} ({})", cudaGetErrorString(err),
                        int(err));
  return Status();
}

}  // namespace kvasir::cuda
