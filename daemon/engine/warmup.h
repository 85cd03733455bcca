// daemon/engine/warmup.h — the daemon's own requests before it serves
// (scheduler.warmup, docs/scheduler.md "Filling the pipeline").
//
// A cold daemon pays twice on its first requests: every weight page faults
// in on the first forward (a stage's first micro-batch took over a second
// on the default model), and the scheduler's cost model has seen nothing,
// so it can neither budget steps by time nor cut a lone prompt into pieces
// that overlap the stages. warm_up sends three small requests through the
// engine, one after another, before the API takes any: a 16-token prompt
// (touches the weights), a 64-token prompt with three decodes, a 160-token
// prompt — prefill and decode steps of different sizes, so the fit can tell
// a step's fixed cost from a token's. They carry a cache salt of their own
// (no client prompt shares their blocks) and count in the engine's token
// counters like any request.
#pragma once

#include <cstdint>
#include <functional>

#include "daemon/engine/engine.h"

namespace kvasir {

struct WarmupResult {
  int32_t requests = 0;  // finished (stop or length)
  int32_t failed = 0;    // refused, errored, or not done within the time allowed
  double seconds = 0;
};

// Runs the warm-up requests through `engine` (token ids below `vocab`),
// waiting up to `timeout_s` for each; one not done by then, or when `stop`
// says so (polled every 100 ms: a stop signal during the warm-up), is
// cancelled and the rest skipped. Never fails the daemon: a warm-up that
// did not finish leaves a cold engine, as with warmup = false.
WarmupResult warm_up(Engine& engine, int32_t vocab, double timeout_s = 300,
                     const std::function<bool()>& stop = {});

}  // namespace kvasir
