// daemon/engine/policy.h — the scheduler's settings (docs/scheduler.md), and
// what the bridge tells it about the ring when it asks for a batch.
//
// Apart from scheduler.h so that the scheduler's two parts (capacity.h,
// batch_former.h) can read them without seeing the Scheduler itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "daemon/engine/drafter.h"  // SpecLimits

namespace kvasir {

enum class Policy {
  kNaive,       // one request at a time
  kStatic,      // a batch admitted together; the next only when all have finished
  kContinuous,  // iteration-level admission, whole prefills
  kChunked,     // "continuous+chunked": chunked prefill mixed with decodes (default)
};
std::optional<Policy> parse_policy(std::string_view name);
const char* policy_name(Policy p);

// scheduler.itl_target_ms = "auto" (docs/scheduler.md, "Scheduling by time").
constexpr double kItlTargetAuto = -1;

struct SchedLimits {
  int32_t max_rows = 32;
  int32_t max_tokens = 512;
  int32_t chunk_size = 512;
  int32_t max_num_seqs = 256;
  Policy policy = Policy::kChunked;
  int32_t inflight = 1;  // micro-batches the ring holds at once (the bridge sets it)
  // The target gap between a running request's tokens, in ms, under
  // `continuous+chunked`: > 0 a fixed target, kItlTargetAuto from the cost
  // model (3 x the step the running requests' decodes alone would take), 0
  // none (the token budget alone, as before time budgets existed).
  double itl_target_ms = 0;
  int32_t n_stages = 1;  // stages a token crosses (the bridge sets it)
  // Stages that can compute at the same time: each GPU stage, and the CPU
  // stages as one unless each has cores of its own (threads > 0 each, their
  // sum within the cores): CPU stages sharing the cores by need (threads =
  // 0, the default) take turns on the same cores, so overlapping them gains
  // nothing. 0: every stage (n_stages). The pipeline fill reads it
  // (TimeBudget::pipeline_piece).
  int32_t parallel_stages = 0;
  // Automatic prefix caching ([kv] prefix_caching; docs/scheduler.md). Not
  // under `static`, which models a padded batcher (the config refuses it).
  bool prefix_caching = false;
  // Speculative decoding ([speculative]; docs/speculative.md): off unless
  // a method is set.
  SpecLimits spec = {};
};

// The ring as the bridge sees it when it asks for a batch.
struct RingLoad {
  int32_t free_slots = 0;        // free now, counting this batch's (<= 0: unknown)
  int64_t tokens_in_flight = 0;  // tokens of the batches in the busy slots
};

}  // namespace kvasir
