// The segment's plan from a config with expert groups
// (Supervisor::params_for, docs/expert-groups.md): each stage's expert range,
// the members after the stages with their position, index and range, the
// model's top k, and a plan the segment accepts.
#include <gtest/gtest.h>

#include <cstring>

#include "base/cpu_list.h"

#include "daemon/config/config.h"
#include "daemon/supervisor/supervisor.h"
#include "ipc/segment.h"

namespace kvasir {
namespace {

TEST(SupervisorParams, GroupsBecomeMembers) {
  const Config c = parse_config(R"(
[model]
path = "m.gguf"
[[stages]]
layers = "0-1"
experts = "0-3"
[[stages]]
layers = "0-1"
experts = "4-7"
[[stages]]
layers = "2"
[[stages]]
layers = "3"
experts = "0-1"
[[stages]]
layers = "3"
experts = "2-5"
[[stages]]
layers = "3"
experts = "6-7"
)",
                                "/base");
  ModelConfig m;
  m.n_layers = 4;
  m.hidden = 64;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 16;
  m.n_experts = 8;
  m.n_experts_used = 2;
  const ipc::SegmentParams p = Supervisor::params_for(c, m);
  EXPECT_EQ(p.n_stages, 3);
  EXPECT_EQ(p.n_members, 3);
  EXPECT_EQ(p.moe_top_k, 2);
  EXPECT_EQ(p.stages[0].experts_first, 0);
  EXPECT_EQ(p.stages[0].experts_last, 3);
  EXPECT_EQ(p.stages[1].experts_first, -1);  // not in a group
  EXPECT_EQ(p.stages[2].experts_last, 1);
  const int want[3][4] = {{0, 1, 4, 7}, {2, 1, 2, 5}, {2, 2, 6, 7}};  // position, index, range
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(p.members[k].position, want[k][0]) << k;
    EXPECT_EQ(p.members[k].index, want[k][1]) << k;
    EXPECT_EQ(p.members[k].plan.experts_first, want[k][2]) << k;
    EXPECT_EQ(p.members[k].plan.experts_last, want[k][3]) << k;
    EXPECT_EQ(p.members[k].plan.first, p.stages[want[k][0]].first) << k;
  }
  EXPECT_EQ(ipc::Segment::check_params(p), "");
}

// The hand-off spin and each stage's CPUs travel to the stages in the plan.
TEST(SupervisorParams, SpinAndCpusReachTheSegment) {
  const std::string cpu = std::to_string(allowed_cpus().front());
  const Config c = parse_config(R"(
[model]
path = "m.gguf"
[plan]
spin_us = 350
[[stages]]
layers = "0-1"
cpus = ")" + cpu + R"("
[[stages]]
layers = "2-3"
)",
                                "/base");
  ModelConfig m;
  m.n_layers = 4;
  m.hidden = 64;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 16;
  const ipc::SegmentParams p = Supervisor::params_for(c, m);
  EXPECT_EQ(p.spin_ns, 350'000);
  EXPECT_EQ(std::string(p.stages[0].cpus), cpu);
  EXPECT_EQ(std::string(p.stages[1].cpus), "");
  EXPECT_EQ(ipc::Segment::check_params(p), "");
  ipc::SegmentParams bad = p;
  bad.spin_ns = -1;
  EXPECT_NE(ipc::Segment::check_params(bad), "");
  bad = p;
  std::memset(bad.stages[1].cpus, 'x', sizeof bad.stages[1].cpus);  // not terminated
  EXPECT_NE(ipc::Segment::check_params(bad), "");
}

}  // namespace
}  // namespace kvasir
