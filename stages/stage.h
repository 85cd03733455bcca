// stages/stage.h — the stage process, as kvasird sees it: its entry point.
// The one header of stages/ that the daemon may include
// (docs/architecture.md, "Modules").
#pragma once

#include <string>

namespace kvasir {

// The stage process (kvasird execs itself with `--stage N --segment NAME`):
// opens the segment and the model, builds its backend for the plan's device
// (the CPU slice executor or the CUDA plugin, stages/backend.h), reports its
// KV capacity, waits for the daemon's block count, allocates the KV blocks,
// reports ready and runs the agent until shutdown (the handshake is written
// out in stage_main.cpp). Any failure before serving is written to the
// stage's error field with status failed. Returns the process exit code.
int stage_main(int stage, const std::string& segment_name);

}  // namespace kvasir
