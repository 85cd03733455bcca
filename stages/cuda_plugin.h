// stages/cuda_plugin.h — the stage process's side of the CUDA backend: finds
// and dlopen()s libkvasir_cuda.so (stages/cuda/plugin_abi.h) when the plan
// says cuda:N, and puts the plugin's C ABI behind the StageBackend interface
// (stages/backend.h). No CUDA headers or libraries here: a build without
// nvcc has this file too, and answers a cuda:N plan with a message that
// says why it cannot run it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ipc/link_kind.h"
#include "ipc/segment.h"
#include "stages/backend.h"
#include "stages/cuda/plugin_abi.h"

namespace kvasir {

using ipc::cuda_ordinal;  // "cuda:N" → N, else -1 (ipc/link_kind.h)

class CudaPlugin {
 public:
  // Where the plugin is looked for: $KVASIR_CUDA_PLUGIN (a file) alone when
  // set; else the executable's folder, then <exe>/../lib/kvasir/.
  static std::vector<std::string> search_paths();
  // Loads the plugin, checks its ABI and build tag, probes the driver and
  // the device. Throws kvasir::Error "plan asks for cuda:N but …" naming the
  // fault (no plugin in this build, cannot load it, no driver, no device).
  static std::unique_ptr<CudaPlugin> load(int device);

  const KvasirCudaPluginV1& api() const { return *api_; }
  const std::string& path() const { return path_; }

 private:
  CudaPlugin() = default;
  // Never dlclose()d: the CUDA runtime's own destructors run at exit.
  void* handle_ = nullptr;
  const KvasirCudaPluginV1* api_ = nullptr;
  std::string path_;
};

// The backend of stage `stage` of the segment's plan, whose device is
// cuda:N: loads the plugin (CudaPlugin::load), opens the slice on the device
// (weights uploaded, capacity measured from kv.gpu_memory_utilization).
// vocab: the model's. Throws kvasir::Error with the plugin's ErrorCode and
// text ("cuda:N: ...") when that fails or the device holds no KV block.
std::unique_ptr<StageBackend> make_cuda_backend(ipc::Segment& seg, int stage, int32_t vocab);

}  // namespace kvasir
