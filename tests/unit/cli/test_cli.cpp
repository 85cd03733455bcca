// The CLI's pure parts: endpoint resolution, SSE reading, error messages,
// and `kvasir top`'s per-interval view and bottleneck diagnosis.
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/layer_split.h"
#include "cli/diagnose.h"
#include "cli/http_client.h"
#include "cli/top.h"

using namespace kvasir::cli;
using nlohmann::json;

TEST(Endpoint, SocketOrder) {
  ::unsetenv("KVASIR_SOCKET");
  EXPECT_EQ(resolve_endpoint("", "").socket, "/run/kvasir/kvasir.sock");
  ::setenv("KVASIR_SOCKET", "/tmp/env.sock", 1);
  EXPECT_EQ(resolve_endpoint("", "").socket, "/tmp/env.sock");
  EXPECT_EQ(resolve_endpoint("/tmp/opt.sock", "").socket, "/tmp/opt.sock");
  ::unsetenv("KVASIR_SOCKET");
}

TEST(Endpoint, Url) {
  Endpoint e = resolve_endpoint("/tmp/x.sock", "http://127.0.0.1:8000/v1");
  EXPECT_TRUE(e.tcp);
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, 8000);
  EXPECT_THROW(resolve_endpoint("", "https://h:1"), std::runtime_error);
  EXPECT_THROW(resolve_endpoint("", "http://h"), std::runtime_error);
  EXPECT_THROW(resolve_endpoint("", "http://h:99999"), std::runtime_error);
}

TEST(ErrorMessage, OpenAiShapeOrRaw) {
  EXPECT_EQ(error_message(R"({"error":{"message":"n must be 1","param":"n"}})"), "n must be 1");
  EXPECT_EQ(error_message("plain"), "plain");
}

namespace {
json snapshot(double t, std::vector<double> busy, int64_t preempt = 0, int64_t free_blocks = 100) {
  json st = json::array();
  for (size_t i = 0; i < busy.size(); ++i)
    st.push_back({{"layers", i == 0 ? "0-14" : "15-29"},
                  {"device", "cpu"},
                  {"busy_s", busy[i] * t},
                  {"starved_s", (1 - busy[i]) * t},
                  {"blocked_s", 0},
                  {"batches", 10 * t},
                  {"tokens", 100 * t}});
  return {{"model", "m"},
          {"ready", true},
          {"uptime_s", t},
          {"inflight", 2},
          {"stages", st},
          {"engine",
           {{"running", 8},
            {"waiting", 0},
            {"blocks_total", 100},
            {"blocks_free", free_blocks},
            {"preemptions", preempt},
            {"tokens_generated", 50 * t},
            {"tokens_prompt", 0}}}};
}
}  // namespace

TEST(Top, SharesFromTwoSnapshots) {
  json a = snapshot(10, {0.5, 0.5}), b = snapshot(11, {0.5, 0.5});
  b["stages"][0]["busy_s"] = 5.0 + 0.9;     // 90% busy in the last second
  b["stages"][0]["starved_s"] = 5.0 + 0.1;  // (and so 10% starved)
  TopView v = make_view(b, &a, 1.0);
  ASSERT_EQ(v.stages.size(), 2u);
  EXPECT_NEAR(v.stages[0].busy, 0.9, 1e-9);
  EXPECT_NEAR(v.stages[1].busy, 0.5, 1e-9);
  EXPECT_NEAR(v.stages[0].batches_per_s, 10, 1e-9);
  EXPECT_NEAR(v.gen_tokens_per_s, 50, 1e-9);
  EXPECT_NE(render(v).find("15-29"), std::string::npos);
  EXPECT_EQ(render(v).find("sliding-window"), std::string::npos);
  // A sliding-window group: its pool on a line of its own.
  b["engine"]["blocks_swa_total"] = 78;
  b["engine"]["blocks_swa_free"] = 39;
  EXPECT_NE(render(make_view(b, &a, 1.0))
                .find("KV of the sliding-window layers: 39 / 78 blocks used (50%)\n"),
            std::string::npos);
}

