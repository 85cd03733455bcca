// cli/top.h — `kvasir top`: what the ring is doing, and why it is slow.
//
// Two snapshots of /kvasir/v1/stats (a second apart) give each stage's
// busy/starved/blocked shares and rates, its share of the ring's step, and
// the scheduler's and KV pool's figures over the interval; diagnose()
// (cli/diagnose.h, shared with `kvasir diagnose`) names the bottleneck with
// the setting to change. Pure functions, tested in tests/unit/cli/; the
// terminal loop is in top.cpp.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvasir::cli {

// A MoE stage's expert load over the interval (the differences of the
// stats' cumulative `experts.routed`; since start on the first snapshot).
struct ExpertView {
  int n_experts = 0;     // 0: a dense stage (no experts line)
  int per_slot = 1;      // consecutive experts per counter (more than 256 are folded)
  uint64_t routed = 0;   // (token, choice) pairs routed in the interval
  double imbalance = 0;  // max / mean over every expert (zeros included); 0: nothing routed
  // The three hottest experts (or folded ranges, "34-35"), share of `routed`.
  std::vector<std::pair<std::string, double>> hottest;
  // An expert group's leader: each process's share of `routed` (leader
  // first, then its members) and their max / mean; empty otherwise.
  std::vector<double> group_shares;
  double group_imbalance = 0;
};

struct StageView {
  std::string layers, device;
  std::string state;                          // busy, starved, blocked, down (now)
  double busy = 0, starved = 0, blocked = 0;  // shares of the interval, 0..1
  double batches_per_s = 0, tokens_per_s = 0;
  // Mean busy time per micro-batch (ms): over the interval when batches
  // came back in it, else the cost model's recent mean.
  double ms_per_batch = 0;
  double step_share = 0;  // ms_per_batch over the slowest stage's: 1 = sets the step
  // Mean handoff into the stage over the interval (µs): from a batch being
  // ready for it to the stage holding it; -1 when none was timed.
  double handoff_us = -1;
  // Time the process was runnable but waited for a CPU (run-queue wait,
  // summed over its threads) over the interval's wall time: 0.2 = a fifth
  // of the interval spent behind other work; -1 when the snapshots do not
  // carry it (cli/stage_procs.h: read on the daemon's host only). And its
  // preemptions per second.
  double cpu_wait = -1, preemptions_per_s = 0;
  // The cost model (docs/scheduler.md): ms per batch = fixed + per_token · tokens + ...
  double cost_fixed_ms = 0, cost_per_token_ms = 0, cost_per_sample_ms = 0;
  int first_layer = 0, last_layer = 0;
  ExpertView experts;
  // Its place (the stats' position and member): member k >= 1 of the expert
  // group at `position` (docs/expert-groups.md), 0 for a stage.
  int position = 0, member = 0;
};

// The plan and scheduler settings the daemon reports ("plan" in the stats).
struct PlanView {
  bool known = false;
  int max_rows = 0, max_tokens = 0, max_inflight = 0, chunk_size = 0, max_num_seqs = 0;
  int parallel_stages = 0;         // stages that can compute at once (0: not reported)
  std::string policy, itl_target;  // itl_target: "auto", "none" or "N ms"
  double itl_target_ms = -1;       // -1 auto, 0 none
  double kv_memory = 0;            // bytes per CPU stage
  int kv_block_size = 16;
};

// The scheduler's timing figures (engine.timing): counts over the interval
// (deltas), recent means as they are now.
struct TimingView {
  double itl_target_ms = 0, step_budget_ms = 0;
  bool cost_ready = false;
  int64_t batches = 0, prefill_batches = 0, decode_rows = 0, decode_rows_with_prefill = 0;
  int64_t prefill_cut = 0, admission_waits = 0;
  double step_ms_decode = 0, step_ms_prefill = 0, mean_rows = 0, mean_tokens = 0;
};

// A link to a worker host (docs/multi-host.md; engine.links): its state
// and traffic over the interval.
struct LinkView {
  std::string host, stages, state, last_error;
  int64_t joins = 0;
  double sent_per_s = 0, received_per_s = 0;  // bytes
  double rtt_ms = 0;
};

struct TopView {
  std::string model;
  bool ready = false;
  std::vector<StageView> stages;   // the ring's positions (diagnose reasons over these)
  std::vector<StageView> members;  // expert groups' members, shown under their leader
  int inflight = 0;
  int waiting = 0, running = 0;
  int64_t blocks_total = 0, blocks_free = 0, preemptions = 0, preemptions_delta = 0;
  // A sliding-window group's own pool (docs/scheduler.md; 0: none).
  int64_t blocks_swa_total = 0, blocks_swa_free = 0;
  int64_t kv_slots_used = 0, kv_waste = 0;
  int64_t restarts = 0;  // stage processes restarted after a loss (docs/recovery.md)
  double gen_tokens_per_s = 0, prompt_tokens_per_s = 0;
  double ttft_p50 = 0, ttft_p99 = 0, itl_p50 = 0, itl_p99 = 0;
  double interval_s = 0;  // what the shares and deltas cover
  PlanView plan;
  TimingView timing;
  // Prefix caching: hits / queries (tokens) over the interval (since start
  // on the first snapshot; -1 when nothing was looked up), and the blocks.
  bool prefix_caching = false;
  double prefix_hit_rate = -1;
  int64_t blocks_cached = 0, blocks_evictable = 0;
  // The same in the sliding-window group's pool (0 without one).
  int64_t blocks_swa_cached = 0, blocks_swa_evictable = 0;
  // Speculative decoding over the interval (engine.speculative): the
  // drafter ("" or "none": off), draft tokens proposed and accepted, and
  // drafting rows, whence the acceptance rate and the mean accepted length
  // (1 + accepted / drafts; vLLM's).
  std::string spec_method;
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted = 0;
  std::vector<LinkView> links;  // one per worker host; none on one host
};

// One stage's expert load from its stats (`now`) and the previous
// snapshot's (`prev`, may be null).
ExpertView expert_view(const nlohmann::json& now, const nlohmann::json* prev);
// `prev` may be null (first snapshot: shares from totals since start).
TopView make_view(const nlohmann::json& now, const nlohmann::json* prev, double interval_s);
// One line: the bottleneck and the setting to change (diagnose_view's summary).
std::string diagnose(const TopView& v);
// The screen (plain text, no escape codes).
std::string render(const TopView& v);
// The live loop: refresh every second, `q` quits. Returns an exit status.
int run_top(const std::function<nlohmann::json()>& fetch);

}  // namespace kvasir::cli
