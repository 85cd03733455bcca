// daemon/engine/draft_length.cpp — see draft_length.h.
#include "daemon/engine/draft_length.h"

#include <algorithm>

namespace kvasir {

void DraftEstimate::observe(int32_t proposed, int32_t accepted) {
  if (proposed <= 0) return;
  const bool probe = probe_;
  probe_ = false;
  if (probe && accepted > 0) {
    *this = DraftEstimate{};
    return;
  }
  hits_ = kDecay * hits_ + double(accepted);
  trials_ = kDecay * trials_ + double(accepted) + (accepted < proposed ? 1.0 : 0.0);
}

double expected_accepted(double a, int32_t k) {
  double sum = 0, p = 1;
  for (int32_t i = 1; i <= k; ++i) sum += (p *= a);
  return sum;
}

int32_t best_draft_length(double a, double emitted, double step, std::span<const double> extra) {
  if (extra.empty() || !(step > 0)) return 0;
  a = std::clamp(a, 0.0, 1.0);
  int32_t best = 0;
  double best_rate = emitted / step;
  for (int32_t k = 1; k < int32_t(extra.size()); ++k) {
    const double rate = (emitted + expected_accepted(a, k)) / (step + std::max(extra[size_t(k)], 0.0));
    // Strictly better, and by a hair: a draft that gains nothing
    // measurable is not worth its position.
    if (rate > best_rate * (1 + 1e-9)) {
      best = k;
      best_rate = rate;
    }
  }
  return best;
}

}  // namespace kvasir
