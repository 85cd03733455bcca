// stages/cuda/plugin.cpp — libkvasir_cuda.so's entry: the C function table of
// stages/cuda/plugin_abi.h over CudaSliceExecutor. Nothing throws across it:
// every C++ exception becomes a status and a text.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "base/check.h"
#include "stages/cuda/executor.h"
#include "stages/cuda/plugin_abi.h"

struct KvasirCudaStage {
  std::unique_ptr<kvasir::cuda::CudaSliceExecutor> exec;
};

namespace {

int put(char* err, size_t cap, int status, const std::string& text) {
  if (err && cap) std::snprintf(err, cap, "%s", text.c_str());
  return status;
}

int put(char* err, size_t cap, const kvasir::cuda::Fault& f) {
  return put(err, cap, f.status == KVASIR_CUDA_OK ? KVASIR_CUDA_RUNTIME : f.status, f.text);
}

template <class F>
int guarded(char* err, size_t cap, F fn) {
  try {
    return fn();
  } catch (const kvasir::Error& e) {
    return put(err, cap, KVASIR_CUDA_RUNTIME, e.message());
  } catch (const std::exception& e) {
    return put(err, cap, KVASIR_CUDA_RUNTIME, e.what());
  } catch (...) {
    return put(err, cap, KVASIR_CUDA_RUNTIME, "unknown exception in the CUDA plugin");
  }
}

int probe(int32_t device, char* err, size_t cap) {
  return guarded(err, cap, [&]() -> int {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      int drv = 0;
      cudaDriverGetVersion(&drv);
      return put(err, cap, KVASIR_CUDA_NO_DRIVER,
                 fmt::format("cudaGetDeviceCount: {}; driver version {}", cudaGetErrorString(e),
                             drv ? std::to_string(drv) : std::string("none")));
    }
    if (device < 0 || device >= n)
      return put(
          err, cap, KVASIR_CUDA_NO_DEVICE,
          fmt::format(
              "only {} CUDA device{} visible (CUDA_VISIBLE_DEVICES={})", n,
              n == 1 ? " is" : "s are",
              std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset"));
    cudaDeviceProp prop{};
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess)
      return put(err, cap, KVASIR_CUDA_NO_DEVICE,
                 fmt::format("cudaGetDeviceProperties({}): {}", device, cudaGetErrorString(e)));
    if (prop.major < 8)
      return put(err, cap, KVASIR_CUDA_NO_DEVICE,
                 fmt::format("cuda:{} ({}) is compute capability {}.{}; bf16 kernels need 8.0+",
                             device, prop.name, prop.major, prop.minor));
    return KVASIR_CUDA_OK;
  });
}

int open(const KvasirCudaStageConfig* cfg, KvasirCudaStage** out, int64_t* capacity, char* err,
         size_t cap) {
  return guarded(err, cap, [&]() -> int {
    if (!cfg || !out || !capacity || cfg->struct_size < sizeof(KvasirCudaStageConfig) ||
        !cfg->model_path)
      return put(err, cap, KVASIR_CUDA_BAD_ARGS, "open: bad arguments");
    kvasir::cuda::Fault f;
    auto exec = kvasir::cuda::CudaSliceExecutor::open(*cfg, f);
    if (!exec) return put(err, cap, f);
    *capacity = exec->capacity_blocks();
    *out = new KvasirCudaStage{std::move(exec)};
    return KVASIR_CUDA_OK;
  });
}

int allocate_kv(KvasirCudaStage* st, int32_t n_blocks, char* err, size_t cap) {
  return guarded(err, cap, [&]() -> int {
    if (!st) return put(err, cap, KVASIR_CUDA_BAD_ARGS, "allocate_kv: no stage");
    kvasir::cuda::Fault f;
    return st->exec->allocate_kv(n_blocks, f) ? KVASIR_CUDA_OK : put(err, cap, f);
  });
}

int attach_boundaries(KvasirCudaStage* st, void* table, int32_t import_link, int32_t export_link,
                      const volatile uint32_t* stop, char* err, size_t cap) {
  return guarded(err, cap, [&]() -> int {
    if (!st || ((import_link >= 0 || export_link >= 0) && !table))
      return put(err, cap, KVASIR_CUDA_BAD_ARGS, "attach_boundaries: bad arguments");
    kvasir::cuda::Fault f;
    return st->exec->attach(static_cast<kvasir::ipc::CudaBoundaryTable*>(table), import_link,
                            export_link, stop, f)
               ? KVASIR_CUDA_OK
               : put(err, cap, f);
  });
}

int forward(KvasirCudaStage* st, const KvasirCudaBatch* b, char* err, size_t cap) {
  return guarded(err, cap, [&]() -> int {
    if (!st || !b) return put(err, cap, KVASIR_CUDA_BAD_ARGS, "forward: bad arguments");
    kvasir::cuda::Fault f;
    return st->exec->forward(*b, f) ? KVASIR_CUDA_OK : put(err, cap, f);
  });
}

void close(KvasirCudaStage* st) {
  try {
    delete st;
  } catch (...) {
  }
}

const KvasirCudaPluginV1 kTable = {
    KVASIR_CUDA_ABI_VERSION,
    sizeof(KvasirCudaPluginV1),
    KVASIR_CUDA_BUILD_TAG,
    probe,
    open,
    allocate_kv,
    attach_boundaries,
    forward,
    close,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const KvasirCudaPluginV1* kvasir_cuda_plugin_v1(
    void) {
  return &kTable;
}
