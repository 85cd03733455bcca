// daemon/engine/engine.h — the engine as the rest of the daemon sees it.
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
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ipc/sampling.h"

namespace kvasir {

struct GenRequest {
  std::vector<int32_t> prompt;  // token ids, checked against the vocabulary
  int32_t max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // besides the model's end-of-generation ids
  bool ignore_eos = false;        // benchmarks: generate exactly max_tokens
  // Structured outputs: the spec the output must match, in grammar/'s wire
  // form (grammar::encode_spec), already compiled once by the API; null =
  // unconstrained. Opaque to the engine: the bridge puts it into the
  // segment's grammar table and the tail stage compiles and applies it.
  std::shared_ptr<const std::string> grammar;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

struct TokenEvent {
  int32_t token = -1;  // -1 when the event only carries an end
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top_logprobs;  // when asked
  FinishReason finish = FinishReason::kNone;
  Status error;  // with kError: what went wrong (the API picks the HTTP status by its code)
};

using RequestId = uint64_t;
using EventSink = std::function<void(const TokenEvent&)>;

// ok: serving. recovering: a lost stage is being restarted (requests wait).
// failed: the restart limit was hit; work is refused (EngineStats::failure).
enum class EngineState { kOk, kRecovering, kFailed };
inline const char* engine_state_name(EngineState s) {
  switch (s) {
    case EngineState::kRecovering:
      return "recovering";
    case EngineState::kFailed:
      return "failed";
    case EngineState::kOk:
      break;
  }
  return "ok";
}

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
  // running sequence is recomputed. kFailed: the restart limit was hit; the
  // engine refuses work and `failure` says why.
  int64_t restarts = 0;        // stage processes restarted
  int64_t faults = 0;          // stage losses (deaths and watchdog kills)
  int64_t requeued = 0;        // sequences recomputed after a loss
  bool degraded = false;       // recovering right now
  double last_recovery_s = 0;  // last loss seen → ring serving again
  EngineState state = EngineState::kOk;
  std::string failure;  // with kFailed: why
};

// One stage as the engine reports it: its slice of the plan and its
// counters (busy + starved + blocked is the time since it began serving).
struct StageReport {
  int32_t index = 0;
  int32_t first_layer = 0, last_layer = 0;  // inclusive
  std::string device;                       // "cpu", "cuda:N"
  double busy_s = 0, starved_s = 0, blocked_s = 0;
  uint64_t batches = 0, tokens = 0, refused = 0;
};

struct RingReport {
  int32_t inflight = 0;  // micro-batches the ring holds at once
  std::vector<StageReport> stages;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues a request. Returns its id; a refused request (bad ids, too long,
  // queue full) gets exactly one event with kError and its Status, and 0 is
  // returned. Thread-safe.
  virtual RequestId submit(GenRequest req, EventSink sink) = 0;
  // Aborts at the next iteration; frees its blocks; a final kAbort event follows.
  virtual void cancel(RequestId id) = 0;
  virtual EngineStats stats() const = 0;
  // The ring's stages and their counters (none before the ring is up).
  virtual RingReport ring_report() const { return {}; }
  virtual bool ready() const = 0;
};

}  // namespace kvasir
