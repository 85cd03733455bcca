#include "daemon/engine/time_budget.h"

#include <algorithm>
#include <cmath>

namespace kvasir {

TimeBudget::TimeBudget(const SchedLimits& lim) : lim_(lim), cost_(lim.n_stages) {
  timing_.itl_target_auto = lim_.itl_target_ms < 0;
}

// ---- the budget of the next micro-batch -----------------------------------------

// The time budget of the next micro-batch (docs/scheduler.md, "Scheduling
// by time"). A token of a running request crosses every stage, and the
// ring's max_inflight micro-batches take turns on each stage, so the gap
// between its tokens is about max(stages, max_inflight) steps: each
// micro-batch's step gets target / that depth. Auto: 3 x the step every
// running request's decode would take with no prefill (a micro-batch's
// share of them, at their mean context): the gap they will see once the
// prompts now in the ring have joined them, tripled. Those still in
// prefill count: anchored on the requests decoding *now*, one or two
// decodes made the target so tight that waiting prompts crawled (0.79x the
// throughput on long-heavy); on a full micro-batch of plan.max_rows, so
// loose that it protected nothing (docs/scheduler.md).
// None when there is no target or no running request whose tokens it would
// protect (prefill then runs at the token budget). While the cost model
// cannot tell yet, only the aging floor.
StepBudget TimeBudget::step_budget(const RunningSet& set) {
  StepBudget b;
  timing_.step_budget_ms = 0;
  timing_.cost_ready = cost_.ready();
  if (lim_.policy != Policy::kChunked || lim_.itl_target_ms == 0) return b;
  if (set.decoding == 0) return b;  // nothing to protect: the token budget alone
  b.floor_tokens = std::min(StepBudget::kAgedFloor, lim_.chunk_size);
  // The gap is `depth` steps: max(stages, max_inflight) when each stage
  // runs on its own core, more when they share cores and take turns on
  // them, which is why the measured depth replaces it once known.
  const int32_t nominal = std::max({lim_.n_stages, lim_.inflight, 1});
  const double depth = depth_samples_ >= 8 ? std::max(timing_.ring_depth, 1.0) : double(nominal);
  b.aging_steps = 4 * nominal;  // the floor doubles every four starved token gaps
  if (!timing_.cost_ready) {
    // Requests decode but the model cannot yet say what a step costs (a
    // cold start: it has seen only prefill chunks, or nothing): the batch
    // is of decodes and the aging floor, which also teaches it their cost.
    b.step_s = 1e-9;
    return b;
  }
  b.floor_tokens = 1;  // the model sizes pieces: the aim decides (StepBudget)
  if (lim_.itl_target_ms > 0) {
    b.target_step_s = lim_.itl_target_ms / 1e3 / depth;
  } else {
    b.target_step_s = auto_step(set.running, set.positions);
  }
  b.step_s = b.target_step_s * aim_;
  timing_.itl_target_ms = b.target_step_s * depth * 1e3;
  timing_.step_budget_ms = b.step_s * 1e3;
  return b;
}

// The auto target's step: 3 x a micro-batch's share of the running
// requests' decodes with no prefill, but never less than that share plus
// an efficient prefill piece — one whose tokens cost at least 9x the
// step's fixed part (weights read once a step), so prefill runs at >= 90%
// of its speed in big chunks. On a CPU stage that piece is ~100 tokens
// (fixed ~20 ms, ~2 ms a token); on a GPU it is past chunk_size, and auto
// is the token budget. Without the floor, a running set of one or two
// short decodes (the end of a trace) cut the last long prompts into
// pieces of 10-30 tokens that cost 2-3x a token (docs/scheduler.md).
double TimeBudget::auto_step(int64_t running, int64_t positions) const {
  BatchShape alone;  // [rows decodes at the mean context]
  const int64_t pos = positions / std::max<int64_t>(running, 1);
  const int64_t rows =
      std::clamp<int64_t>((running + lim_.inflight - 1) / lim_.inflight, 1, lim_.max_rows);
  for (int64_t r = 0; r < rows; ++r) alone.add_row(pos, 1, true, true);
  double piece = 1;
  for (int st = 0; st < cost_.n_stages(); ++st) {
    const StageCostFit f = cost_.fit(st);
    if (f.per_token_s > 0) piece = std::max(piece, 9 * f.fixed_s / f.per_token_s);
  }
  BatchShape eff = alone;
  eff.add_row(pos, int64_t(std::min<double>(piece, lim_.chunk_size)), false, false);
  return std::max(3 * cost_.step(alone), cost_.step(eff));
}

// Nothing decodes: the ring carries prompts only, and what counts is when
// they are done. W tokens cut into pieces of c pass D stages in W/c + D - 1
// steps of f + c·p each (f: a step's fixed cost, p: a token's; the slowest
// stage's fit), least at c = sqrt(W·f / ((D - 1)·p)). Pieces of the token
// budget leave the later stages idle while the first works through them:
// a lone long prompt on two CPU stages goes as 512 + 512 + ... and the
// second stage idles through the first piece; in pieces of ~100 it starts
// after one (docs/scheduler.md, "Filling the pipeline"). On a GPU
// stage f/p is hundreds of tokens and c is past chunk_size: nothing
// changes. D counts only stages that compute at the same time
// (SchedLimits::parallel_stages): CPU stages sharing the cores by need
// take turns on them, and a lone stage already uses them all, so smaller
// pieces would only add per-batch cost. 0 (no cap) under whole-prefill policies, with D < 2
// (nothing to overlap), or while the cost model cannot tell f from p
// (docs/scheduler.md, "Filling the pipeline, and the warm-up").
int64_t TimeBudget::pipeline_piece(int64_t work) const {
  const int32_t parallel = lim_.parallel_stages > 0 ? lim_.parallel_stages : lim_.n_stages;
  const int32_t depth = std::min({lim_.n_stages, parallel, lim_.inflight});
  if (lim_.policy != Policy::kChunked || depth < 2 || work <= 0 || !cost_.ready()) return 0;
  double fixed = 0, per_token = 0;
  for (int st = 0; st < cost_.n_stages(); ++st) {
    const StageCostFit f = cost_.fit(st);
    fixed = std::max(fixed, f.fixed_s);
    per_token = std::max(per_token, f.per_token_s);
  }
  if (per_token <= 0) return 0;
  const double c = std::sqrt(double(work) * fixed / (double(depth - 1) * per_token));
  return std::max<int64_t>(int64_t(std::ceil(c)), StepBudget::kAgedFloor);
}

// ---- a batch back ---------------------------------------------------------------

// A batch is back: the cost model learns its stages' times, and the
// timing figures (EngineStats::timing) follow the measured step.
void TimeBudget::observe(const BatchShape& sh, const std::vector<double>& stage_busy_s,
                         double cycle_s) {
  SchedTiming& t = timing_;
  t.batches++;
  t.decode_rows += sh.decode_rows;
  const bool prefill = sh.prefill_tokens() > 0;
  if (prefill) {
    t.prefill_batches++;
    t.decode_rows_with_prefill += sh.decode_rows;
  }
  constexpr double kMean = 0.05;  // recent means: the last ~20 batches
  t.mean_rows += kMean * (double(sh.rows) - t.mean_rows);
  t.mean_tokens += kMean * (double(sh.tokens) - t.mean_tokens);
  if (stage_busy_s.empty()) return;
  cost_.observe(sh, stage_busy_s);
  double step = 0;
  for (double v : stage_busy_s) step = std::max(step, v);
  if (!(step > 0)) return;
  double& mean = prefill ? t.step_ms_prefill : t.step_ms_decode;
  // Decode-only figures are for batches of decodes; a prefill-only batch
  // says nothing about what decodes suffer.
  if (!prefill || sh.decode_rows > 0) mean += (mean == 0 ? 1.0 : 0.1) * (step * 1e3 - mean);
  // The ring's real depth: a batch's time in it over a step, in recent
  // means (means, not a mean of ratios: a decode-only batch waiting behind
  // a chunk has a long cycle for its short step, the chunk the reverse).
  if (cycle_s > 0) {
    const double a = depth_samples_++ == 0 ? 1.0 : 0.05;
    cycle_mean_ += a * (cycle_s - cycle_mean_);
    step_mean_ += a * (step - step_mean_);
    t.ring_depth = std::clamp(cycle_mean_ / step_mean_, 1.0, 64.0);
  }
}

// Aiming below the target (docs/scheduler.md). The budget keeps each
// micro-batch's *predicted* step at target / depth, so the gaps scatter
// around the target itself: the cost model's error, the measured depth's
// and the machine's noise all land on both sides. So the budget watches
// the gaps it produces (each sampled row's time since its previous token,
// at the instant the bridge read the batch: the Scheduler measures them)
// and aims lower while more than kOverGoal of the recent ones exceed the
// target, back up slowly while they do not. Only while a time budget is
// in force.
void TimeBudget::learn_gaps(const std::vector<double>& gaps, bool carried_prefill) {
  constexpr double kOverGoal = 0.03, kAimMin = 0.25, kRate = 0.02;  // rate: per gap
  const bool budget = lim_.policy == Policy::kChunked && lim_.itl_target_ms != 0;
  const double target_s = timing_.itl_target_ms / 1e3;
  int samples = 0;
  if (budget && target_s > 0)
    for (double gap : gaps) {
      over_share_ += kRate * ((gap > target_s ? 1.0 : 0.0) - over_share_);
      samples++;
    }
  // Auto aims at its target itself: it is a guard against gaps of
  // seconds behind a chunk, not a bound to hold 97% of gaps under, and
  // aiming below a target that tracks the running set starves prefill
  // (the aim falls, pieces shrink to a few tokens, throughput drops:
  // docs/measurements/2026-12-01.md). A number is a bound: the aim holds it.
  if (samples == 0 || timing_.itl_target_auto) {
    timing_.over_target = over_share_;
    return;
  }
  // Down by 3% a batch, up by 0.5%: a gap over the target is what the
  // budget exists to prevent, a step under it costs some prefill speed.
  // Up only in a batch that carried prefill: between bursts the decodes'
  // gaps say nothing about what the next prompt's pieces will do to them,
  // and an aim that drifted back to 1 meanwhile would meet every burst
  // at the target itself.
  if (over_share_ > kOverGoal)
    aim_ = std::max(kAimMin, aim_ * 0.97);
  else if (carried_prefill)
    aim_ = std::min(1.0, aim_ * 1.005);
  timing_.aim = aim_;
  timing_.over_target = over_share_;
}

}  // namespace kvasir
