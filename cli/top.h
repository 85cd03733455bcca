// cli/top.h — `kvasir top`: what the ring is doing, and why it is slow.
//
// Two snapshots of /kvasir/v1/stats (a second apart) give each stage's
// busy/starved/blocked shares and rates; diagnose() names the bottleneck
// (docs/scheduler.md) with the setting to change. Pure functions, tested in
// tests/unit/cli/test_cli.cpp; the terminal loop is in top.cpp.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvasir::cli {

struct StageView {
  std::string layers, device;
  double busy = 0, starved = 0, blocked = 0;  // shares of the interval, 0..1
  double batches_per_s = 0, tokens_per_s = 0;
};

struct TopView {
  std::string model;
  bool ready = false;
  std::vector<StageView> stages;
  int inflight = 0;
  int waiting = 0, running = 0;
  int64_t blocks_total = 0, blocks_free = 0, preemptions = 0, preemptions_delta = 0;
  int64_t restarts = 0;  // stage processes restarted after a loss (docs/recovery.md)
  double gen_tokens_per_s = 0, prompt_tokens_per_s = 0;
  double ttft_p50 = 0, ttft_p99 = 0, itl_p50 = 0, itl_p99 = 0;
  // Prefix caching: hits / queries (tokens) over the interval (since start
  // on the first snapshot; -1 when nothing was looked up), and the blocks.
  bool prefix_caching = false;
  double prefix_hit_rate = -1;
  int64_t blocks_cached = 0, blocks_evictable = 0;
};

// `prev` may be null (first snapshot: shares from totals since start).
TopView make_view(const nlohmann::json& now, const nlohmann::json* prev, double interval_s);
// One line: the bottleneck and the setting to change.
std::string diagnose(const TopView& v);
// The screen (plain text, no escape codes).
std::string render(const TopView& v);
// The live loop: refresh every second, `q` quits. Returns an exit status.
int run_top(const std::function<nlohmann::json()>& fetch);

}  // namespace kvasir::cli