// A ring across hosts (docs/multi-host.md): each link's traffic as rates
// over the interval, its Ping, its joins; the last error only when it does
// not serve. One host: no link line.
TEST(Top, LinksToWorkerHosts) {
  json a = snapshot(10, {0.5, 0.5}), b = snapshot(11, {0.5, 0.5});
  EXPECT_EQ(render(make_view(b, &a, 1.0)).find("link to"), std::string::npos);
  auto link = [](double sent, double received, const char* state) {
    return json::array({{{"host", "10.0.0.2:7710"},
                         {"stages", "1-1"},
                         {"state", state},
                         {"joins", 2},
                         {"bytes_sent", sent},
                         {"bytes_received", received},
                         {"rtt_ms", 0.25},
                         {"last_error", "link lost: Endpoint timeout"}}});
  };
  a["engine"]["links"] = link(1e6, 2e5, "serving");
  b["engine"]["links"] = link(4e6, 6e5, "serving");
  TopView v = make_view(b, &a, 2.0);
  ASSERT_EQ(v.links.size(), 1u);
  EXPECT_NEAR(v.links[0].sent_per_s, 1.5e6, 1e-6);
  EXPECT_NEAR(v.links[0].received_per_s, 2e5, 1e-6);
  EXPECT_NE(render(v).find("link to 10.0.0.2:7710 (stages 1-1): serving, 1.50 MB/s out, 0.20 MB/s "
                           "in, ping 0.25 ms, 2 joins\n"),
            std::string::npos)
      << render(v);
  // The plan names the stage's host: its row says "remote", not "down".
  b["plan"]["stages"] =
      json::array({{{"layers", "0-14"}}, {{"layers", "15-29"}, {"host", "10.0.0.2:7710"}}});
  const TopView r = make_view(b, &a, 2.0);
  EXPECT_EQ(r.stages[1].state, "remote");
  EXPECT_NE(r.stages[0].state, "remote");
  b["engine"]["links"] = link(4e6, 6e5, "lost");
  EXPECT_NE(render(make_view(b, &a, 2.0)).find("lost, "), std::string::npos);
  EXPECT_NE(render(make_view(b, &a, 2.0)).find("; link lost: Endpoint timeout\n"),
            std::string::npos);
}

// An expert group (docs/expert-groups.md): its members come after the
// stages with their position and index; the view keeps the positions in
// `stages` (what the diagnosis counts) and shows each member under its
// leader, "1.0" then "1.1", with its own busy / starved / blocked.
// An expert group's leader reports its processes' routed counts
// (experts.group): their shares over the interval and max / mean go on its
// experts line.
TEST(Top, GroupImbalanceOnTheExpertsLine) {
  json a = snapshot(10, {0.5, 0.5}), b = snapshot(11, {0.5, 0.5});
  auto experts = [](std::vector<uint64_t> routed, std::vector<uint64_t> group) {
    return json{{"n_experts", routed.size()},
                {"experts_per_slot", 1},
                {"routed", routed},
                {"group", {{"firsts", {0, 2}}, {"routed", group}}}};
  };
  a["stages"][1]["experts"] = experts({10, 10, 10, 10}, {20, 20});
  b["stages"][1]["experts"] = experts({16, 13, 11, 10}, {29, 21});  // interval: 9 | 1
  TopView v = make_view(b, &a, 1.0);
  const ExpertView& e = v.stages[1].experts;
  ASSERT_EQ(e.group_shares.size(), 2u);
  EXPECT_NEAR(e.group_shares[0], 0.9, 1e-12);
  EXPECT_NEAR(e.group_imbalance, 9.0 / 5.0, 1e-12);
  const std::string screen = render(v);
  EXPECT_NE(screen.find("; group imbalance 1.80 (max/mean), 1.0:90% 1.1:10%\n"), std::string::npos)
      << screen;
}

