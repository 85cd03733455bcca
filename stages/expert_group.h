// stages/expert_group.h — the two sides of an expert group in the segment
// (docs/expert-groups.md): the leader's view of its members
// (SegmentPeers, an ExpertPeers for its SliceExecutor) and the member
// process's loop (run_member).
//
// The exchange is ipc::MemberCall (ipc/segment.h): one request outstanding
// per member; a member that starts with a request unanswered answers it, so
// a member restarted mid-request costs its leader a wait, not a re-send.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipc/segment.h"
#include "stages/forward.h"

namespace kvasir {

class SegmentPeers final : public ExpertPeers {
 public:
  // The members of ring position `stage` in the segment's plan, in range
  // order. `me`: the leader's slot, whose phase is blocked while it waits.
  // Throws kvasir::Error if the plan's ranges do not follow each other.
  SegmentPeers(ipc::Segment& seg, int stage, int32_t top_k);

  int count() const override { return int(members_.size()); }
  int32_t first(int m) const override { return members_.at(size_t(m)).first; }
  int32_t held(int m) const override { return members_.at(size_t(m)).held; }
  void post(int m, int layer, const float* x, int64_t n, const int32_t* ids) override;
  // Blocks (phase blocked) until member m answers its last post — through
  // the member's restarts —; throws kvasir::Error on shutdown or when the
  // member could not compute it.
  const float* wait(int m) override;

 private:
  struct Member {
    int index = 0;  // in the segment's member list
    ipc::MemberArea area;
    int32_t first = 0, held = 0;
    uint32_t want = 0;  // the answer awaited (the last post's sequence number)
  };
  ipc::Segment& seg_;
  ipc::StageShared& me_;
  int32_t top_k_ = 0;
  std::vector<Member> members_;
};

// The CPU kernel choices every matmul of an expert group's experts needs
// (each expert stack's weight type, decode and batch rows), made now in
// this process: the leader makes them before it serves, so its members,
// which adopt its kernels text (run_member), never measure their own and
// compute the leader's bits.
void choose_expert_kernels(const std::string& model_path, int first_layer, int last_layer);

// The member process `member` (index into the segment's members): maps its
// experts of its group's layers, reports ready, then answers its leader's
// requests until shutdown. Returns the exit code; throws kvasir::Error on a
// start-up failure (the caller reports it in the member's slot).
int run_member(ipc::Segment& seg, int member);

}  // namespace kvasir
