// daemon/engine/cost_model.h — what a micro-batch costs each stage, fitted
// online from the stages' own timings (docs/scheduler.md, "Scheduling by
// time"). Internal to the Scheduler.
//
// Every stage writes its busy time on each batch into the batch's result
// slot (ipc/batch.h, ResultHeader::stage_busy_ns); the scheduler knows the
// batch's shape. Per stage s the model is linear in the shape:
//
//   busy_s ≈ fixed + per_token · tokens + per_kctx · context / 1024
//            + per_sample · sampled rows
//
// tokens: every position the batch computes (prefill and decode alike: the
// linear layers see one row per token); context: the attention's reads,
// sum over tokens of (position + 1); sampled: rows whose last token the
// tail turns into logits (the output head, 49,152 x 576 for the default
// model, and the sampler), a drafting row's draft positions included. The ring's step is set by its slowest stage, so
// the scheduler budgets with step() = max over stages.
//
// The fit is least squares of the relative error over the recent batches:
// decayed normal equations (weight 0.98 per batch, so the last ~50 batches
// count; each batch weighted by 1 / its time², so a 20 ms decode step and a
// 2 s chunk count alike), with a small pull towards the previous solution
// so a term the recent batches do not exercise (the per-token cost during
// a long decode-only stretch) keeps its value instead of drifting to
// whatever fits; coefficients are kept non-negative (time does not shrink
// with work).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace kvasir {

// What a micro-batch asks of the stages.
struct BatchShape {
  int64_t tokens = 0;       // positions computed
  int64_t rows = 0;         // sequences
  int64_t sampled = 0;      // rows the tail samples
  int64_t context = 0;      // attention reads: sum over tokens of (position + 1)
  int64_t decode_rows = 0;  // rows that decode (one position past the prompt)
  int64_t drafts = 0;       // draft tokens decode rows carry (speculative decoding)

  // A row of n positions from pos0 added to the shape.
  void add_row(int64_t pos0, int64_t n, bool sample, bool decode) {
    tokens += n;
    rows += 1;
    sampled += sample ? 1 : 0;
    decode_rows += decode ? 1 : 0;
    context += n * pos0 + n * (n + 1) / 2;
  }
  // A decode row's n drafts, after its own position at pos0 - 1. The
  // tail turns each into logits (verify_row): the output head runs once
  // per draft, as for a sampled row.
  void add_drafts(int64_t pos0, int64_t n) {
    tokens += n;
    drafts += n;
    sampled += n;
    context += n * pos0 + n * (n + 1) / 2;
  }
  // Positions that are not decodes: prompt chunks, recomputes, padding.
  int64_t prefill_tokens() const { return tokens - decode_rows - drafts; }
};

// One stage's fitted costs, as reported (EngineStats, /kvasir/v1/stats).
struct StageCostFit {
  double fixed_s = 0, per_token_s = 0, per_kctx_s = 0, per_sample_s = 0;
  double rms_s = 0;        // recent root-mean-square error of the fit
  double mean_busy_s = 0;  // recent mean busy time per batch
  int64_t samples = 0;     // batches observed
};

class CostModel {
 public:
  static constexpr int kTerms = 4;  // fixed, per token, per 1024 context, per sampled row
  explicit CostModel(int n_stages = 0);

  void resize(int n_stages);
  int n_stages() const { return int(stages_.size()); }
  // A batch came back: its shape and each stage's busy time (seconds; a
  // stage with a time <= 0 did not report and is skipped).
  void observe(const BatchShape& shape, const std::vector<double>& stage_s);
  // Whether the model can be trusted for budgeting: every stage has seen
  // a few batches, prefill among them (or the per-token cost is unknown),
  // and a few small ones with decodes (at most kSmallTokens tokens). Fitted
  // on prefill chunks alone, which all carry about as many tokens, the
  // fixed and per-token costs cannot be told apart, and what a step of
  // decodes costs is a guess.
  bool ready() const;
  static constexpr int64_t kSmallTokens = 64;
  double predict(int stage, const BatchShape& shape) const;
  // The ring's step for a batch of this shape: its slowest stage.
  double step(const BatchShape& shape) const;
  StageCostFit fit(int stage) const;

  // The same fit over decode-only batches alone (no prompt position), for
  // what a draft position adds to a step of decodes. A small row's
  // positions share one read of the weights, so on a memory-bound stage
  // they cost far less than a prefill's positions, which the whole fit's
  // per-token term mostly learns from: the linear model cannot hold both.
  // Ready once every stage has seen kDecodeBatches of them and two sizes
  // (in tokens), or fixed and per-token costs cannot be told apart.
  static constexpr int kDecodeBatches = 8;
  bool decode_ready() const;
  double decode_step(const BatchShape& shape) const;

 private:
  using Vec = std::array<double, kTerms>;
  struct Stage {
    double a[kTerms][kTerms] = {};  // decayed X^T X
    Vec b{};                        // decayed X^T y
    Vec theta{};                    // the solution (scaled features)
    double err2 = 0, busy = 0, weight = 0;
    int64_t n = 0, n_prefill = 0, n_small = 0;
    int64_t min_tokens = 0, max_tokens = 0;  // the decode fit's batch sizes seen
  };
  static Vec features(const BatchShape& s);
  static double dot(const Vec& theta, const Vec& x);
  static void solve(Stage& st);
  static void learn(Stage& st, const Vec& x, double y, const BatchShape& shape);

  std::vector<Stage> stages_;
  std::vector<Stage> decode_;  // fitted on decode-only batches
};

}  // namespace kvasir
