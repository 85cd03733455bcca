// stages/stage.h — the stage process, as kvasird sees it: its entry point.
// The one header of stages/ that the daemon may include
// (docs/architecture.md, "Modules").
#pragma once

#include <string>
#include <vector>

namespace kvasir {

// The stage process (kvasird execs itself with `--stage N --segment NAME`):
// opens the segment and the model, builds its backend for the plan's device
// (the CPU slice executor or the CUDA plugin, stages/backend.h), reports its
// KV capacity, waits for the daemon's block count, allocates the KV blocks,
// reports ready and runs the agent until shutdown (the handshake is written
// out in stage_main.cpp). Any failure before serving is written to the
// stage's error field with status failed. Returns the process exit code.
// `inherit`: a restarted stage's predecessor's kernels text (the
// supervisor's `--simd-inherit`): its CPU kernel choices are adopted
// before anything runs (kernels/cpu/simd.h simd_adopt_choices), so the
// restarted stage computes the same bits; "" for a first start.
int stage_main(int stage, const std::string& segment_name, const std::string& inherit = "");

// What each layer of the model costs on this machine's CPU with `threads`
// threads, for a micro-batch of `rows` decode rows at `context` positions
// (every one sampled) plus, when `prefill` > 0, an unsampled prompt piece of
// `prefill` tokens at the same position: each layer's median over `repeats`
// rounds (every slice timed once a round, after a warm-up forward), and
// what the ends add to their layers — the embedding on the
// first stage, the final norm and output head on the last (the tail's
// sampler is not included). What `kvasird --check` and layers = "auto"
// split the layers by (base/layer_split.h). Maps the model; throws
// kvasir::Error if it cannot or the shape is out of range.
struct LayerCosts {
  std::vector<double> layer_ms;
  double head_ms = 0, tail_ms = 0;
  int rows = 0, prefill = 0, context = 0;
};
LayerCosts measure_layer_costs(const std::string& model_path, int threads, int rows, int prefill,
                               int context, int repeats = 7);

}  // namespace kvasir
