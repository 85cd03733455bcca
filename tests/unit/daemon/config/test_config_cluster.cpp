// Multi-host plans (config.h validate_cluster, docs/multi-host.md): the
// syntax read, one test per refusal, each naming its key and why, and GPU
// stages beside the cut accepted.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/check.h"
#include "daemon/config/config.h"
#include "tests/unit/daemon/config/refusal.h"

namespace kvasir {
namespace {

// Three stages over layers 0-8; hosts[i] on stage i ("" = local), the
// cluster table and anything else appended.
std::string plan(const std::vector<std::string>& hosts,
                 const std::string& extra = "[cluster]\nkey = \"cluster.key\"\n") {
  std::string t = "[model]\npath = \"m.gguf\"\n";
  for (size_t i = 0; i < hosts.size(); ++i) {
    t += "[[stages]]\nlayers = \"" + std::to_string(3 * i) + "-" + std::to_string(3 * i + 2) +
         "\"\nthreads = 1\n";
    if (!hosts[i].empty()) t += "host = \"" + hosts[i] + "\"\n";
  }
  return t + extra;
}

using test::expect_refused;
using test::refusal;

TEST(ConfigCluster, ASuffixOnOneWorkerIsRead) {
  const Config c = parse_config(plan({"", "10.0.0.2:7710", "10.0.0.2:7710"},
                                     "[cluster]\nkey = \"cluster.key\"\njoin_timeout = 20\n"),
                                "/base");
  EXPECT_EQ(c.plan.first_remote(), 1);
  EXPECT_EQ(c.plan.stages[2].host, "10.0.0.2:7710");
  EXPECT_EQ(c.cluster.key, "/base/cluster.key");  // relative to the config's folder
  EXPECT_DOUBLE_EQ(c.cluster.join_timeout_s, 20);
  // The worker's tail serves structured outputs: the leader's relay sends
  // it the grammar table's entries (relay/relay.h).
  EXPECT_TRUE(c.grammar.enabled);
}

// The ring leaves the leader and comes back, or visits two workers: each
// run of consecutive stages on one host is one worker session.
TEST(ConfigCluster, RunsOfStagesOnWorkersAreRead) {
  Config c = parse_config(plan({"", "10.0.0.2:7710", ""}), "/base");
  auto runs = c.plan.remote_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].first, 1);
  EXPECT_EQ(runs[0].end, 2);
  EXPECT_EQ(runs[0].host, "10.0.0.2:7710");
  c = parse_config(plan({"", "10.0.0.2:7710", "10.0.0.3:7710", "10.0.0.3:7710", ""}), "/base");
  runs = c.plan.remote_runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].end, 2);
  EXPECT_EQ(runs[1].first, 2);
  EXPECT_EQ(runs[1].end, 4);
  EXPECT_EQ(runs[1].host, "10.0.0.3:7710");
  c = parse_config(plan({"", "w:1", "", "v:1"}), "/base");
  EXPECT_EQ(c.plan.remote_runs().size(), 2u);
}

TEST(ConfigCluster, AllLocalNeedsNoKey) {
  const Config c = parse_config(plan({"", "", ""}, ""), "/base");
  EXPECT_EQ(c.plan.first_remote(), -1);
  EXPECT_TRUE(c.cluster.key.empty());
}

TEST(ConfigCluster, Refusals) {
  expect_refused(refusal(plan({"10.0.0.2:7710", "10.0.0.2:7710", "10.0.0.2:7710"})),
                 "stages[0].host", "the head stage runs on the leader");
  expect_refused(refusal(plan({"", "10.0.0.2:7710", "", "10.0.0.2:7710"})), "stages[3].host",
                 "already runs stages[1]..stages[1]");
  expect_refused(refusal(plan({"", "w:1", "v:1", "w:1"})), "stages[3].host",
                 "each run names a host of its own");
  expect_refused(refusal(plan({"", "worker-1", "worker-1"})), "stages[1].host",
                 "is not \"ADDR:PORT\"");
  expect_refused(refusal(plan({"", "w:99999", "w:99999"})), "stages[1].host", "ADDR:PORT");
  expect_refused(refusal(plan({"", "w:7710", "w:7710"}, "")), "cluster.key",
                 "required when a stage names a host");
  expect_refused(refusal(plan({"", "w:7710", "w:7710"}, "[cluster]\nkee = \"k\"\n")), "kee", "");
}