TEST(Top, GroupMembersUnderTheirLeader) {
  json a = snapshot(10, {0.5, 0.5}), b = snapshot(11, {0.5, 0.5});
  for (json* j : {&a, &b}) {
    json m = (*j)["stages"][1];
    m["position"] = 1;
    m["member"] = 1;
    (*j)["stages"].push_back(m);
  }
  b["stages"][2]["busy_s"] = 5.0 + 0.25;  // the member: 25% busy, 25% blocked
  b["stages"][2]["starved_s"] = 5.0 + 0.5;
  b["stages"][2]["blocked_s"] = 0.25;
  TopView v = make_view(b, &a, 1.0);
  ASSERT_EQ(v.stages.size(), 2u);
  ASSERT_EQ(v.members.size(), 1u);
  EXPECT_EQ(v.members[0].position, 1);
  EXPECT_NEAR(v.members[0].busy, 0.25, 1e-9);
  EXPECT_NEAR(v.members[0].blocked, 0.25, 1e-9);
  const std::string screen = render(v);
  const size_t leader = screen.find("\n1.0 "), member = screen.find("\n1.1 ");
  EXPECT_NE(leader, std::string::npos) << screen;
  EXPECT_NE(member, std::string::npos) << screen;
  EXPECT_LT(leader, member) << screen;
  EXPECT_NE(screen.find("\n0 "), std::string::npos) << screen;  // a plain stage: its index
}

// Each stage's ms per micro-batch over the interval and its share of the
// step (the slowest sets it), and the phase it is in now.
TEST(Top, StepSharesAndPhase) {
  json a = snapshot(10, {0.5, 0.8}), b = snapshot(11, {0.5, 0.8});
  b["stages"][1]["state"] = "busy";
  TopView v = make_view(b, &a, 1.0);
  EXPECT_NEAR(v.stages[0].ms_per_batch, 50, 1e-9);  // 0.5 s busy over 10 batches
  EXPECT_NEAR(v.stages[1].ms_per_batch, 80, 1e-9);
  EXPECT_NEAR(v.stages[0].step_share, 50.0 / 80, 1e-9);
  EXPECT_NEAR(v.stages[1].step_share, 1.0, 1e-9);
  EXPECT_EQ(v.stages[1].state, "busy");
  const std::string screen = render(v);
  EXPECT_NE(screen.find("step%"), std::string::npos);
  EXPECT_NE(screen.find("busy"), std::string::npos);
}

TEST(Top, SharesNeverSumPastTheInterval) {
  // Counters read a little after the clock: busy 0.7 s + starved 0.5 s in a
  // 1 s interval. Shown as-is that is 120%; the shares must partition 100%.
  json a = snapshot(10, {0.5, 0.5}), b = snapshot(11, {0.5, 0.5});
  b["stages"][0]["busy_s"] = 5.0 + 0.7;
  b["stages"][0]["starved_s"] = 5.0 + 0.5;
  TopView v = make_view(b, &a, 1.0);
  const StageView& s = v.stages[0];
  EXPECT_NEAR(s.busy + s.starved + s.blocked, 1.0, 1e-9);
  EXPECT_NEAR(s.busy / s.starved, 0.7 / 0.5, 1e-9);  // proportions kept
  EXPECT_NEAR(v.stages[1].busy, 0.5, 1e-9);          // a stage under 100% is untouched
}

