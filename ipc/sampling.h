// ipc/sampling.h — a request's sampling parameters, as they travel in the
// batch descriptor from the bridge to the tail stage. Plain old data: fixed
// size, no pointers, safe to copy through shared memory.
//
// Names follow the OpenAI API (temperature, top_p, seed, presence_penalty,
// frequency_penalty, logprobs, logit_bias) plus vLLM's top_k, min_p,
// repetition_penalty. A row's logit biases travel beside its parameters in
// the descriptor (ipc/batch.h); SamplingParams only counts them.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace kvasir {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = 0;                // 0 = off
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 = off (prompt + output tokens)
  float presence_penalty = 0.0f;    // [-2, 2] (output tokens)
  float frequency_penalty = 0.0f;   // [-2, 2] (output tokens)
  uint64_t seed = 0;                // with has_seed: reproducible across runs and plans
  uint8_t has_seed = 0;
  uint8_t logprobs = 0;  // top-N alternatives to return (0..kMaxLogprobs)
  // logit_bias: how many LogitBias entries the row carries beside these
  // parameters (0..kMaxLogitBias; ipc/batch.h, DescView::bias).
  uint16_t n_logit_bias = 0;
  // Structured outputs (docs/structured-outputs.md): 1 + the index of the
  // segment's grammar-table entry that holds the request's spec, and that
  // entry's id (ipc/grammar_table.h); 0 = unconstrained. Set by the bridge.
  uint32_t grammar_entry = 0;
  uint64_t grammar_id = 0;
};

// vLLM's default --max-logprobs: the most top alternatives a token carries.
constexpr int kMaxLogprobs = 20;

// logit_bias (OpenAI): `bias` added to token `token`'s logit before the
// penalties and the draw. At most kMaxLogitBias per request (OpenAI's
// documented limit), each bias in [-kMaxLogitBiasValue, kMaxLogitBiasValue].
struct LogitBias {
  int32_t token = 0;
  float bias = 0;
};
constexpr int kMaxLogitBias = 300;
constexpr float kMaxLogitBiasValue = 100.0f;

// Whether any of the repetition / presence / frequency penalties is on.
// Such a row is sampled with its sequence's token history, which the tail
// keeps by position from 0 (stages/tail_sequences.h); so the
// scheduler never starts such a sequence past a cached prefix, whose
// positions the tail would never see (docs/scheduler.md).
inline bool penalties_active(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

// Whether a row must be sampled on the host, from its logits (a GPU tail
// samples the others on the device): penalties need the sequence's
// history; top-N logprobs and logit biases are the host sampler's.
inline bool needs_host_sampler(const SamplingParams& p) {
  return penalties_active(p) || p.logprobs != 0 || p.n_logit_bias != 0;
}

// Ok if valid; otherwise kInvalidArgument and a message naming the
// parameter, e.g. "temperature must be >= 0 (got -1)"; *field (when given)
// is then the parameter's name, e.g. "temperature". NaN is refused everywhere.
Status validate_sampling(const SamplingParams& p, const char** field = nullptr);

// Ok if every entry names a token in [0, vocab) with a bias in
// [-kMaxLogitBiasValue, kMaxLogitBiasValue] (NaN refused) and there are at
// most kMaxLogitBias; otherwise kInvalidArgument saying which.
Status validate_logit_bias(std::span<const LogitBias> bias, int32_t vocab);

}  // namespace kvasir
