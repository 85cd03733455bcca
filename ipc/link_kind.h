// ipc/link_kind.h — how the hidden state crosses each link of the ring
// (link s: stage s → s+1), decided from the plan alone, so that every
// process that reads the plan decides the same: the two stages of a link,
// the relays and the record table's users, on every host.
//
//   kHostMemory  both stages on one host, at least one of them cpu: the
//                segment's host boundary Boundary[k][s] (a GPU stage
//                downloads into it or uploads from it);
//   kCudaIpc     both stages on one host, both cuda:N: the exporter's
//                device slot (ipc/cuda_boundary.h, stages/cuda);
//   kAcrossHosts the stages run on two hosts (StagePlan::host): the relays
//                carry Boundary[k][s] over the link (docs/multi-host.md),
//                so each side uses its own segment's host boundary,
//                whatever the stages' devices. No record of the CUDA IPC
//                table is published for such a link on either host.
#pragma once

#include <cstdint>

#include "ipc/segment.h"

namespace kvasir::ipc {

// "cuda:N" → N (0..9999); -1 for anything else (validated plans only hold
// "cpu" or "cuda:N").
int cuda_ordinal(const char* device);

enum class LinkKind : int32_t { kHostMemory = 0, kCudaIpc = 1, kAcrossHosts = 2 };

// Link `link` (0 <= link < n_stages - 1) of a plan that passed
// Segment::check_params. A link outside the ring is a caller's bug: checked.
LinkKind link_kind(const SegmentParams& p, int32_t link);

// The CUDA IPC links of stage `stage` (what its GPU backend attaches,
// stages/cuda): the link it imports from (stage - 1) and the one it
// exports on (stage), each -1 where that link is not kCudaIpc.
struct CudaLinks {
  int32_t import_link = -1, export_link = -1;
};
CudaLinks cuda_links(const SegmentParams& p, int32_t stage);

}  // namespace kvasir::ipc
