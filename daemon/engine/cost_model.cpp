#include "daemon/engine/cost_model.h"

#include <algorithm>
#include <cmath>

namespace kvasir {

namespace {
constexpr double kDecay = 0.98;  // per batch: the last ~50 batches count
constexpr double kPull = 0.01;   // towards the previous solution, in batches' weight
// Feature scales: each term of a typical batch is O(1), so the pull and
// the pivoting treat them alike.
constexpr double kTokScale = 64, kCtxScale = 65536, kSampleScale = 16;
}  // namespace

CostModel::CostModel(int n_stages) {
  resize(n_stages);
}

void CostModel::resize(int n_stages) {
  stages_.assign(size_t(std::max(n_stages, 0)), Stage{});
  decode_ = stages_;
}

CostModel::Vec CostModel::features(const BatchShape& s) {
  return Vec{1.0, double(s.tokens) / kTokScale, double(s.context) / kCtxScale,
             double(s.sampled) / kSampleScale};
}

// Least squares on the decayed normal equations, pulled towards the last
// solution, with every coefficient >= 0: a term that comes out negative is
// fixed at 0 and the others solved again (at most kTerms rounds).
void CostModel::solve(Stage& st) {
  bool fixed[kTerms] = {};
  const Vec prev = st.theta;
  for (int round = 0; round < kTerms; ++round) {
    double m[kTerms][kTerms + 1];
    for (int i = 0; i < kTerms; ++i) {
      for (int j = 0; j < kTerms; ++j)
        m[i][j] = fixed[i] || fixed[j] ? double(i == j) : st.a[i][j] + (i == j ? kPull : 0.0);
      m[i][kTerms] = fixed[i] ? 0.0 : st.b[i] + kPull * prev[i];
    }
    for (int c = 0; c < kTerms; ++c) {  // Gauss-Jordan with partial pivoting
      int piv = c;
      for (int r = c + 1; r < kTerms; ++r)
        if (std::abs(m[r][c]) > std::abs(m[piv][c])) piv = r;
      std::swap(m[c], m[piv]);
      if (std::abs(m[c][c]) < 1e-12) return;  // degenerate: keep the last solution
      for (int r = 0; r < kTerms; ++r) {
        if (r == c) continue;
        const double f = m[r][c] / m[c][c];
        for (int k = c; k <= kTerms; ++k) m[r][k] -= f * m[c][k];
      }
    }
    Vec x{};
    bool neg = false;
    for (int i = 0; i < kTerms; ++i) {
      x[i] = fixed[i] ? 0.0 : m[i][kTerms] / m[i][i];
      if (x[i] < 0) fixed[i] = neg = true;
    }
    if (!neg) {
      st.theta = x;
      return;
    }
  }
}

void CostModel::observe(const BatchShape& shape, const std::vector<double>& stage_s) {
  const Vec x = features(shape);
  const bool decode_only = shape.prefill_tokens() == 0 && shape.decode_rows > 0;
  for (size_t s = 0; s < stages_.size() && s < stage_s.size(); ++s) {
    const double y = stage_s[s];
    if (!(y > 0) || !std::isfinite(y)) continue;
    learn(stages_[s], x, y, shape);
    if (!decode_only) continue;
    learn(decode_[s], x, y, shape);
    int64_t& lo = decode_[s].min_tokens;
    lo = lo == 0 ? shape.tokens : std::min(lo, shape.tokens);
    decode_[s].max_tokens = std::max(decode_[s].max_tokens, shape.tokens);
  }
}

void CostModel::learn(Stage& st, const Vec& x, double y, const BatchShape& shape) {
  const double pred = dot(st.theta, x);
  st.weight = st.weight * kDecay + 1.0;
  const double m = 1.0 / st.weight;  // decayed means
  if (st.n > 0) st.err2 += m * ((pred - y) * (pred - y) - st.err2);
  st.busy += (st.n > 0 ? m : 1.0) * (y - st.busy);
  // Relative error, not absolute: a decode step of 20 ms and a chunk of
  // 2 s weigh alike (in squared seconds the chunks alone would fit, and
  // the fixed cost of a step would come out as whatever they leave), and
  // a step a busy machine stretched counts for less.
  const double rel = st.busy / std::max(y, 1e-6);
  const double w = std::min(rel * rel, 1e4);
  for (int i = 0; i < kTerms; ++i) {
    for (int j = 0; j < kTerms; ++j) st.a[i][j] = st.a[i][j] * kDecay + w * x[i] * x[j];
    st.b[i] = st.b[i] * kDecay + w * x[i] * y;
  }
  st.n++;
  if (shape.prefill_tokens() > 0) st.n_prefill++;
  if (shape.tokens <= kSmallTokens && shape.decode_rows > 0) st.n_small++;
  solve(st);
}

double CostModel::dot(const Vec& theta, const Vec& x) {
  double y = 0;
  for (int i = 0; i < kTerms; ++i) y += theta[i] * x[i];
  return y;
}

bool CostModel::decode_ready() const {
  if (decode_.empty()) return false;
  for (const Stage& st : decode_)
    if (st.n < kDecodeBatches || st.max_tokens <= st.min_tokens) return false;
  return true;
}

double CostModel::decode_step(const BatchShape& shape) const {
  const Vec x = features(shape);
  double m = 0;
  for (const Stage& st : decode_) m = std::max(m, dot(st.theta, x));
  return m;
}

bool CostModel::ready() const {
  if (stages_.empty()) return false;
  for (const Stage& st : stages_)
    if (st.n < 3 || st.n_prefill < 1 || st.n_small < 2) return false;
  return true;
}

double CostModel::predict(int stage, const BatchShape& shape) const {
  if (stage < 0 || size_t(stage) >= stages_.size()) return 0;
  return dot(stages_[size_t(stage)].theta, features(shape));
}

double CostModel::step(const BatchShape& shape) const {
  double m = 0;
  for (int s = 0; s < n_stages(); ++s) m = std::max(m, predict(s, shape));
  return m;
}

StageCostFit CostModel::fit(int stage) const {
  StageCostFit f;
  if (stage < 0 || size_t(stage) >= stages_.size()) return f;
  const Stage& st = stages_[size_t(stage)];
  f.fixed_s = st.theta[0];
  f.per_token_s = st.theta[1] / kTokScale;
  f.per_kctx_s = st.theta[2] / kCtxScale * 1024;
  f.per_sample_s = st.theta[3] / kSampleScale;
  f.rms_s = std::sqrt(std::max(st.err2, 0.0));
  f.mean_busy_s = st.busy;
  f.samples = st.n;
  return f;
}

}  // namespace kvasir