TEST(Top, PrefixCacheHitRateOverTheInterval) {
  json a = snapshot(10, {0.5, 0.5}), b = snapshot(11, {0.5, 0.5});
  a["engine"]["prefix_cache"] = {{"enabled", true},
                                 {"queries", 1000},
                                 {"hits", 100},
                                 {"blocks_cached", 10},
                                 {"blocks_evictable", 4}};
  b["engine"]["prefix_cache"] = {{"enabled", true},
                                 {"queries", 2000},
                                 {"hits", 1000},
                                 {"blocks_cached", 64},
                                 {"blocks_evictable", 20}};
  TopView v = make_view(b, &a, 1.0);
  EXPECT_TRUE(v.prefix_caching);
  EXPECT_NEAR(v.prefix_hit_rate, 0.9, 1e-12);  // 900 of the last 1000 tokens looked up
  EXPECT_NEAR(make_view(b, nullptr, 1.0).prefix_hit_rate, 0.5, 1e-12);  // since start
  EXPECT_NE(render(v).find("prefix cache: hit rate 90.0%, 64 blocks cached (20 evictable)"),
            std::string::npos)
      << render(v);
  EXPECT_NE(render(make_view(b, &b, 1.0)).find("hit rate -,"), std::string::npos);  // no lookup
  EXPECT_EQ(render(make_view(snapshot(11, {0.5, 0.5}), nullptr, 1.0)).find("prefix cache"),
            std::string::npos);  // an older daemon, or caching off
  EXPECT_EQ(render(v).find("sliding-window layers: "), std::string::npos);  // no sliding group
  b["engine"]["blocks_swa_total"] = 40;  // a sliding-window group and its cache
  b["engine"]["blocks_swa_free"] = 30;
  b["engine"]["prefix_cache"]["blocks_swa_cached"] = 6;
  b["engine"]["prefix_cache"]["blocks_swa_evictable"] = 4;
  EXPECT_NE(render(make_view(b, &a, 1.0))
                .find("prefix cache, sliding-window layers: 6 blocks cached (4 evictable)\n"),
            std::string::npos)
      << render(make_view(b, &a, 1.0));
}

TEST(Top, SpeculativeCountersOverTheInterval) {
  json a = snapshot(10, {0.5, 0.5}), b = snapshot(11, {0.5, 0.5});
  a["engine"]["speculative"] = {
      {"method", "suffix"}, {"drafts", 10}, {"draft_tokens", 40}, {"accepted_tokens", 20}};
  b["engine"]["speculative"] = {
      {"method", "suffix"}, {"drafts", 110}, {"draft_tokens", 440}, {"accepted_tokens", 170}};
  const TopView v = make_view(b, &a, 1.0);
  EXPECT_EQ(v.spec_method, "suffix");
  EXPECT_EQ(v.spec_drafts, 100);
  EXPECT_EQ(v.spec_draft_tokens, 400);
  EXPECT_EQ(v.spec_accepted, 150);
  EXPECT_NE(render(v).find("speculative (suffix): 150 of 400 draft tokens accepted (37.5%), "
                           "mean accepted length 2.50"),
            std::string::npos)
      << render(v);
  EXPECT_NE(render(make_view(b, &b, 1.0)).find("accepted (-), mean accepted length -"),
            std::string::npos);  // nothing drafted in the interval
  b["engine"]["speculative"]["method"] = "none";
  EXPECT_EQ(render(make_view(b, &a, 1.0)).find("speculative"), std::string::npos);
  EXPECT_EQ(render(make_view(snapshot(11, {0.5, 0.5}), nullptr, 1.0)).find("speculative"),
            std::string::npos);  // an older daemon
}

