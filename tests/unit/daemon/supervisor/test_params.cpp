// The segment's plan from a config with expert groups
// (Supervisor::params_for, docs/expert-groups.md): each stage's expert range,
// the members after the stages with their position, index and range, the
// model's top k, and a plan the segment accepts.
#include <gtest/gtest.h>

#include <cstring>

#include "base/cpu_list.h"
#include "daemon/config/config.h"
#include "daemon/supervisor/kv_split.h"
#include "daemon/supervisor/supervisor.h"
#include "ipc/link_kind.h"
#include "ipc/segment.h"

namespace kvasir {
namespace {

// A model of four small layers: what params_for reads of one.
ModelConfig four_layers() {
  ModelConfig m;
  m.n_layers = 4;
  m.hidden = 64;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 16;
  return m;
}

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
  ModelConfig m = four_layers();
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
  const ModelConfig m = four_layers();
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

// The hosts of a plan cut once: the leader's stages are host 0, the
// worker's host 1, so both hosts' segments see the cut as a link across
// hosts and the links inside each host keep CUDA IPC (ipc/link_kind.h).
TEST(SupervisorParams, HostsNumberEachSideOfTheCut) {
  std::string t = "[model]\npath = \"m.gguf\"\n[cluster]\nkey = \"k\"\n";
  for (int i = 0; i < 4; ++i)
    t += "[[stages]]\nlayers = \"" + std::to_string(i) +
         "\"\ndevice = \"cuda:" + std::to_string(i % 2) + "\"\n" +
         (i >= 2 ? "host = \"10.0.0.2:7710\"\n" : "");
  const Config c = parse_config(t, "/base");
  const ModelConfig m = four_layers();
  const ipc::SegmentParams p = Supervisor::params_for(c, m);
  const int32_t want_host[] = {0, 0, 1, 1};
  for (int s = 0; s < 4; ++s) EXPECT_EQ(p.stages[s].host, want_host[s]) << s;
  EXPECT_EQ(ipc::link_kind(p, 0), ipc::LinkKind::kCudaIpc);
  EXPECT_EQ(ipc::link_kind(p, 1), ipc::LinkKind::kAcrossHosts);
  EXPECT_EQ(ipc::link_kind(p, 2), ipc::LinkKind::kCudaIpc);
  EXPECT_EQ(ipc::Segment::check_params(p), "");
  ipc::SegmentParams bad = p;
  bad.stages[3].host = ipc::kMaxStages;
  EXPECT_NE(ipc::Segment::check_params(bad), "");
}

// How the KV memory is split between the two groups' pools (kv_split.h).
TEST(KvSplit, SlidingPoolGetsItsWantFullPoolTheRest) {
  // One group: the least capacity, as before.
  EXPECT_EQ(split_kv({{113, 9, 0}, {120, 9, 0}}, 0).full, 113);
  EXPECT_EQ(split_kv({{113, 9, 0}, {120, 9, 0}}, 0).sliding, 0);
  // Gemma 3 270M over two stages of 9 layers (1 + 8 and 2 + 7 sliding),
  // 113 blocks of every layer each: a want of 78 leaves stage 1
  // (9 x 113 - 7 x 78) / 2 = 235 for its full layers, stage 0 more.
  const KvSplit s = split_kv({{113, 1, 8}, {113, 2, 7}}, 78);
  EXPECT_EQ(s.sliding, 78);
  EXPECT_EQ(s.full, 235);
  // A want past an equal split gets the equal split: one pool's figures.
  const KvSplit e = split_kv({{113, 1, 8}, {113, 2, 7}}, 10000);
  EXPECT_EQ(e.sliding, 113);
  EXPECT_EQ(e.full, 113);
}

TEST(KvSplit, OnlyCpuPlansOfMixedModelsOutsideStaticGetTheGroup) {
  ModelConfig m;
  m.n_layers = 18;
  m.sliding_window = 512;
  m.sliding_pattern = 6;
  Config cfg;
  cfg.plan.stages.resize(2);
  cfg.plan.max_tokens = 96;
  cfg.scheduler.max_num_seqs = 2;
  EXPECT_TRUE(has_sliding_group(cfg, m));
  EXPECT_EQ(sliding_want(cfg, m), 2 * 39);  // ceil((511 + 96) / 16) + 1 each
  cfg.scheduler.policy = "static";
  EXPECT_FALSE(has_sliding_group(cfg, m));
  cfg.scheduler.policy = "continuous";
  cfg.plan.stages[1].device = "cuda:0";
  EXPECT_FALSE(has_sliding_group(cfg, m));
  cfg.plan.stages[1].device = "cpu";
  m.sliding_pattern = 0;  // every layer slides: no full group to split from
  EXPECT_FALSE(has_sliding_group(cfg, m));
}

}  // namespace
}  // namespace kvasir
