// base/expert_load.h — the figures of a MoE stage's expert load, shared by
// the stage (what it publishes), the daemon (/kvasir/v1/stats, /metrics)
// and `kvasir top` (docs/model-formats.md, "Expert load").
//
// A stage counts the tokens routed to each expert: per MoE layer it holds,
// each (token, choice) of the router's top k adds one to the chosen
// expert. The counters are shown in at most kMaxExpertsShown slots: a model
// with more experts (up to the 1024 model/config.cpp accepts) folds
// experts_per_slot(n) consecutive experts into one slot, so the sum is
// kept and the cardinality stays bounded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

namespace kvasir {

constexpr int32_t kMaxExpertsShown = 256;

// Consecutive experts per shown slot: 1 up to kMaxExpertsShown experts.
inline int32_t experts_per_slot(int32_t n_experts) {
  return n_experts <= kMaxExpertsShown ? 1 : (n_experts + kMaxExpertsShown - 1) / kMaxExpertsShown;
}

// The slots that n_experts fill (0 for a dense model).
inline int32_t expert_slots(int32_t n_experts) {
  if (n_experts <= 0) return 0;
  const int32_t per = experts_per_slot(n_experts);
  return (n_experts + per - 1) / per;
}

// max / mean over every slot, those with nothing routed included: 1 when
// the tokens are spread evenly, slots × 1 when one slot takes them all; 0
// when nothing was routed.
inline double expert_imbalance(std::span<const uint64_t> routed) {
  uint64_t total = 0, most = 0;
  for (uint64_t c : routed) total += c, most = std::max(most, c);
  if (total == 0) return 0.0;
  return double(most) * double(routed.size()) / double(total);
}

}  // namespace kvasir