// The diagnosis names the cause and the one setting to turn (cli/diagnose.h).
// A MoE stage's expert load over the interval: the differences of the
// cumulative counters, the imbalance (max / mean over every expert, idle
// ones included), the three hottest with their share; one line per MoE
// stage, none for a dense one.
TEST(Top, ExpertLoadOverTheInterval) {
  json a = snapshot(10, {0.5, 0.5}), b = snapshot(11, {0.5, 0.5});
  auto experts = [](std::vector<uint64_t> routed) {
    return json{{"n_experts", routed.size()}, {"experts_per_slot", 1}, {"routed", routed}};
  };
  a["stages"][0]["experts"] = experts({100, 100, 100, 100, 100, 100, 100, 100});
  // Since: 10 4 1 7 0 0 2 0 → 24 routed, mean 3, max 10.
  b["stages"][0]["experts"] = experts({110, 104, 101, 107, 100, 100, 102, 100});
  TopView v = make_view(b, &a, 1.0);
  const ExpertView& e = v.stages[0].experts;
  EXPECT_EQ(e.n_experts, 8);
  EXPECT_EQ(e.routed, 24u);
  EXPECT_NEAR(e.imbalance, 10.0 / 3.0, 1e-12);
  ASSERT_EQ(e.hottest.size(), 3u);
  EXPECT_EQ(e.hottest[0].first, "0");
  EXPECT_EQ(e.hottest[1].first, "3");
  EXPECT_EQ(e.hottest[2].first, "1");
  EXPECT_NEAR(e.hottest[0].second, 10.0 / 24, 1e-12);
  EXPECT_EQ(v.stages[1].experts.n_experts, 0);  // dense
  const std::string screen = render(v);
  EXPECT_NE(screen.find("0      experts: imbalance 3.33 (max/mean), hottest 0:42% 3:29% 1:17%\n"),
            std::string::npos)
      << screen;
  EXPECT_EQ(screen.find("1      experts"), std::string::npos);
  // The first snapshot: since start (even, 1.00); an idle interval says so.
  EXPECT_NEAR(make_view(a, nullptr, 1.0).stages[0].experts.imbalance, 1.0, 1e-12);
  EXPECT_NE(render(make_view(b, &b, 1.0)).find("experts: 8 experts, none routed in the interval"),
            std::string::npos);
  // Folded counters (more than 256 experts) are named by their range.
  json f = snapshot(11, {0.5});
  f["stages"][0]["experts"] = {{"n_experts", 6}, {"experts_per_slot", 2}, {"routed", {1, 6, 1}}};
  const ExpertView fe = make_view(f, nullptr, 1.0).stages[0].experts;
  ASSERT_FALSE(fe.hottest.empty());
  EXPECT_EQ(fe.hottest[0].first, "2-3");
  EXPECT_NEAR(fe.imbalance, 6.0 / (8.0 / 3.0), 1e-12);
}

TEST(Diagnose, NamesTheCauseAndTheKnob) {
  auto diag = [](json now, json prev) { return diagnose_view(make_view(now, &prev, 1.0)); };
  auto is = [](const Diagnosis& d, const char* cause, const char* knob) {
    return d.cause == cause && d.knob == knob;
  };
  Diagnosis d = diag(snapshot(11, {0.95, 0.4}), snapshot(10, {0.95, 0.4}));
  EXPECT_TRUE(is(d, "batching", "stages.layers")) << d.summary;
  EXPECT_NE(d.change.find("0-4 | 5-29"), std::string::npos) << d.change;
  d = diag(snapshot(11, {0.5, 0.5}), snapshot(10, {0.5, 0.5}));
  EXPECT_TRUE(is(d, "batching", "plan.max_inflight") == false) << d.summary;  // inflight 2
  EXPECT_EQ(d.cause, "batching") << d.summary;                                // light load
  d = diag(snapshot(11, {0.95, 0.95}, 3), snapshot(10, {0.95, 0.95}, 1));
  EXPECT_TRUE(is(d, "kv_capacity", "kv.memory")) << d.summary;
  d = diag(snapshot(11, {0.95, 0.93}), snapshot(10, {0.95, 0.93}));
  EXPECT_EQ(d.cause, "none") << d.summary;
  EXPECT_NE(diagnose(make_view(snapshot(11, {0.95, 0.93}), nullptr, 1)).find("saturated"),
            std::string::npos);
  json idle = snapshot(11, {0.5, 0.5});
  idle["engine"]["running"] = 0;
  EXPECT_EQ(diag(idle, snapshot(10, {0.5, 0.5})).cause, "idle");
  json loading = snapshot(1, {0, 0});
  loading["ready"] = false;
  EXPECT_NE(diagnose(make_view(loading, nullptr, 1)).find("loading"), std::string::npos);
}

