// daemon/engine.h — the bridge as the rest of the daemon sees it.
//
// The engine owns the scheduler loop: it admits requests, forms micro-batches,
// submits them to the head stage's ring and reads sampled token ids from the
// tail's. The HTTP layer only calls submit/cancel and receives events.
//
// Events are delivered on the engine's own thread: a callback must not block
// (post the event to your own executor and return).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ipc/sampling.h"

namespace kvasir {

struct GenRequest {
  std::vector<int32_t> prompt;  // token ids, checked against the vocabulary
  int32_t max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // besides the model's end-of-generation ids
  bool ignore_eos = false;        // benchmarks: generate exactly max_tokens
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

struct TokenEvent {
  int32_t token = -1;  // -1 when the event only carries an end
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top_logprobs;  // when asked
  FinishReason finish = FinishReason::kNone;
  std::string error;  // with kError: what went wrong
};

using RequestId = uint64_t;
using EventSink = std::function<void(const TokenEvent&)>;

struct EngineStats {
  int32_t waiting = 0, running = 0;
  int64_t blocks_total = 0, blocks_free = 0;
  int64_t preemptions = 0;
  int64_t tokens_generated = 0, tokens_prompt = 0;
  // KV positions held by running sequences, and internal waste: allocated
  // slots past each sequence's last position (the tail of its last block).
  int64_t kv_slots_used = 0, kv_waste = 0;
  // Stage crash recovery (docs/recovery.md). While a lost stage is being
  // restarted the engine is degraded: requests wait (none fails), then every
  // running sequence is recomputed. "failed": the restart limit was hit; the
  // engine refuses work and `failure` says why.
  int64_t restarts = 0;        // stage processes restarted
  int64_t faults = 0;          // stage losses (deaths and watchdog kills)
  int64_t requeued = 0;        // sequences recomputed after a loss
  bool degraded = false;       // recovering right now
  double last_recovery_s = 0;  // last loss seen → ring serving again
  std::string state = "ok";    // "ok", "recovering", "failed"
  std::string failure;         // with "failed": why
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues a request. Returns its id; a refused request (bad ids, too long,
  // queue full) gets exactly one event with kError and its message, and 0 is
  // returned. Thread-safe.
  virtual RequestId submit(GenRequest req, EventSink sink) = 0;
  // Aborts at the next iteration; frees its blocks; a final kAbort event follows.
  virtual void cancel(RequestId id) = 0;
  virtual EngineStats stats() const = 0;
  virtual bool ready() const = 0;
};

}  // namespace kvasir
