// stages/agent.h — the loop of one stage process.
//
//   take the next message from the inbound ring        (time: starved)
//   check it, copy + check the descriptor of its slot
//   run the layers: boundary[k][s-1] → boundary[k][s]  (time: busy)
//   tail: sample each row that asks, write result[k]
//   push the message to the next ring                  (time: blocked)
//
// The agent never decides batch membership: the descriptor is the bridge's,
// written once. Errors travel on as a message status (and a text in the
// batch's result slot), never as exceptions: a malformed batch fails that
// batch, not the stage.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ipc/segment.h"
#include "stages/forward.h"
#include "stages/tail_grammar.h"

namespace kvasir {

// The compute a stage runs: its backend's forward (StageBackend::forward,
// stages/backend.h) in production, a fake in the ring's own tests (same
// contract as SliceExecutor::forward).
using StageForward =
    std::function<void(const ForwardBatch&, const float* hidden_in, float* hidden_out,
                       float* logits)>;

struct AgentConfig {
  int stage = 0;
  int32_t vocab = 0;     // tail: logits width
  int32_t n_blocks = 0;  // the KV pool every block id must fall in
  // Tail: structured outputs (null: constrained rows fail), and whether the
  // backend samples on its device, so needs the token masks before its
  // forward pass (ForwardBatch::token_masks) rather than after.
  std::shared_ptr<TailGrammar> grammar;
  bool device_masks = false;
  // What runs the kernels, as one line for StageShared::simd_text (a CPU
  // stage: kernels/cpu/simd.h simd_summary; a GPU stage: its device). The
  // agent publishes it when it starts and, whenever it changed, after each
  // batch (the CPU kernels choose their levels on first use). Null: nothing.
  std::function<std::string()> kernels;
  // The sliding-window group's pool (0: none): its tables' ids fall in it.
  int32_t n_blocks_swa = 0;
};

// Runs until the segment's shutdown flag is set. Returns 0.
int run_agent(ipc::Segment& seg, const AgentConfig& cfg, const StageForward& forward);

}  // namespace kvasir
