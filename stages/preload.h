// stages/preload.h — pages a stage's slice of the weights in before it serves.
//
// The model is mapped, never copied (model/model_file.h), so "loading" is the
// kernel reading pages on first touch. Doing that up front, layer by layer,
// gives the daemon real progress to show while it starts (bytes paged in of
// the slice's total, layers done; kept in the segment's StageShared) and
// keeps the first request from paying for a cold page cache.
#pragma once

#include <cstdint>
#include <functional>

#include "model/model_file.h"
#include "stages/slice.h"

namespace kvasir {

struct PreloadProgress {
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;  // the whole slice: its layers, plus embeddings / output head
  int32_t layers_done = 0;
};

struct PreloadConfig {
  // Called with the total first, then after each layer and at the end.
  // Returns false to stop early (the daemon is shutting down).
  std::function<bool(const PreloadProgress&)> progress;
  // Test hook (tests/integration/test_drain.sh): sleep this long per layer so
  // a test can observe the loading state. 0 in normal runs.
  int delay_ms_per_layer = 0;
};

// Touches every page of the slice's tensors. Returns false if progress()
// asked to stop. Throws kvasir::Error if a tensor of the slice is missing.
bool preload_slice(const ModelFile& model, const SliceSpec& slice, const PreloadConfig& cfg);

}  // namespace kvasir
