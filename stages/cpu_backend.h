// stages/cpu_backend.h — a stage on the CPU: SliceExecutor (stages/forward.h)
// behind the StageBackend interface (stages/backend.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "model/model_file.h"
#include "stages/backend.h"
#include "stages/forward.h"

namespace kvasir {

struct CpuStageConfig {
  SliceSpec slice;
  int32_t block_size = 16;
  DType kv_type = DType::F16;  // F16 or F32
  uint64_t kv_memory = 0;      // bytes of KV this stage may hold
  int threads = 1;             // the most threads a kernel call uses
  int64_t max_tokens = 0;  // the plan's tokens per batch
  // Threads for each kernel call, asked at the call (stages/core_share.h);
  // empty: always `threads`. Called from the stage's thread only.
  std::function<int()> width;
  // An expert group's leader: its members (slice.experts_* its own range).
  std::shared_ptr<ExpertPeers> peers;
};

// The slice's capacity is kv_memory / KV bytes per block of its layers;
// throws kvasir::Error when that holds no block. The executor itself (its
// tensors mapped, its KV pool allocated) is built by allocate_kv, once the
// block count is known.
std::unique_ptr<StageBackend> make_cpu_backend(std::unique_ptr<ModelFile> model,
                                               const CpuStageConfig& cfg);

}  // namespace kvasir