// A lopsided split (4 | 26 layers) whose stages' cost models put most of a
// micro-batch's cost in the fixed term (weights read per step, as a CPU
// with fast matmuls shows: docs/scheduler.md): still "batching", the layers
// to move named. With the
// fixed term kept out of the layers, the model predicted under 1.1x.
TEST(Diagnose, LopsidedSplitWhenTheFixedCostDominates) {
  auto lopsided = [](double t) {
    json j = snapshot(t, {0.10, 0.99});
    j["stages"][0]["layers"] = "0-3";
    j["stages"][1]["layers"] = "4-29";
    for (int i : {0, 1}) {
      const double ms = i == 0 ? 4.0 : 41.2;  // per micro-batch, 24 a second
      j["stages"][i]["batches"] = 24 * t;
      j["stages"][i]["busy_s"] = ms * 1e-3 * 24 * t;
      j["stages"][i]["starved_s"] = t - ms * 1e-3 * 24 * t;
    }
    j["stages"][0]["cost"] = {{"fixed_ms", 1.0}, {"per_token_ms", 0.02}, {"per_sample_ms", 0}};
    j["stages"][1]["cost"] = {{"fixed_ms", 35.0}, {"per_token_ms", 0.2}, {"per_sample_ms", 0.3}};
    j["engine"]["timing"] = {{"mean_tokens", 24.0}, {"mean_rows", 12.0}, {"cost_ready", true}};
    return j;
  };
  const json before = lopsided(10);
  const Diagnosis d = diagnose_view(make_view(lopsided(11), &before, 1.0));
  EXPECT_EQ(d.cause, "batching") << d.summary;
  EXPECT_EQ(d.knob, "stages.layers") << d.summary;
}

// The even split of the default model under bench/policies/inflight.py's
// load, as the stages' cost models had it on an AVX2-only CPU
// (docs/measurements/2026-12-02.md): the
// tail 1.12x the first stage per micro-batch of 40 tokens and 12 sampled
// rows. Not balanced: moving one layer to the first stage makes the step
// ~1.05x faster, and the diagnosis names that split.
TEST(Diagnose, ATailOneLayerTooHeavyIsNotBalanced) {
  auto even = [](double t) {
    json j = snapshot(t, {0.5, 0.5});
    const double ms[2] = {85.4, 95.8};
    for (int i : {0, 1}) {
      j["stages"][i]["busy_s"] = ms[i] * 1e-3 * 10 * t;
      j["stages"][i]["starved_s"] = t - ms[i] * 1e-3 * 10 * t;
    }
    j["stages"][0]["cost"] = {{"fixed_ms", 1.9}, {"per_token_ms", 2.07}, {"per_sample_ms", 0.19}};
    j["stages"][1]["cost"] = {{"fixed_ms", 2.8}, {"per_token_ms", 1.97}, {"per_sample_ms", 1.06}};
    j["engine"]["timing"] = {{"mean_tokens", 40.0}, {"mean_rows", 12.0}, {"cost_ready", true}};
    return j;
  };
  const json before = even(10);
  const Diagnosis d = diagnose_view(make_view(even(11), &before, 1.0));
  EXPECT_EQ(d.cause, "batching") << d.summary;
  EXPECT_EQ(d.knob, "stages.layers") << d.summary;
  EXPECT_NE(d.change.find("0-15 | 16-29"), std::string::npos) << d.change;
  // Within 10% of each other the stages are balanced, whatever the model.
  json close = even(11), close_before = even(10);
  for (json* j : {&close, &close_before}) {
    const double t = (*j)["uptime_s"];
    (*j)["stages"][0]["busy_s"] = 0.0880 * 10 * t;
    (*j)["stages"][0]["starved_s"] = t - 0.0880 * 10 * t;
  }
  EXPECT_EQ(diagnose_view(make_view(close, &close_before, 1.0)).cause, "none");
}

