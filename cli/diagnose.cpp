// cli/diagnose.cpp — see diagnose.h.
#include "cli/diagnose.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "base/layer_split.h"

namespace kvasir::cli {

using nlohmann::json;

namespace {

std::string pct(double x) {
  return fmt::format("{:.0f}%", x * 100);
}

std::string mib(double bytes) {
  return bytes >= 1 << 30 ? fmt::format("{:g}GiB", std::round(bytes / (1 << 30) * 10) / 10)
                          : fmt::format("{:.0f}MiB", bytes / (1 << 20));
}

int depth(const TopView& v) {
  return std::max({int(v.stages.size()), v.inflight, 1});
}

Diagnosis make(const char* cause, const char* knob) {
  Diagnosis d;
  d.cause = cause;
  d.knob = knob;
  return d;
}

std::string stage_line(const TopView& v, size_t i) {
  const StageView& s = v.stages[i];
  return fmt::format(
      "stage {} (layers {}): busy {}, starved {}, blocked {}; {:.1f} ms per micro-batch", i,
      s.layers, pct(s.busy), pct(s.starved), pct(s.blocked), s.ms_per_batch);
}

// KV capacity: sequences preempted (their prefix recomputed), or requests
// waiting for blocks while the policy would admit them.
std::optional<Diagnosis> kv_capacity(const TopView& v) {
  const double free = v.blocks_total > 0 ? double(v.blocks_free) / double(v.blocks_total) : 1.0;
  const bool waits = v.waiting > 0 && v.timing.admission_waits > 0 && free < 0.10;
  if (v.preemptions_delta <= 0 && !waits) return std::nullopt;
  Diagnosis d = make("kv_capacity", "kv.memory");
  d.figures.push_back(
      fmt::format("{} preemptions in the last {:.1f} s (each recomputes a "
                  "sequence's whole prefix)",
                  v.preemptions_delta, v.interval_s));
  d.figures.push_back(fmt::format("{} requests running, {} waiting; {} of {} KV blocks free",
                                  v.running, v.waiting, v.blocks_free, v.blocks_total));
  const int64_t held = v.kv_slots_used + v.kv_waste;
  if (held > 0)
    d.figures.push_back(fmt::format("KV waste {:.1f}% of the allocated slots",
                                    100.0 * double(v.kv_waste) / double(held)));
  d.change =
      v.plan.kv_memory > 0
          ? fmt::format("raise kv.memory from {} to {} (~{} blocks): ", mib(v.plan.kv_memory),
                        mib(2 * v.plan.kv_memory), 2 * v.blocks_total)
          : std::string("raise kv.memory (about double): ");
  d.change +=
      "preemptions should stop and waiting requests be admitted as they come; it costs "
      "that much more memory on every stage";
  d.summary =
      fmt::format("KV capacity: {} preemptions, {} waiting, {} of blocks free; raise kv.memory",
                  v.preemptions_delta, v.waiting, pct(free));
  return d;
}

// Fewer micro-batches in flight than stages: at most `inflight` stages can
// work at once, the others wait for the batch to come round. Stages that
// share the cores take turns on them anyway (the daemon's parallel_stages):
// more micro-batches than that would split the decodes, not overlap work.
std::optional<Diagnosis> too_few_in_flight(const TopView& v) {
  const int P = v.plan.parallel_stages;
  const int S = P > 0 ? std::min(P, int(v.stages.size())) : int(v.stages.size());
  const int I = std::max(v.inflight, 1);
  double sum = 0, top = 0;
  for (const StageView& s : v.stages) sum += s.busy, top = std::max(top, s.busy);
  if (I >= S || v.running < 2 || sum > I + 0.15 || top >= 0.9) return std::nullopt;
  Diagnosis d = make("batching", "plan.max_inflight");
  d.figures.push_back(
      fmt::format("{} micro-batch{} in flight for {} stages: at most {} stage{} "
                  "work at once (busy shares sum to {:.2f})",
                  I, I == 1 ? "" : "es", S, I, I == 1 ? "" : "s", sum));
  for (size_t i = 0; i < v.stages.size(); ++i) d.figures.push_back(stage_line(v, i));
  const double gain = std::min(double(S) / I, top > 0 ? 1.0 / top : double(S) / I);
  d.change = fmt::format(
      "set plan.max_inflight = {} (0 = one per stage that can compute at once): each stage "
      "works on its own micro-batch; "
      "expect up to ~{:.1f}x the tokens/s (the micro-batches each carry a share of the "
      "requests, the gap between a request's tokens about the same)",
      S, gain);
  d.summary = fmt::format(
      "batching: {} micro-batch in flight for {} stages, stages busy {} at "
      "most; set plan.max_inflight = {}",
      I, S, pct(top), S);
  return d;
}

// Decodes riding with prefill wait for the chunk: their steps are many
// times a decode-only step. Under a target the scheduler keeps such steps
// within target / depth, and that is no spike.
std::optional<Diagnosis> prefill_interference(const TopView& v) {
  const TimingView& t = v.timing;
  if (t.decode_rows <= 0 || t.prefill_batches <= 0 || t.step_ms_decode <= 0) return std::nullopt;
  const double riding = double(t.decode_rows_with_prefill) / double(t.decode_rows);
  const double ratio = t.step_ms_prefill / t.step_ms_decode;
  const double budget = t.itl_target_ms > 0 ? t.itl_target_ms / depth(v) : 0;
  if (riding < 0.05 || ratio < 3 || (budget > 0 && t.step_ms_prefill <= 1.5 * budget))
    return std::nullopt;
  const bool chunked = !v.plan.known || v.plan.policy == "continuous+chunked";
  Diagnosis d =
      make("prefill_interference", chunked ? "scheduler.itl_target_ms" : "plan.max_tokens");
  const int D = depth(v);
  d.figures.push_back(
      fmt::format("steps carrying prefill take {:.0f} ms, {:.1f}x a decode-only step ({:.1f} ms)",
                  t.step_ms_prefill, ratio, t.step_ms_decode));
  d.figures.push_back(fmt::format(
      "{} of the decode rows rode with prefill: their token gap ~{:.0f} ms instead of ~{:.0f} ms "
      "({} steps per gap: {} stages, {} micro-batches in flight)",
      pct(riding), D * t.step_ms_prefill, D * t.step_ms_decode, D, v.stages.size(), v.inflight));
  d.figures.push_back(fmt::format(
      "ITL target now: {}",
      t.itl_target_ms > 0 ? fmt::format("{:.0f} ms", t.itl_target_ms) : std::string("none")));
  const double target = std::ceil(3 * D * t.step_ms_decode / 10) * 10;
  if (chunked) {
    d.change = fmt::format(
        "set scheduler.itl_target_ms = {:.0f} (3x the decode-only gap): chunks are sized so a step "
        "with prefill stays within {:.0f} ms; expect the decodes' p99 gap near {:.0f} ms instead "
        "of ~{:.0f} ms, and long prompts' first token later (prefill gets the time left)",
        target, target / D, target, D * t.step_ms_prefill);
  } else {
    d.change = fmt::format(
        "lower plan.max_tokens (under {} a prompt is prefilled whole, cut only at the token "
        "budget), or use continuous+chunked with scheduler.itl_target_ms = {:.0f}: expect the "
        "decodes' gap to fall from ~{:.0f} ms towards ~{:.0f} ms",
        v.plan.policy, target, D * t.step_ms_prefill, target);
  }
  d.summary = fmt::format(
      "prefill interference: steps with prefill {:.1f}x decode-only, {} of "
      "decodes ride with them; set {}",
      ratio, pct(riding), d.knob);
  return d;
}

// The layers' costs for the mean micro-batch now: from the stages' cost
// models when they have seen enough (per token over each stage's layers,
// the tail's per sampled row as its extra), else from their measured ms per
// batch alone (base/layer_split.h, costs_from_stages). A stage's fixed cost
// per micro-batch is mostly reading its layers' weights (the fit's fixed
// terms match the stages' packed weights over the read rate:
// docs/scheduler.md), so it goes with the layers too.
SplitCosts live_costs(const TopView& v, const std::vector<std::pair<int, int>>& layers,
                      const std::vector<double>& ms) {
  double per_token = 0, fixed = 0;
  int n = 0;
  for (size_t i = 0; i < v.stages.size(); ++i) {
    per_token += v.stages[i].cost_per_token_ms;
    fixed += std::max(0.0, v.stages[i].cost_fixed_ms);
    n += layers[i].second - layers[i].first + 1;
  }
  const StageView& tail = v.stages.back();
  if (per_token <= 0 || n <= 0 || v.timing.mean_tokens <= 0) return costs_from_stages(layers, ms);
  SplitCosts c;
  c.layer.assign(size_t(n), (per_token * v.timing.mean_tokens + fixed) / n);
  c.head = v.stages.front().cost_per_sample_ms * v.timing.mean_rows;
  c.tail = tail.cost_per_sample_ms * v.timing.mean_rows;
  return c;
}

// One stage sets the step (an unbalanced layer split): the others starve.
std::optional<Diagnosis> unbalanced_split(const TopView& v) {
  const size_t S = v.stages.size();
  if (S < 2 || v.running < 1) return std::nullopt;
  size_t slow = 0, fast = 0;
  std::vector<std::pair<int, int>> layers;
  std::vector<double> ms;
  for (size_t i = 0; i < S; ++i) {
    if (v.stages[i].ms_per_batch > v.stages[slow].ms_per_batch) slow = i;
    if (v.stages[i].ms_per_batch < v.stages[fast].ms_per_batch) fast = i;
    layers.emplace_back(v.stages[i].first_layer, v.stages[i].last_layer);
    ms.push_back(v.stages[i].ms_per_batch);
  }
  // A stage within 10% of the slowest is balanced: moving one layer of 15
  // shifts ~7% of a stage, so a smaller gap has no better split to offer.
  if (v.stages[fast].step_share >= 0.9 || v.stages[slow].busy < 0.5) return std::nullopt;
  const SplitCosts costs = live_costs(v, layers, ms);
  const auto split = balanced_split(costs, int(S));
  if (split.empty()) return std::nullopt;
  // The step now as the model has it, and with the balanced split.
  const double model_now = split_step(costs, layers);
  const double now = v.stages[slow].ms_per_batch,
               then = now * split_step(costs, split) / std::max(model_now, 1e-9);
  // 5% is worth a restart with other layers: a split whose slowest stage
  // is 5-10% over the balanced one's still costs a clear share of the
  // in-flight gain, so a 10% threshold would call such a split balanced
  // (docs/scheduler.md, "Layer split by measured time").
  if (!(then > 0) || now / then < 1.05) return std::nullopt;
  Diagnosis d = make("batching", "stages.layers");
  d.figures.push_back(fmt::format(
      "stage {} sets the step: {:.1f} ms per micro-batch against {:.1f} ms for stage {} ({} of "
      "it)",
      slow, now, v.stages[fast].ms_per_batch, fast, pct(v.stages[fast].step_share)));
  for (size_t i = 0; i < S; ++i) d.figures.push_back(stage_line(v, i));
  std::string ranges;
  for (size_t i = 0; i < S; ++i)
    ranges += fmt::format("{}{}-{}", i ? " | " : "", split[i].first, split[i].second);
  d.change = fmt::format(
      "split the layers {} ([[stages]] layers, or layers = \"auto\" to measure at load): the "
      "step should fall from {:.1f} to ~{:.1f} ms, ~{:.2f}x the tokens/s while the ring is full",
      ranges, now, then, now / then);
  d.summary = fmt::format("batching: stage {} sets the step ({:.0f} vs {:.0f} ms); layer split {}",
                          slow, now, v.stages[fast].ms_per_batch, ranges);
  return d;
}

// A stage busy through the whole interval that finished no micro-batch in
// it: one step outlasts the interval (a long prefill piece, or the first
// batches of a cold start). Its ms per batch is unknown and the others
// starve behind it, so the split and batching rules would misread the frame
// (a CI screen called such a frame "saturated and balanced"): no verdict
// until the step ends.
std::optional<Diagnosis> long_step(const TopView& v) {
  for (size_t i = 0; i < v.stages.size(); ++i) {
    const StageView& s = v.stages[i];
    if (s.busy < 0.9 || s.batches_per_s > 0 || v.interval_s <= 0) continue;
    Diagnosis d = make("none", "");
    for (size_t k = 0; k < v.stages.size(); ++k) d.figures.push_back(stage_line(v, k));
    d.change =
        "nothing yet: the next intervals, once the step has ended, show its length; a long step "
        "that recurs while requests decode is prefill interference (scheduler.itl_target_ms)";
    d.summary = fmt::format(
        "one long step: stage {} has computed one micro-batch for the whole {:.1f} s; no verdict "
        "until it ends",
        i, v.interval_s);
    return d;
  }
  return std::nullopt;
}

// A stage runnable but waiting for a CPU (its run-queue wait, from the
// kernel's schedstat) for a tenth of the interval or more: other work on
// its cores takes them, and each hand-off it sleeps through comes back late.
// Checked after the settings' rules, whose figures it then qualifies: no
// setting of the ring's own cures a host that is busy elsewhere.
std::optional<Diagnosis> descheduled(const TopView& v) {
  constexpr double kWaitShare = 0.10;
  size_t worst = 0;
  for (size_t i = 0; i < v.stages.size(); ++i)
    if (v.stages[i].cpu_wait > v.stages[worst].cpu_wait) worst = i;
  const StageView& w = v.stages[worst];
  if (w.cpu_wait < kWaitShare) return std::nullopt;
  Diagnosis d = make("descheduled", "stages.cpus");
  for (size_t i = 0; i < v.stages.size(); ++i) {
    const StageView& s = v.stages[i];
    if (s.cpu_wait < 0) continue;
    d.figures.push_back(fmt::format(
        "stage {} (layers {}): waited for a CPU {} of the interval, preempted {:.0f} times/s; "
        "busy {}",
        i, s.layers, pct(s.cpu_wait), s.preemptions_per_s, pct(s.busy)));
  }
  d.change =
      "keep other work off the stages' CPUs: give each stage CPUs of its own ([[stages]] cpus "
      "= \"0-7\") and the rest of the host the others (taskset, cgroup cpusets), or run "
      "kvasird at a higher priority than that work (nice/renice, systemd Nice=; lowering it "
      "needs CAP_SYS_NICE). [plan] spin_us keeps a stage on its core between hand-offs; "
      "the stage figures above are inflated by the waits until then";
  d.summary = fmt::format(
      "descheduled: stage {} waited for a CPU {} of the interval (other work runs on its cores); "
      "give the stages their own CPUs ([[stages]] cpus)",
      worst, pct(w.cpu_wait));
  return d;
}

// The stages idle: too little work reaches the ring.
std::optional<Diagnosis> starved_ring(const TopView& v) {
  double top = 0;
  for (const StageView& s : v.stages) top = std::max(top, s.busy);
  if (top >= 0.6) return std::nullopt;
  Diagnosis d = make("batching", "");
  for (size_t i = 0; i < v.stages.size(); ++i) d.figures.push_back(stage_line(v, i));
  d.figures.push_back(
      fmt::format("{} requests running, {} waiting; mean micro-batch {:.1f} rows, "
                  "{:.0f} tokens",
                  v.running, v.waiting, v.timing.mean_rows, v.timing.mean_tokens));
  const bool capped = v.plan.known && v.timing.mean_rows >= 0.9 * v.plan.max_rows;
  if (capped) d.knob = "plan.max_rows";
  d.change = capped ? fmt::format(
                          "raise plan.max_rows (now {}): micro-batches are full of rows "
                          "while the stages idle",
                          v.plan.max_rows)
                    : std::string(
                          "nothing to turn: too few requests reach the ring to keep its "
                          "stages busy (send more at once)");
  d.summary = fmt::format("batching: stages busy {} at most with {} running; {}", pct(top),
                          v.running, capped ? "raise plan.max_rows" : "the load is light");
  return d;
}

}  // namespace

Diagnosis diagnose_view(const TopView& v) {
  if (!v.ready) {
    Diagnosis d = make("loading", "");
    d.summary = "loading: the model is not ready yet";
    return d;
  }
  if (v.stages.empty()) {
    Diagnosis d = make("none", "");
    d.summary = "no stage statistics";
    return d;
  }
  if (auto d = kv_capacity(v)) return *d;
  if (v.running == 0 && v.waiting == 0) {
    Diagnosis d = make("idle", "");
    d.summary = "idle: no requests running";
    return d;
  }
  for (auto rule : {too_few_in_flight, prefill_interference, long_step, unbalanced_split,
                    descheduled, starved_ring})
    if (auto d = rule(v)) return *d;
  Diagnosis d = make("none", "");
  for (size_t i = 0; i < v.stages.size(); ++i) d.figures.push_back(stage_line(v, i));
  d.change =
      "none of the three: the stages are busy and balanced; the ring is the limit (faster "
      "or more devices, more stages)";
  d.summary = "saturated and balanced: the ring is the limit (add stages or devices)";
  return d;
}

json diagnosis_json(const Diagnosis& d) {
  return {{"cause", d.cause},
          {"knob", d.knob},
          {"summary", d.summary},
          {"figures", d.figures},
          {"change", d.change}};
}

std::string render_diagnosis(const Diagnosis& d) {
  std::string o = d.summary + "\n";
  for (const std::string& f : d.figures) o += "  - " + f + "\n";
  if (!d.change.empty()) o += "change: " + d.change + "\n";
  return o;
}

}  // namespace kvasir::cli
