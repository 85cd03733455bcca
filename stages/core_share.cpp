// stages/core_share.cpp — see core_share.h.
#include "stages/core_share.h"

#include <algorithm>

#include "base/check.h"

namespace kvasir {

CoreShare::CoreShare(ipc::Segment& seg, int self, int cores, std::vector<int> threads)
    : seg_(seg), self_(self), cores_(std::max(1, cores)), threads_(std::move(threads)) {
  KV_CHECK(self >= 0 && size_t(self) < threads_.size() && threads_.size() <= ipc::kMaxStages &&
               threads_[size_t(self)] >= 1,
           "core share: stage {} of {} has no threads", self, threads_.size());
}

int CoreShare::width() const {
  // The other busy CPU stages' threads, each phase read once: a phase that
  // changes meanwhile shifts a core for one kernel call only, which is what
  // a per-call rule is for.
  int others[ipc::kMaxStages];
  int n = 0;
  for (size_t i = 0; i < threads_.size(); ++i) {
    if (int(i) == self_ || threads_[i] <= 0) continue;
    if (seg_.stage(int(i)).phase.load(std::memory_order_relaxed) == ipc::kPhaseBusy)
      others[n++] = threads_[i];
  }
  // Each busy stage, this one included, claims at most its fair share.
  const int fair = std::max(1, cores_ / (n + 1));
  int claimed = 0;
  for (int k = 0; k < n; ++k) claimed += std::min(others[k], fair);
  const int w = std::clamp(cores_ - claimed, 1, threads_[size_t(self_)]);
  return w;
}

}  // namespace kvasir