// Stage 1 busy through the interval with no batch back (one step longer
// than the interval), stage 0 starved behind it: no split or saturation
// verdict from a frame that cannot show the step (a CI screen of a cold
// start read "saturated and balanced").
TEST(Diagnose, ALongStepGetsNoVerdictUntilItEnds) {
  json a = snapshot(10, {0.2, 0.5}), b = snapshot(11, {0.2, 0.5});
  b["stages"][1]["busy_s"] = 5.0 + 0.999;
  b["stages"][1]["starved_s"] = 5.0 + 0.001;
  b["stages"][1]["batches"] = a["stages"][1]["batches"];
  b["stages"][1]["tokens"] = a["stages"][1]["tokens"];
  const Diagnosis d = diagnose_view(make_view(b, &a, 1.0));
  EXPECT_EQ(d.cause, "none") << d.summary;
  EXPECT_EQ(d.summary.rfind("one long step: stage 1", 0), 0u) << d.summary;
  // Once it has ended (a batch back), the frame gets a verdict again.
  b["stages"][1]["batches"] = a["stages"][1]["batches"].get<double>() + 1;
  EXPECT_EQ(diagnose_view(make_view(b, &a, 1.0)).summary.find("one long step"), std::string::npos);
}

TEST(Diagnose, OneMicroBatchForTwoStages) {
  json a = snapshot(10, {0.45, 0.5}), b = snapshot(11, {0.45, 0.5});
  a["inflight"] = b["inflight"] = 1;
  const Diagnosis d = diagnose_view(make_view(b, &a, 1.0));
  EXPECT_EQ(d.cause, "batching");
  EXPECT_EQ(d.knob, "plan.max_inflight");
  EXPECT_NE(d.change.find("plan.max_inflight = 2"), std::string::npos) << d.change;
}

TEST(Diagnose, PrefillInterferenceAndWhatATargetExcuses) {
  auto timed = [](double t, double steps) {
    json j = snapshot(t, {0.95, 0.95});
    j["plan"] = {{"policy", "continuous+chunked"}, {"itl_target_ms", 0}, {"max_rows", 32}};
    j["engine"]["timing"] = {{"batches", 10 * t},      {"prefill_batches", 2 * t},
                             {"decode_rows", 80 * t},  {"decode_rows_with_prefill", 16 * t},
                             {"step_ms_decode", 30.0}, {"step_ms_prefill", steps},
                             {"itl_target_ms", 0.0}};
    return j;
  };
  json a = timed(10, 2000), b = timed(11, 2000);
  Diagnosis d = diagnose_view(make_view(b, &a, 1.0));
  EXPECT_EQ(d.cause, "prefill_interference") << d.summary;
  EXPECT_EQ(d.knob, "scheduler.itl_target_ms");
  EXPECT_NE(d.change.find("= 180"), std::string::npos) << d.change;  // 3 x 2 steps x 30 ms
  // The same steps under a target they keep (target / depth = 1,500 ms): no spike.
  b["engine"]["timing"]["itl_target_ms"] = 3000.0;
  EXPECT_NE(diagnose_view(make_view(b, &a, 1.0)).cause, "prefill_interference");
  // Whole prefills: the token budget is the knob.
  b["engine"]["timing"]["itl_target_ms"] = 0.0;
  b["plan"]["policy"] = "continuous";
  EXPECT_EQ(diagnose_view(make_view(b, &a, 1.0)).knob, "plan.max_tokens");
}