// plan() with devices[i] on stage i.
std::string with_devices(std::string t, const std::vector<std::string>& devices) {
  size_t at = 0;
  for (const std::string& d : devices) {
    at = t.find("threads = 1\n", at) + 12;
    t.insert(at, "device = \"" + d + "\"\n");
  }
  return t;
}

// The cut is a host-memory link on both hosts whatever the devices beside
// it (ipc/link_kind.h): GPU stages on either side, or both, are accepted,
// and each host's cuda:0 is its own GPU.
TEST(ConfigCluster, GpuStagesBesideTheCutAreAccepted) {
  const std::vector<std::string> hosts = {"", "w:7710", "w:7710"};
  for (const auto& devices : std::vector<std::vector<std::string>>{{"cuda:0", "cpu", "cpu"},
                                                                   {"cpu", "cuda:0", "cpu"},
                                                                   {"cuda:0", "cuda:0", "cuda:1"},
                                                                   {"cpu", "cuda:0", "cuda:1"}})
    EXPECT_EQ(refusal(with_devices(plan(hosts), devices)), "(accepted)")
        << devices[0] << " " << devices[1] << " " << devices[2];
  // One stage per GPU still holds on each host.
  expect_refused(refusal(with_devices(plan(hosts), {"cuda:0", "cuda:1", "cuda:1"})),
                 "stages[2].device", "cuda:1 is already used by another stage on w:7710");
  expect_refused(refusal(with_devices(plan({"", "", "w:7710"}), {"cuda:0", "cuda:0", "cpu"})),
                 "stages[1].device", "cuda:0 is already used by another stage (one stage per GPU)");
}

// Stage 0 over layers 0-2 here, then an expert group of two over layers
// 3-5: its leader on `lead`, its member on `member` ("" = local).
std::string group_plan(const std::string& lead, const std::string& member) {
  std::string t = "[model]\npath = \"m.gguf\"\n[[stages]]\nlayers = \"0-2\"\n";
  for (const auto& [experts, host] : {std::pair{"0-3", lead}, std::pair{"4-7", member}}) {
    t += fmt::format("[[stages]]\nlayers = \"3-5\"\nexperts = \"{}\"\n", experts);
    if (!host.empty()) t += "host = \"" + host + "\"\n";
  }
  return t + "[cluster]\nkey = \"cluster.key\"\n";
}

// A group whose processes all run on the worker: the worker spawns its
// member beside its leader (daemon/worker/worker.h).
TEST(ConfigCluster, AGroupOnTheWorkerIsRead) {
  const Config c = parse_config(group_plan("10.0.0.2:7710", "10.0.0.2:7710"), "/base");
  ASSERT_EQ(c.plan.stages.size(), 2u);
  EXPECT_EQ(c.plan.first_remote(), 1);
  ASSERT_EQ(c.plan.stages[1].members.size(), 1u);
  EXPECT_EQ(c.plan.stages[1].members[0].host, "10.0.0.2:7710");
  EXPECT_EQ(c.plan.processes(), 3);
  // A group on the leader's side of the cut, before a remote stage, too.
  std::string before = group_plan("", "");
  before.replace(before.find("[cluster]"), 0, "[[stages]]\nlayers = \"6-8\"\nhost = \"w:7710\"\n");
  EXPECT_EQ(refusal(before), "(accepted)");
}

// A group split across the cut (or across workers): refused, naming the
// member's entry.
TEST(ConfigCluster, AGroupSplitAcrossTheCutIsRefused) {
  expect_refused(refusal(group_plan("10.0.0.2:7710", "")), "stages[2].host",
                 "every entry of the group names the same host");
  expect_refused(refusal(group_plan("", "10.0.0.2:7710")), "stages[2].host",
                 "its group's leader stages[1] has host = \"\"");
  expect_refused(refusal(group_plan("10.0.0.2:7710", "10.0.0.3:7710")), "stages[2].host",
                 "every entry of the group names the same host");
}

}  // namespace
}  // namespace kvasir
