// cli/bench.h — `kvasir bench`: a load generator for kvasird's HTTP API.
//
// The workload (which requests, when they arrive) and the summary (what the
// run measured) are pure functions here, tested in tests/unit/cli/; the run
// itself (threads, streaming, stats sampling) is cli/bench_run.cpp, and
// --compare-policies (one daemon per policy) is cli/bench_compare.cpp.
// docs/cli.md documents the command and the JSON it prints.
#pragma once

#include <cstdint>
#include <istream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/http_client.h"

namespace kvasir::cli {

// One request of the workload.
struct BenchRequest {
  double arrival_s = 0;    // offset from the start of the run
  std::string prompt;      // a text prompt, or (when empty)
  int32_t prompt_len = 0;  // a synthetic prompt of exactly this many tokens (its own part)
  int32_t max_tokens = 0;
  // A shared prefix (prefix caching workloads): group g's prefix_len
  // tokens, the same for every request of the group, before its own part.
  int32_t prefix_group = -1;
  int32_t prefix_len = 0;
  // A turn of a multi-turn chat: sent once the conversation's previous
  // turn is back (and not before arrival_s). Its prompt is the whole
  // conversation as text: the previous turn's prompt and reply, then this
  // turn's own part (prompt, or prompt_len tokens of text) as the user's.
  int32_t conversation = -1;
  int32_t n = 1;  // choices (the API's n)
};

struct BenchOptions {
  int requests = 0;     // 0: the trace's length (or 100 without a trace)
  int concurrency = 0;  // requests outstanding at most; 0: unbounded (open loop)
  double rate = 0;      // Poisson arrivals per second; 0: all at t = 0
  int max_tokens = 128;
  std::vector<int32_t> prompt_lens{128};  // cycled over the requests
  std::string trace;                      // JSON-lines file; wins over rate/prompt_lens
  // Prefix caching workloads: each request starts with one of
  // prefix_groups shared prompts of shared_prefix_len tokens (its own part
  // is --prompt-len); or `conversations` chats of `turns` turns each (the
  // user's part of a turn is --prompt-len tokens; a shared prefix, when
  // given, is each chat's system prompt).
  int32_t shared_prefix_len = 0;
  int32_t prefix_groups = 1;
  int32_t conversations = 0, turns = 0;
  int32_t n = 1;  // choices per request
  uint64_t seed = 0;
  double ttft_target_ms = 0, itl_target_ms = 0;  // goodput targets; 0 = not set
  bool json = false;
  std::string progress = "auto";  // auto (only when stderr is a tty) | always | never
};

// Hard limits on what a trace or the options may ask for: a trace file is
// untrusted input, and a typo must not make the CLI spawn a million threads.
inline constexpr int kMaxBenchRequests = 1'000'000;
inline constexpr int kMaxBenchWorkers = 512;  // kvasird accepts 1024 connections
inline constexpr int32_t kMaxBenchTokens = 1 << 20;

// Parses a trace: one JSON object per line (blank lines and lines starting
// with # are skipped): {"t": SECONDS, "prompt": TEXT} or {"t": SECONDS,
// "prompt_len": N}, optional "max_tokens" (default `default_max_tokens`),
// "n" (choices), "prefix_group" and "prefix_len" (a shared prefix before a
// prompt_len), "conversation" (a turn of that chat, in file order).
// Arrival times must not decrease. Throws std::runtime_error naming the line.
std::vector<BenchRequest> parse_trace(std::istream& in, int32_t default_max_tokens);

// The workload the options describe: the trace (first `requests` lines when
// set), or `requests` synthetic requests cycling prompt_lens, arriving all
// at once or by a Poisson process of `rate` (seeded: same seed, same times).
std::vector<BenchRequest> make_workload(const BenchOptions& o,
                                        const std::vector<BenchRequest>* trace);

// What one request measured (times in seconds, from its send).
struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft_s = 0, e2e_s = 0;
  std::vector<double> itl_s;  // one per token after the first of its choice
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
  int64_t shared_tokens = 0;  // of its prompt, the workload's shared prefix
  std::string text;           // choice 0's text (a chat's next turn resends it)
};

struct Dist {
  double mean = 0, p50 = 0, p99 = 0;
  size_t count = 0;
};
// Mean and linearly interpolated percentiles (numpy's default); zeros when empty.
Dist distribution(std::vector<double> v);

// Engine counters read from GET /kvasir/v1/stats around the run.
struct StatsSample {
  int64_t preemptions = 0;
  int64_t kv_slots_used = 0, kv_waste = 0;  // -1 when the daemon does not report them
  int32_t running = 0;
  int64_t prefix_queries = 0, prefix_hits = 0;  // engine.prefix_cache (tokens)
  // engine.speculative: the drafter ("" when the daemon has none) and its
  // counters (drafting rows, draft tokens, accepted tokens).
  std::string spec_method;
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted = 0;
};
StatsSample parse_stats(const nlohmann::json& stats);

// The run's summary as one JSON object (docs/cli.md lists its keys).
// `samples` are the stats polled during the run; kv_waste is the sum of
// their waste over the sum of their allocated slots (used + waste).
nlohmann::json summarize(const std::vector<RequestResult>& results, double wall_s,
                         const StatsSample& before, const StatsSample& after,
                         const std::vector<StatsSample>& samples, const BenchOptions& o);

// The readable table of one summary, and of several side by side.
std::string render_summary(const nlohmann::json& s);
std::string render_compare(const std::vector<std::pair<std::string, nlohmann::json>>& runs);

// Runs the workload against a running daemon; returns the summary.
// Throws std::runtime_error when the daemon cannot be used at all.
nlohmann::json run_bench(const Endpoint& ep, const BenchOptions& o,
                         const std::vector<BenchRequest>& workload);

// --compare-policies: one daemon per policy, started from `config` with
// scheduler.policy replaced (and a private socket), the same workload each.
struct CompareOptions {
  std::string config;   // the TOML to start from
  std::string kvasird;  // the daemon binary
  std::vector<std::string> policies{"naive", "static", "continuous", "continuous+chunked"};
  double ready_timeout_s = 300;
};
// Returns 0 when every policy ran; prints the table (or JSON) to stdout.
int compare_policies(const CompareOptions& c, const BenchOptions& o,
                     const std::vector<BenchRequest>& workload);

}  // namespace kvasir::cli
