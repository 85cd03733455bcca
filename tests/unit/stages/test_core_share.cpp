// stages/core_share.h: the CPU stages of one instance share the cores by
// need — a stage alone in the ring takes them all, busy stages split them,
// GPU stages and idle or blocked ones claim none.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "base/check.h"
#include "ipc/segment.h"
#include "stages/core_share.h"

namespace kvasir {
namespace {

std::unique_ptr<ipc::Segment> segment(int n_stages, const char* tag) {
  ipc::SegmentParams p;
  p.n_stages = n_stages;
  p.dims = ipc::SlotDims{4, 16, 8, 32, 2};
  p.block_size = 4;
  for (int i = 0; i < n_stages; ++i) p.stages[i] = ipc::StagePlan{2 * i, 2 * i + 1, 1, "cpu"};
  std::strcpy(p.model_path, "/nonexistent");
  return ipc::Segment::create(ipc::Segment::name_for(std::string(tag) + std::to_string(getpid())),
                              p);
}

void set_phase(ipc::Segment& seg, int s, ipc::StagePhase p) {
  seg.stage(s).phase.store(p);
}

TEST(CoreShare, AloneTakesEveryCoreUpToItsThreads) {
  auto seg = segment(2, "cshare1");
  EXPECT_EQ(CoreShare(*seg, 0, 8, {8, 8}).width(), 8);
  EXPECT_EQ(CoreShare(*seg, 0, 8, {3, 8}).width(), 3);  // never more than its own threads
  EXPECT_EQ(CoreShare(*seg, 1, 2, {2, 2}).width(), 2);
  // Starved or blocked stages hold no cores.
  set_phase(*seg, 1, ipc::kPhaseBlocked);
  EXPECT_EQ(CoreShare(*seg, 0, 8, {8, 8}).width(), 8);
}

TEST(CoreShare, BusyStagesSplitTheCores) {
  auto seg = segment(3, "cshare2");
  set_phase(*seg, 1, ipc::kPhaseBusy);
  EXPECT_EQ(CoreShare(*seg, 0, 2, {2, 2, 2}).width(), 1);
  EXPECT_EQ(CoreShare(*seg, 0, 8, {8, 8, 8}).width(), 4);
  // A busy stage with fewer threads than its share leaves the rest.
  EXPECT_EQ(CoreShare(*seg, 0, 8, {8, 1, 8}).width(), 7);
  set_phase(*seg, 2, ipc::kPhaseBusy);
  EXPECT_EQ(CoreShare(*seg, 0, 9, {9, 9, 9}).width(), 3);
  EXPECT_EQ(CoreShare(*seg, 0, 2, {2, 2, 2}).width(), 1);  // more stages than cores: one each
  // A GPU stage (0 threads) is not counted, busy or not.
  EXPECT_EQ(CoreShare(*seg, 0, 8, {8, 0, 8}).width(), 4);
}

TEST(CoreShare, FollowsThePhasesAsTheyChange) {
  auto seg = segment(2, "cshare3");
  const CoreShare share(*seg, 0, 4, {4, 4});
  EXPECT_EQ(share.width(), 4);
  set_phase(*seg, 1, ipc::kPhaseBusy);
  EXPECT_EQ(share.width(), 2);
  set_phase(*seg, 1, ipc::kPhaseIdle);
  EXPECT_EQ(share.width(), 4);
}

TEST(CoreShare, RefusesAStageWithoutThreads) {
  auto seg = segment(2, "cshare4");
  EXPECT_THROW(CoreShare(*seg, 0, 4, {0, 4}), Error);
  EXPECT_THROW(CoreShare(*seg, 2, 4, {4, 4}), Error);
}

}  // namespace
}  // namespace kvasir
