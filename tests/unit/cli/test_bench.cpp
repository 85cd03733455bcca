// kvasir bench's pure parts: the trace reader (untrusted input), the
// workload (Poisson arrivals, prompt-length cycling), percentiles and the
// summary's arithmetic. The run against a real daemon is
// tests/integration/test_bench_cli.sh.
#include <gtest/gtest.h>

#include <sstream>

#include "cli/bench.h"

using namespace kvasir::cli;
using nlohmann::json;

TEST(BenchTrace, ReadsPromptsLengthsAndDefaults) {
  std::istringstream in(
      "# comment\n"
      "{\"t\": 0, \"prompt_len\": 16}\n"
      "\n"
      "{\"t\": 0.5, \"prompt\": \"hello\", \"max_tokens\": 4}\n");
  auto w = parse_trace(in, 32);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].prompt_len, 16);
  EXPECT_EQ(w[0].max_tokens, 32);
  EXPECT_EQ(w[1].prompt, "hello");
  EXPECT_EQ(w[1].max_tokens, 4);
  EXPECT_DOUBLE_EQ(w[1].arrival_s, 0.5);
}

TEST(BenchTrace, RefusesBadLinesNamingThem) {
  auto err = [](const std::string& text) {
    std::istringstream in(text);
    try {
      parse_trace(in, 8);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(err("{\"t\":0,\"prompt_len\":4}\nnot json\n").find("line 2"), std::string::npos);
  EXPECT_NE(err("{\"prompt_len\":4}").find("t (arrival"), std::string::npos);
  EXPECT_NE(err("{\"t\":-1,\"prompt_len\":4}").find("between"), std::string::npos);
  EXPECT_NE(err("{\"t\":1,\"prompt_len\":4}\n{\"t\":0.5,\"prompt_len\":4}").find("decrease"),
            std::string::npos);
  EXPECT_NE(err("{\"t\":0,\"prompt_len\":0}").find("prompt_len"), std::string::npos);
  EXPECT_NE(err("{\"t\":0,\"prompt_len\":99999999999}").find("prompt_len"), std::string::npos);
  EXPECT_NE(err("{\"t\":0,\"prompt_len\":1.5}").find("integer"), std::string::npos);
  EXPECT_NE(err("{\"t\":0,\"prompt\":\"\"}").find("non-empty"), std::string::npos);
  EXPECT_NE(err("{\"t\":0,\"prompt\":\"x\",\"prompt_len\":3}").find("not both"), std::string::npos);
  EXPECT_NE(err("{\"t\":0,\"prompt_len\":3,\"max_tokens\":0}").find("max_tokens"),
            std::string::npos);
  EXPECT_NE(err("{\"t\":0}").find("required"), std::string::npos);
  EXPECT_NE(err("# only a comment\n").find("no requests"), std::string::npos);
}

TEST(BenchTrace, PrefixGroupsChatTurnsAndChoices) {
  std::istringstream in(
      "{\"t\": 0, \"prompt_len\": 32, \"prefix_group\": 1, \"prefix_len\": 1024, \"n\": 4}\n"
      "{\"t\": 0, \"conversation\": 3, \"prompt_len\": 64}\n"
      "{\"t\": 0, \"conversation\": 3, \"prompt\": \"and then?\"}\n");
  auto w = parse_trace(in, 8);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].prefix_group, 1);
  EXPECT_EQ(w[0].prefix_len, 1024);
  EXPECT_EQ(w[0].prompt_len, 32);
  EXPECT_EQ(w[0].n, 4);
  EXPECT_EQ(w[0].conversation, -1);
  EXPECT_EQ(w[1].conversation, 3);
  EXPECT_EQ(w[1].prefix_group, -1);
  EXPECT_EQ(w[2].prompt, "and then?");
  auto err = [](const std::string& text) {
    std::istringstream bad(text);
    try {
      parse_trace(bad, 8);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(err("{\"t\":0,\"prompt_len\":4,\"prefix_group\":0}").find("together"),
            std::string::npos);
  EXPECT_NE(err("{\"t\":0,\"prompt_len\":4,\"prefix_len\":9}").find("together"), std::string::npos);
  EXPECT_NE(
      err("{\"t\":0,\"prompt\":\"x\",\"prefix_group\":0,\"prefix_len\":9}").find("prompt_len"),
      std::string::npos);
  EXPECT_NE(err("{\"t\":0,\"prompt_len\":4,\"n\":17}").find("n must be"), std::string::npos);
  std::istringstream alone("{\"t\":0,\"prompt_len\":0,\"prefix_group\":0,\"prefix_len\":512}");
  EXPECT_EQ(parse_trace(alone, 8)[0].prompt_len, 0);  // the shared prefix alone
  EXPECT_NE(err("{\"t\":0,\"prompt_len\":4,\"conversation\":-1}").find("conversation"),
            std::string::npos);
}

TEST(BenchWorkload, SharedPrefixGroupsAndChats) {
  BenchOptions o;
  o.requests = 6;
  o.prompt_lens = {32};
  o.shared_prefix_len = 1024;
  o.prefix_groups = 2;
  o.n = 4;
  auto w = make_workload(o, nullptr);
  ASSERT_EQ(w.size(), 6u);
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(w[i].prefix_group, int32_t(i % 2));
    EXPECT_EQ(w[i].prefix_len, 1024);
    EXPECT_EQ(w[i].prompt_len, 32);
    EXPECT_EQ(w[i].n, 4);
  }
  // 3 chats of 2 turns, turn-major; the system prompt on first turns only.
  BenchOptions c;
  c.prompt_lens = {64};
  c.conversations = 3;
  c.turns = 2;
  c.shared_prefix_len = 100;
  auto chats = make_workload(c, nullptr);
  ASSERT_EQ(chats.size(), 6u);
  for (size_t i = 0; i < chats.size(); ++i) {
    EXPECT_EQ(chats[i].conversation, int32_t(i % 3));
    EXPECT_EQ(chats[i].prompt_len, 64);
    EXPECT_EQ(chats[i].prefix_len, i < 3 ? 100 : 0);
  }
  c.turns = 0;
  EXPECT_THROW(make_workload(c, nullptr), std::runtime_error);
}

TEST(BenchStats, PrefixCacheFigures) {
  std::vector<RequestResult> rs(2);
  for (auto& r : rs) {
    r.ok = true;
    r.prompt_tokens = 1056;
    r.completion_tokens = 32;
    r.shared_tokens = 1024;
  }
  rs[1].cached_tokens = 1024;
  StatsSample before, after;
  before.prefix_queries = 100;
  before.prefix_hits = 0;
  after.prefix_queries = 100 + 2112;
  after.prefix_hits = 1024;
  json s = summarize(rs, 1.0, before, after, {}, BenchOptions{});
  EXPECT_NEAR(s["prefix_hit_rate"].get<double>(), 1024.0 / 2112, 1e-12);
  EXPECT_EQ(s["cached_tokens"], 1024);
  EXPECT_NEAR(s["cached_fraction"].get<double>(), 1024.0 / 2112, 1e-12);
  EXPECT_EQ(s["shared_prefix_tokens"], 2048);
  EXPECT_NEAR(s["shared_hit_rate"].get<double>(), 0.5, 1e-12);
  EXPECT_NE(render_summary(s).find("shared prefix hit    50.0%"), std::string::npos)
      << render_summary(s);
  json none = summarize({}, 1.0, StatsSample{}, StatsSample{}, {}, BenchOptions{});
  EXPECT_TRUE(none["prefix_hit_rate"].is_null());
  EXPECT_TRUE(none["shared_hit_rate"].is_null());
}

TEST(BenchStats, SpeculativeFiguresAreTheRunsDeltas) {
  json stats = {
      {"engine",
       {{"speculative",
         {{"method", "ngram"}, {"drafts", 50}, {"draft_tokens", 200}, {"accepted_tokens", 120}}}}}};
  const StatsSample before = parse_stats(stats);
  EXPECT_EQ(before.spec_method, "ngram");
  EXPECT_EQ(before.spec_accepted, 120);
  stats["engine"]["speculative"] = {
      {"method", "ngram"}, {"drafts", 150}, {"draft_tokens", 600}, {"accepted_tokens", 270}};
  const StatsSample after = parse_stats(stats);
  const json s = summarize({}, 1.0, before, after, {}, BenchOptions{});
  const json& sp = s["speculative"];
  EXPECT_EQ(sp["method"], "ngram");
  EXPECT_EQ(sp["drafts"], 100);
  EXPECT_EQ(sp["draft_tokens"], 400);
  EXPECT_EQ(sp["accepted_tokens"], 150);
  EXPECT_NEAR(sp["acceptance_rate"].get<double>(), 0.375, 1e-12);
  EXPECT_NEAR(sp["mean_accepted_length"].get<double>(), 2.5, 1e-12);
  EXPECT_NE(render_summary(s).find("speculative          ngram: 150/400 accepted (37.5%), "
                                   "mean length 2.50"),
            std::string::npos)
      << render_summary(s);
  // Nothing drafted over the run: the ratios are null; an older daemon
  // (no engine.speculative): null altogether.
  const json idle = summarize({}, 1.0, after, after, {}, BenchOptions{});
  EXPECT_TRUE(idle["speculative"]["acceptance_rate"].is_null());
  EXPECT_TRUE(idle["speculative"]["mean_accepted_length"].is_null());
  EXPECT_TRUE(summarize({}, 1.0, StatsSample{}, StatsSample{}, {}, BenchOptions{})["speculative"]
                  .is_null());
}

TEST(BenchWorkload, CyclesLengthsAndSeedsPoissonArrivals) {
  BenchOptions o;
  o.requests = 2000;
  o.prompt_lens = {16, 40};
  o.max_tokens = 8;
  auto closed = make_workload(o, nullptr);
  ASSERT_EQ(closed.size(), 2000u);
  EXPECT_EQ(closed[0].prompt_len, 16);
  EXPECT_EQ(closed[1].prompt_len, 40);
  EXPECT_EQ(closed[2].prompt_len, 16);
  EXPECT_EQ(closed[1999].arrival_s, 0.0);  // no rate: all at once

  o.rate = 10;
  o.seed = 7;
  auto a = make_workload(o, nullptr), b = make_workload(o, nullptr);
  o.seed = 8;
  auto c = make_workload(o, nullptr);
  EXPECT_EQ(a[1999].arrival_s, b[1999].arrival_s);  // same seed, same arrivals
  EXPECT_NE(a[1999].arrival_s, c[1999].arrival_s);
  for (size_t i = 1; i < a.size(); ++i) ASSERT_GE(a[i].arrival_s, a[i - 1].arrival_s);
  // 1999 exponential gaps of mean 0.1 s: the total is 199.9 s ± a few %.
  EXPECT_NEAR(a[1999].arrival_s, 199.9, 15);
}

TEST(BenchWorkload, TraceCutToRequests) {
  std::vector<BenchRequest> trace(5);
  BenchOptions o;
  o.requests = 3;
  EXPECT_EQ(make_workload(o, &trace).size(), 3u);
  o.requests = 0;
  EXPECT_EQ(make_workload(o, &trace).size(), 5u);
}

TEST(BenchStats, Percentiles) {
  Dist d = distribution({4, 1, 3, 2, 5});
  EXPECT_DOUBLE_EQ(d.mean, 3);
  EXPECT_DOUBLE_EQ(d.p50, 3);
  EXPECT_DOUBLE_EQ(d.p99, 4.96);  // numpy.percentile([1..5], 99)
  EXPECT_EQ(distribution({}).count, 0u);
}

TEST(BenchStats, SummaryArithmetic) {
  std::vector<RequestResult> rs(3);
  for (int i = 0; i < 2; ++i) {
    rs[i].ok = true;
    rs[i].prompt_tokens = 10;
    rs[i].completion_tokens = 4;
    rs[i].ttft_s = 0.1 * (i + 1);
    rs[i].e2e_s = 1;
    rs[i].itl_s = {0.01, 0.02, 0.03};
  }
  rs[2].error = "boom";
  BenchOptions o;
  o.ttft_target_ms = 150;  // only the first request meets it
  StatsSample before{3, 0, 0, 0}, after{5, 0, 0, 0};
  std::vector<StatsSample> samples = {
      {0, 0, 0, 0}, {0, 290, 10, 2}, {0, 70, 30, 2}, {0, -1, -1, 0}};
  json s = summarize(rs, 2.0, before, after, samples, o);
  EXPECT_EQ(s["completed"], 2);
  EXPECT_EQ(s["failed"], 1);
  EXPECT_EQ(s["output_tokens"], 8);
  EXPECT_DOUBLE_EQ(s["output_tok_s"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(s["total_tok_s"].get<double>(), 14.0);
  EXPECT_DOUBLE_EQ(s["requests_per_s"].get<double>(), 1.0);
  EXPECT_EQ(s["preemptions"], 2);
  EXPECT_EQ(s["itl_ms"]["count"], 6);
  EXPECT_NEAR(s["ttft_ms"]["mean"].get<double>(), 150, 1e-9);
  // Waste over allocated slots, summed over the two samples holding KV:
  // (10 + 30) / (300 + 100), not the mean of their ratios (3.3% and 30%).
  EXPECT_NEAR(s["kv_waste"].get<double>(), 0.1, 1e-12);
  EXPECT_EQ(s["kv_waste_samples"], 2);
  EXPECT_EQ(s["goodput"]["requests"], 1);
  EXPECT_EQ(s["errors"][0], "boom");
  std::string table = render_summary(s);
  EXPECT_NE(table.find("10.00%"), std::string::npos);
  std::string cmp = render_compare({{"naive", s}, {"static", s}});
  EXPECT_NE(cmp.find("naive"), std::string::npos);
  EXPECT_NE(cmp.find("ITL p99 ms"), std::string::npos);
  EXPECT_TRUE(s["goodput"]["itl_within_target"].is_null());  // no ITL target
}

// The share of ITL samples (one per token after the first) within the
// target: a request's mean can hide one long gap among many short ones.
TEST(BenchStats, ItlSamplesWithinTarget) {
  std::vector<RequestResult> rs(2);
  for (auto& r : rs) {
    r.ok = true;
    r.completion_tokens = 5;
  }
  rs[0].itl_s = {0.01, 0.01, 0.01, 0.01};
  rs[1].itl_s = {0.01, 0.01, 0.01, 0.5};  // mean 0.1325 s
  BenchOptions o;
  o.itl_target_ms = 200;
  json s = summarize(rs, 1.0, {}, {}, {}, o);
  EXPECT_DOUBLE_EQ(s["goodput"]["itl_within_target"].get<double>(), 7.0 / 8.0);
  EXPECT_EQ(s["goodput"]["requests"], 2);  // both means are within 200 ms
  EXPECT_NE(render_summary(s).find("87.5% <= 200 ms"), std::string::npos) << render_summary(s);
}

TEST(BenchStats, NoWasteFiguresFromAnOlderDaemon) {
  json stats = {{"engine", {{"preemptions", 4}, {"running", 2}}}};
  StatsSample x = parse_stats(stats);
  EXPECT_EQ(x.preemptions, 4);
  EXPECT_EQ(x.kv_waste, -1);
  json s = summarize({}, 1.0, x, x, {x}, BenchOptions{});
  EXPECT_TRUE(s["kv_waste"].is_null());
  EXPECT_TRUE(s["goodput"].is_null());
}
