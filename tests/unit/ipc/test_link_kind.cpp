// tests/unit/ipc/test_link_kind.cpp — how each ring link carries the hidden
// state (ipc/link_kind.h), decided from the plan alone: CUDA IPC only
// between two GPU stages of one host, the segment's host boundary between
// any other pair of one host, and a link across hosts wherever the two
// stages' hosts differ, whatever their devices (the relay carries it).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "base/check.h"
#include "ipc/link_kind.h"

namespace kvasir::ipc {
namespace {

// One stage per entry: "cpu" or "cuda:N", then "@H" for host H (none: 0).
SegmentParams plan(const std::vector<std::string>& stages) {
  SegmentParams p;
  p.n_stages = int32_t(stages.size());
  for (size_t i = 0; i < stages.size(); ++i) {
    const size_t at = stages[i].find('@');
    std::snprintf(p.stages[i].device, sizeof p.stages[i].device, "%s",
                  stages[i].substr(0, at).c_str());
    if (at != std::string::npos) p.stages[i].host = std::stoi(stages[i].substr(at + 1));
  }
  return p;
}

std::vector<LinkKind> kinds(const SegmentParams& p) {
  std::vector<LinkKind> out;
  for (int32_t l = 0; l + 1 < p.n_stages; ++l) out.push_back(link_kind(p, l));
  return out;
}

constexpr LinkKind kHost = LinkKind::kHostMemory, kIpc = LinkKind::kCudaIpc,
                   kAcross = LinkKind::kAcrossHosts;

TEST(LinkKind, OneHostUsesCudaIpcOnlyBetweenTwoGpuStages) {
  EXPECT_EQ(kinds(plan({"cpu", "cpu"})), (std::vector{kHost}));
  EXPECT_EQ(kinds(plan({"cpu", "cuda:0"})), (std::vector{kHost}));
  EXPECT_EQ(kinds(plan({"cuda:0", "cpu"})), (std::vector{kHost}));
  EXPECT_EQ(kinds(plan({"cuda:0", "cuda:1"})), (std::vector{kIpc}));
  EXPECT_EQ(kinds(plan({"cuda:0", "cuda:1", "cpu", "cuda:2"})), (std::vector{kIpc, kHost, kHost}));
}

TEST(LinkKind, ACutIsAcrossHostsWhateverTheDevicesBesideIt) {
  for (const char* a : {"cpu", "cuda:0"})
    for (const char* b : {"cpu", "cuda:0", "cuda:1"}) {
      SCOPED_TRACE(std::string(a) + " | " + b);
      EXPECT_EQ(kinds(plan({a, std::string(b) + "@1"})), (std::vector{kAcross}));
    }
  // The links inside each host keep their kinds: two GPUs on the leader,
  // two on the worker (each host's cuda:0 is its own), cpu then GPU there.
  EXPECT_EQ(kinds(plan({"cuda:0", "cuda:1", "cuda:0@1", "cuda:1@1"})),
            (std::vector{kIpc, kAcross, kIpc}));
  EXPECT_EQ(kinds(plan({"cuda:0", "cpu@1", "cuda:0@1"})), (std::vector{kAcross, kHost}));
  // A ring that comes back to the leader: two cuts.
  EXPECT_EQ(kinds(plan({"cuda:0", "cuda:0@1", "cuda:1"})), (std::vector{kAcross, kAcross}));
}

TEST(LinkKind, NoCudaIpcLinkForAStageBesideACut) {
  // What a GPU backend attaches: nothing on the cut, on either host.
  const SegmentParams p = plan({"cuda:0", "cuda:1", "cuda:0@1", "cuda:1@1"});
  const CudaLinks want[] = {{-1, 0}, {0, -1}, {-1, 2}, {2, -1}};
  for (int32_t s = 0; s < p.n_stages; ++s) {
    const CudaLinks got = cuda_links(p, s);
    EXPECT_EQ(got.import_link, want[s].import_link) << "stage " << s;
    EXPECT_EQ(got.export_link, want[s].export_link) << "stage " << s;
  }
  // The same devices on one host: every link CUDA IPC.
  const SegmentParams one = plan({"cuda:0", "cuda:1", "cuda:2", "cuda:3"});
  EXPECT_EQ(cuda_links(one, 1).export_link, 1);
  EXPECT_EQ(cuda_links(one, 2).import_link, 1);
}

TEST(LinkKind, ALinkOutsideTheRingIsRefused) {
  const SegmentParams p = plan({"cpu", "cpu"});
  EXPECT_THROW(link_kind(p, -1), Error);
  EXPECT_THROW(link_kind(p, 1), Error);
  EXPECT_THROW(cuda_links(p, 2), Error);
}

}  // namespace
}  // namespace kvasir::ipc
