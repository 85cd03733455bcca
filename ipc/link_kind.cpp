// ipc/link_kind.cpp — each ring link's kind from the plan (ipc/link_kind.h).
#include "ipc/link_kind.h"

#include <cstring>

#include "base/check.h"

namespace kvasir::ipc {

int cuda_ordinal(const char* device) {
  if (!device || std::strncmp(device, "cuda:", 5) != 0) return -1;
  const char* p = device + 5;
  int n = 0, digits = 0;
  for (; *p; ++p, ++digits) {
    if (*p < '0' || *p > '9' || digits >= 4) return -1;
    n = n * 10 + (*p - '0');
  }
  return digits ? n : -1;
}

LinkKind link_kind(const SegmentParams& p, int32_t link) {
  KV_CHECK(link >= 0 && link + 1 < p.n_stages, "link {} of a {}-stage ring", link, p.n_stages);
  const StagePlan& from = p.stages[link];
  const StagePlan& to = p.stages[link + 1];
  if (from.host != to.host) return LinkKind::kAcrossHosts;
  if (cuda_ordinal(from.device) >= 0 && cuda_ordinal(to.device) >= 0) return LinkKind::kCudaIpc;
  return LinkKind::kHostMemory;
}

CudaLinks cuda_links(const SegmentParams& p, int32_t stage) {
  KV_CHECK(stage >= 0 && stage < p.n_stages, "stage {} of a {}-stage ring", stage, p.n_stages);
  CudaLinks l;
  if (stage > 0 && link_kind(p, stage - 1) == LinkKind::kCudaIpc) l.import_link = stage - 1;
  if (stage + 1 < p.n_stages && link_kind(p, stage) == LinkKind::kCudaIpc) l.export_link = stage;
  return l;
}

}  // namespace kvasir::ipc
