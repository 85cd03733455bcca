// ipc/sampling.cpp — validation of a request's sampling parameters.
//
// Runs at the front door (so the user gets a 400 naming the parameter) and
// again in the tail's sampler (defence in depth: a bad value must never reach
// the arithmetic). Every comparison is written so that NaN fails it.
#include "ipc/sampling.h"

#include <fmt/format.h>

#include <cmath>

namespace kvasir {

Status validate_sampling(const SamplingParams& p, const char** field) {
  auto bad = [&](const char* name, std::string message) {
    if (field) *field = name;
    return Status(ErrorCode::kInvalidArgument, std::move(message));
  };
  if (!std::isfinite(p.temperature) || !(p.temperature >= 0.0f))
    return bad("temperature",
               fmt::format("temperature must be a finite number >= 0 (got {})", p.temperature));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return bad("top_p", fmt::format("top_p must be in (0, 1] (got {})", p.top_p));
  if (p.top_k < 0)
    return bad("top_k", fmt::format("top_k must be >= 0, 0 = off (got {})", p.top_k));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return bad("min_p", fmt::format("min_p must be in [0, 1] (got {})", p.min_p));
  if (!std::isfinite(p.repetition_penalty) || !(p.repetition_penalty > 0.0f))
    return bad("repetition_penalty",
               fmt::format("repetition_penalty must be a finite number > 0 (got {})",
                           p.repetition_penalty));
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    return bad("presence_penalty",
               fmt::format("presence_penalty must be in [-2, 2] (got {})", p.presence_penalty));
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    return bad("frequency_penalty",
               fmt::format("frequency_penalty must be in [-2, 2] (got {})", p.frequency_penalty));
  if (p.logprobs > kMaxLogprobs)
    return bad("logprobs",
               fmt::format("logprobs must be in [0, {}] (got {})", kMaxLogprobs, p.logprobs));
  if (p.n_logit_bias > kMaxLogitBias)
    return bad("logit_bias", fmt::format("logit_bias may name at most {} tokens (got {})",
                                         kMaxLogitBias, p.n_logit_bias));
  if (p.has_seed > 1)
    return bad("has_seed", fmt::format("has_seed must be 0 or 1 (got {})", p.has_seed));
  return Status();
}

Status validate_logit_bias(std::span<const LogitBias> bias, int32_t vocab) {
  if (bias.size() > size_t(kMaxLogitBias))
    return error_status(ErrorCode::kInvalidArgument,
                        "logit_bias may name at most {} tokens (got {})", kMaxLogitBias,
                        bias.size());
  for (const LogitBias& b : bias) {
    if (b.token < 0 || b.token >= vocab)
      return error_status(ErrorCode::kInvalidArgument,
                          "logit_bias: token id {} is out of range (vocabulary: {})", b.token,
                          vocab);
    if (!(b.bias >= -kMaxLogitBiasValue && b.bias <= kMaxLogitBiasValue))
      return error_status(ErrorCode::kInvalidArgument,
                          "logit_bias: the bias of token {} must be in [{}, {}] (got {})", b.token,
                          -kMaxLogitBiasValue, kMaxLogitBiasValue, b.bias);
  }
  return Status();
}

}  // namespace kvasir
