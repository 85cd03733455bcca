// daemon/engine/ring_health.h — what the supervisor tells the bridge about the
// stage processes, each time the bridge wakes (docs/recovery.md).
#pragma once

#include <cstdint>
#include <string>

namespace kvasir {

struct RingHealth {
  // Stage losses (deaths and watchdog kills) so far. Each one invalidates
  // every batch in the ring and every KV cache entry: when it changes, the
  // bridge starts a new epoch and requeues every running sequence.
  uint64_t faults = 0;
  // Expert group members lost (docs/expert-groups.md): no epoch — a member
  // holds no batch and no KV; its leader waits for its successor.
  uint64_t member_losses = 0;
  int64_t restarts = 0;    // stage processes started again
  bool serving = true;     // every stage is up and ready
  std::string last_fault;  // what the last loss was
  std::string failed;      // non-empty: the supervisor gave up (why); fatal
};

}  // namespace kvasir