TEST(LayerSplit, BalancesMeasuredCosts) {
  using namespace kvasir;
  // 30 equal layers; the tail's output head costs 6 layers: 18 | 12 beats 15 | 15.
  SplitCosts c;
  c.layer.assign(30, 1.0);
  c.tail = 6;
  auto s = balanced_split(c, 2);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], (std::pair<int, int>{0, 17}));
  EXPECT_EQ(s[1], (std::pair<int, int>{18, 29}));
  EXPECT_DOUBLE_EQ(split_step(c, s), 18);
  EXPECT_DOUBLE_EQ(split_step(c, {{0, 14}, {15, 29}}), 21);
  auto three = balanced_split(c, 3);
  EXPECT_DOUBLE_EQ(split_step(c, three), 12);
  EXPECT_TRUE(balanced_split(c, 31).empty());
  // From the stages' own times: 15 layers at 1 ms each, the tail 6 ms more.
  SplitCosts m = costs_from_stages({{0, 14}, {15, 29}}, {15.0, 21.0});
  ASSERT_EQ(m.layer.size(), 30u);
  EXPECT_DOUBLE_EQ(m.layer[0], 1.0);
  EXPECT_DOUBLE_EQ(m.tail, 6.0);
  EXPECT_DOUBLE_EQ(m.head, 0.0);
  EXPECT_EQ(balanced_split(m, 2), s);
}

namespace {

// Snapshots whose stages carry their run-queue wait (cpu_wait_s) and
// preemptions, as the CLI adds them from /proc (cli/stage_procs.h).
json waited(double t, double wait0, double wait1, std::vector<double> busy = {0.95, 0.93}) {
  json j = snapshot(t, std::move(busy));
  j["stages"][0]["cpu_wait_s"] = wait0 * t;
  j["stages"][1]["cpu_wait_s"] = wait1 * t;
  j["stages"][0]["cpu_s"] = j["stages"][1]["cpu_s"] = 0.9 * t;
  j["stages"][0]["preemptions"] = j["stages"][1]["preemptions"] = 50 * t;
  return j;
}

}  // namespace

TEST(Diagnose, ADescheduledStageIsNamedWithItsWait) {
  const json before = waited(10, 0.05, 0.3);
  const TopView v = make_view(waited(12, 0.05, 0.3), &before, 2.0);
  ASSERT_EQ(v.stages.size(), 2u);
  EXPECT_NEAR(v.stages[0].cpu_wait, 0.05, 1e-9);
  EXPECT_NEAR(v.stages[1].cpu_wait, 0.3, 1e-9);
  EXPECT_NEAR(v.stages[1].preemptions_per_s, 50, 1e-9);
  const Diagnosis d = diagnose_view(v);
  EXPECT_EQ(d.cause, "descheduled") << d.summary;
  EXPECT_EQ(d.knob, "stages.cpus");
  EXPECT_EQ(d.summary.rfind("descheduled: stage 1 waited for a CPU 30%", 0), 0u) << d.summary;
  ASSERT_EQ(d.figures.size(), 2u);
  EXPECT_NE(d.figures[1].find("preempted 50 times/s"), std::string::npos) << d.figures[1];
  EXPECT_NE(d.change.find("[[stages]] cpus"), std::string::npos) << d.change;
}

TEST(Diagnose, ALittleWaitOrNoFigureIsNoFinding) {
  // Under the threshold: the ring's own verdict stands.
  const json little = waited(10, 0.05, 0.09), much = waited(10, 0.5, 0.5);
  EXPECT_EQ(diagnose_view(make_view(waited(11, 0.05, 0.09), &little, 1.0)).cause, "none");
  // Snapshots without the figures (over TCP: no cpu_wait_s): no finding.
  const TopView v = make_view(snapshot(11, {0.95, 0.93}), &much, 1.0);
  EXPECT_EQ(v.stages[0].cpu_wait, -1);
  EXPECT_EQ(diagnose_view(v).cause, "none");
  // A rule about the ring's settings comes first: its figures are qualified,
  // not replaced (one micro-batch for two stages).
  json a = waited(10, 0.4, 0.4, {0.45, 0.5}), b = waited(11, 0.4, 0.4, {0.45, 0.5});
  a["inflight"] = b["inflight"] = 1;
  EXPECT_EQ(diagnose_view(make_view(b, &a, 1.0)).knob, "plan.max_inflight");
}
