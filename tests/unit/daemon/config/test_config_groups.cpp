// Expert groups in the plan (docs/expert-groups.md, config.h form_groups):
// one test per refusal, each naming its entry, and a group as one position.
#include <gtest/gtest.h>

#include "base/check.h"
#include "base/cores.h"
#include "daemon/config/config.h"
#include "tests/unit/daemon/config/refusal.h"

namespace kvasir {
namespace {

// Position 0: layers 0-3 dense-split as today; position 1: a group of
// `ranges` over layers 4-7.
std::string plan(const std::vector<std::string>& ranges, const std::string& extra = "") {
  std::string t = "[model]\npath = \"m.gguf\"\n[[stages]]\nlayers = \"0-3\"\n";
  for (const auto& r : ranges)
    t += "[[stages]]\nlayers = \"4-7\"\nexperts = \"" + r + "\"\nthreads = 1\n" + extra;
  return t;
}

ModelConfig moe8(int n_experts = 8) {
  ModelConfig m;
  m.arch = "qwen3moe";
  m.n_layers = 8;
  m.hidden = 64;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.head_dim = 16;
  m.n_experts = n_experts;
  m.n_experts_used = 2;
  return m;
}

using test::expect_refused;
using test::refusal;

TEST(ConfigGroups, AGroupIsOnePositionWithMembers) {
  const ModelConfig m = moe8();
  for (const auto& ranges : {std::vector<std::string>{"0-3", "4-7"},
                             std::vector<std::string>{"0-1", "2-3", "4-6", "7"}}) {
    Config c = parse_config(plan(ranges), "/base");
    ASSERT_EQ(c.plan.stages.size(), 2u);
    // One micro-batch per position that computes at once, never per process.
    EXPECT_EQ(c.plan.inflight(), parallel_stages(c.plan, available_cores()));
    EXPECT_LE(c.plan.inflight(), 2);
    EXPECT_EQ(c.plan.processes(), int32_t(1 + ranges.size()));
    const StageCfg& g = c.plan.stages[1];
    EXPECT_TRUE(g.is_group());
    EXPECT_FALSE(c.plan.stages[0].is_group());
    EXPECT_EQ(g.experts_first, 0);
    ASSERT_EQ(g.members.size(), ranges.size() - 1);
    EXPECT_EQ(g.members.back().experts_last, 7);
    EXPECT_EQ(g.members.back().entry, int32_t(ranges.size()));
    EXPECT_EQ(g.members[0].first, 4);
    EXPECT_EQ(g.members[0].last, 7);
    EXPECT_NO_THROW(check_against_model(c, m));
  }
}

TEST(ConfigGroups, GapRefused) {
  expect_refused(refusal(plan({"0-2", "4-7"})), "stages[2].experts", "experts 3-3 are held by no");
}

TEST(ConfigGroups, OverlapRefused) {
  expect_refused(refusal(plan({"0-4", "4-7"})), "stages[2].experts", "overlaps");
}

TEST(ConfigGroups, UnsortedRefused) {
  expect_refused(refusal(plan({"0-3", "6-7", "4-5"})), "stages[3].experts", "comes before");
  expect_refused(refusal(plan({"4-7", "0-3"})), "stages[2].experts", "comes before");
  expect_refused(refusal(plan({"1-3", "4-7"})), "stages[1].experts", "starts at expert 0");
}

TEST(ConfigGroups, ShortOfTheModelsExpertsRefused) {
  const ModelConfig m = moe8();
  expect_refused(refusal(plan({"0-3", "4-6"}), &m), "stages[2].experts", "experts 7-7");
  expect_refused(refusal(plan({"0-3", "4-9"}), &m), "stages[2].experts", "goes past");
}

TEST(ConfigGroups, DenseModelRefused) {
  const ModelConfig m = moe8(0);
  expect_refused(refusal(plan({"0-3", "4-7"}), &m), "stages[1].experts", "has no experts");
}

TEST(ConfigGroups, LoneRangeRefused) {
  expect_refused(refusal(plan({"0-7"})), "stages[1].experts", "alone");
  // An entry with experts after a plain stage of other layers is alone too.
  std::string t = plan({"0-3", "4-7"});
  t += "[[stages]]\nlayers = \"8-9\"\nexperts = \"0-7\"\n";
  expect_refused(refusal(t), "stages[3].experts", "alone");
}

TEST(ConfigGroups, GpuMemberRefused) {
  std::string t = plan({"0-3"});
  t += "[[stages]]\nlayers = \"4-7\"\nexperts = \"4-7\"\ndevice = \"cuda:0\"\n";
  expect_refused(refusal(t), "stages[2].device", "cpu only");
}

TEST(ConfigGroups, TooManyProcessesRefused) {
  std::vector<std::string> nine;
  for (int i = 0; i < 9; ++i) nine.push_back(std::to_string(i));
  expect_refused(refusal(plan(nine)), "stages[1].experts", "at most 8");
  // Eight groups of two after stage 0: 17 processes.
  std::string t = "[model]\npath = \"m.gguf\"\n[[stages]]\nlayers = \"0\"\n";
  for (int g = 1; g <= 8; ++g)
    for (const char* r : {"0-3", "4-7"})
      t += "[[stages]]\nlayers = \"" + std::to_string(g) + "\"\nexperts = \"" + r + "\"\n";
  expect_refused(refusal(t), "stages:", "17 processes");
}

TEST(ConfigGroups, AutoLayersRefused) {
  std::string t = "[model]\npath = \"m.gguf\"\n";
  for (const char* r : {"0-3", "4-7"})
    t += "[[stages]]\nlayers = \"auto\"\nexperts = \"" + std::string(r) + "\"\n";
  t += "[[stages]]\nlayers = \"auto\"\n";
  expect_refused(refusal(t), "stages[0].experts", "auto");
}

TEST(ConfigGroups, BadRangeAndTypeRefused) {
  expect_refused(refusal(plan({"0-3", "7-4"})), "stages[2].experts", "ends before it starts");
  expect_refused(refusal(plan({"0-3", "x"})), "stages[2].experts", "not a layer range");
  std::string t =
      "[model]\npath = \"m.gguf\"\n[[stages]]\nlayers = \"0-3\"\n"
      "[[stages]]\nlayers = \"4-7\"\nexperts = 3\n";
  expect_refused(refusal(t), "stages[1].experts", "must be a string");
}

TEST(ConfigGroups, LaterPositionsNamedByTheirEntry) {
  std::string t = plan({"0-3", "4-7"});
  t += "[[stages]]\nlayers = \"9-10\"\n";  // entry 3 = position 2, a gap after 4-7
  expect_refused(refusal(t), "stages[3].layers", "layers 8-8");
}

}  // namespace
}  // namespace kvasir
