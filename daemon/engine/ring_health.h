// daemon/engine/ring_health.h — what the supervisor tells the bridge about the
// stage processes, each time the bridge wakes (docs/recovery.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvasir {

// A ring link to a worker host (docs/multi-host.md): the stages it runs
// have no process here; their liveness is the link.
struct LinkHealth {
  std::string host;  // "ADDR:PORT", as the plan names it
  int32_t first_stage = 0, last_stage = 0;
  std::string state;                            // "joining", "serving" or "lost"
  int64_t joins = 0;                            // sessions that reached the worker's Ready
  uint64_t bytes_sent = 0, bytes_received = 0;  // over every session
  int64_t rtt_ns = 0;                           // the last Ping's round trip; 0: none yet
  std::string last_error;                       // why the last session or join attempt ended
};

struct RingHealth {
  // Stage losses (deaths and watchdog kills) so far. Each one invalidates
  // every batch in the ring and every KV cache entry: when it changes, the
  // bridge starts a new epoch and requeues every running sequence.
  uint64_t faults = 0;
  // Expert group members lost (docs/expert-groups.md): no epoch — a member
  // holds no batch and no KV; its leader waits for its successor.
  uint64_t member_losses = 0;
  int64_t restarts = 0;           // stage processes started again
  bool serving = true;            // every stage is up and ready
  std::string last_fault;         // what the last loss was
  std::string failed;             // non-empty: the supervisor gave up (why); fatal
  std::vector<LinkHealth> links;  // one per worker host; empty on one host
};

}  // namespace kvasir
