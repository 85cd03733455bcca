// stages/cuda/plugin.cpp — libkvasir_cuda.so's entry: the C function table of
// stages/cuda/plugin_abi.h over CudaSliceExecutor. Nothing throws across it:
// every Status and every C++ exception becomes a kvasir::ErrorCode value and
// a text.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "base/check.h"
#include "base/log.h"
#include "stages/cuda/executor.h"
#include "stages/cuda/plugin_abi.h"

struct KvasirCudaStage {
  std::unique_ptr<kvasir::cuda::CudaSliceExecutor> exec;
};

namespace {

using kvasir::ErrorCode;
using kvasir::Status;

static_assert(int(ErrorCode::kOk) == KVASIR_CUDA_OK, "the ABI's statuses are ErrorCode values");

int put(char* err, size_t cap, const Status& s) {
  if (s.ok()) return KVASIR_CUDA_OK;
  if (err && cap) std::snprintf(err, cap, "%s", s.message().c_str());
  return int(s.code());
}

template <class F>
int guarded(char* err, size_t cap, F fn) {
  try {
    return put(err, cap, fn());
  } catch (const kvasir::Error& e) {
    const Status s = e.status();
    return put(err, cap, s.ok() ? Status(ErrorCode::kInternal, e.message()) : s);
  } catch (const std::bad_alloc&) {
    return put(err, cap, Status(ErrorCode::kOutOfMemory, "out of host memory in the CUDA plugin"));
  } catch (const std::exception& e) {
    return put(err, cap, Status(ErrorCode::kInternal, e.what()));
  } catch (...) {
    return put(err, cap, Status(ErrorCode::kInternal, "unknown exception in the CUDA plugin"));
  }
}

Status probe_device(int32_t device) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    int drv = 0;
    cudaDriverGetVersion(&drv);
    return kvasir::error_status(ErrorCode::kDevice, "cudaGetDeviceCount: {}; driver version {}",
                                cudaGetErrorString(e),
                                drv ? std::to_string(drv) : std::string("none"));
  }
  if (device < 0 || device >= n) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return kvasir::error_status(ErrorCode::kNotFound,
                                "only {} CUDA device{} visible (CUDA_VISIBLE_DEVICES={})", n,
                                n == 1 ? " is" : "s are", visible ? visible : "unset");
  }
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess)
    return kvasir::error_status(ErrorCode::kNotFound, "cudaGetDeviceProperties({}): {}", device,
                                cudaGetErrorString(e));
  if (prop.major < 8)
    return kvasir::error_status(ErrorCode::kNotFound,
                                "cuda:{} ({}) is compute capability {}.{}; bf16 kernels need 8.0+",
                                device, prop.name, prop.major, prop.minor);
  return Status();
}

int probe(int32_t device, char* err, size_t cap) {
  return guarded(err, cap, [&] { return probe_device(device); });
}

// The stage's level and process name for this copy of base/log (see
// plugin_abi.h, "Logging").
void init_logging(const KvasirCudaStageConfig& cfg) {
  if (!cfg.log_process) return;
  kvasir::log::Options o;
  o.process = cfg.log_process;
  if (cfg.log_level >= int32_t(kvasir::log::Level::kTrace) &&
      cfg.log_level <= int32_t(kvasir::log::Level::kOff))
    o.level = kvasir::log::Level(cfg.log_level);
  kvasir::log::init(o);
}

int open(const KvasirCudaStageConfig* cfg, KvasirCudaStage** out, int64_t* capacity, char* err,
         size_t cap) {
  return guarded(err, cap, [&]() -> Status {
    if (!cfg || !out || !capacity || cfg->struct_size < sizeof(KvasirCudaStageConfig) ||
        !cfg->model_path)
      return Status(ErrorCode::kInvalidArgument, "open: bad arguments");
    init_logging(*cfg);
    std::unique_ptr<kvasir::cuda::CudaSliceExecutor> exec;
    KV_RETURN_IF_ERROR(kvasir::cuda::CudaSliceExecutor::open(*cfg, &exec));
    *capacity = exec->capacity_blocks();
    *out = new KvasirCudaStage{std::move(exec)};
    return Status();
  });
}

int allocate_kv(KvasirCudaStage* st, int32_t n_blocks, char* err, size_t cap) {
  return guarded(err, cap, [&]() -> Status {
    if (!st) return Status(ErrorCode::kInvalidArgument, "allocate_kv: no stage");
    return st->exec->allocate_kv(n_blocks);
  });
}

int attach_boundaries(KvasirCudaStage* st, void* table, int32_t import_link, int32_t export_link,
                      const volatile uint32_t* stop, char* err, size_t cap) {
  return guarded(err, cap, [&]() -> Status {
    if (!st || ((import_link >= 0 || export_link >= 0) && !table))
      return Status(ErrorCode::kInvalidArgument, "attach_boundaries: bad arguments");
    return st->exec->attach(static_cast<kvasir::ipc::CudaBoundaryTable*>(table), import_link,
                            export_link, stop);
  });
}

int forward(KvasirCudaStage* st, const KvasirCudaBatch* b, char* err, size_t cap) {
  return guarded(err, cap, [&]() -> Status {
    if (!st || !b) return Status(ErrorCode::kInvalidArgument, "forward: bad arguments");
    return st->exec->forward(*b);
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
