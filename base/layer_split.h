// base/layer_split.h — splitting a model's layers over a ring's stages by
// measured time (docs/scheduler.md, "Layer split by measured time").
//
// A stage's step is the sum of its layers' costs, plus the embedding on the
// head (stage 0) and the final norm, output head and sampler on the tail
// (the last stage). The ring runs at the pace of its slowest stage, so the
// best contiguous split minimises the largest stage cost. Header-only and
// pure: kvasird uses it on the costs it measures at start-up (`kvasird
// --check`, `layers = "auto"`), `kvasir diagnose` on the costs the running
// stages report (it sees only HTTP and base/).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace kvasir {

struct SplitCosts {
  std::vector<double> layer;  // each layer's cost (any unit: ms per step)
  double head = 0;            // the first stage's extra (embedding)
  double tail = 0;            // the last stage's extra (final norm, output head, sampling)
};

// Layers [first, last] (inclusive) as stage `s` of `n_stages`.
inline double stage_cost(const SplitCosts& c, int first, int last, int s, int n_stages) {
  double t = 0;
  for (int l = first; l <= last; ++l) t += c.layer[size_t(l)];
  if (s == 0) t += c.head;
  if (s == n_stages - 1) t += c.tail;
  return t;
}

// The contiguous split (inclusive ranges, one per stage, each at least one
// layer) whose slowest stage is fastest; ties go to the split with the most
// layers on the earlier stages. Empty when there are fewer layers than stages.
inline std::vector<std::pair<int, int>> balanced_split(const SplitCosts& c, int n_stages) {
  const int L = int(c.layer.size()), S = n_stages;
  if (S < 1 || L < S) return {};
  std::vector<double> pre(size_t(L) + 1, 0.0);
  for (int l = 0; l < L; ++l) pre[size_t(l) + 1] = pre[size_t(l)] + c.layer[size_t(l)];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][e]: the least max over stages 0..s covering layers [0, e).
  std::vector<std::vector<double>> best(size_t(S), std::vector<double>(size_t(L) + 1, inf));
  std::vector<std::vector<int>> cut(size_t(S), std::vector<int>(size_t(L) + 1, 0));
  for (int e = 1; e <= L; ++e) best[0][size_t(e)] = pre[size_t(e)] + c.head + (S == 1 ? c.tail : 0);
  for (int s = 1; s < S; ++s)
    for (int e = s + 1; e <= L; ++e)
      for (int b = s; b < e; ++b) {  // stage s holds [b, e)
        const double mine = pre[size_t(e)] - pre[size_t(b)] + (s == S - 1 ? c.tail : 0);
        const double m = std::max(best[size_t(s) - 1][size_t(b)], mine);
        if (m < best[size_t(s)][size_t(e)] - 1e-12 ||
            (m <= best[size_t(s)][size_t(e)] + 1e-12 && b > cut[size_t(s)][size_t(e)])) {
          best[size_t(s)][size_t(e)] = m;
          cut[size_t(s)][size_t(e)] = b;
        }
      }
  std::vector<std::pair<int, int>> out(static_cast<size_t>(S));
  int e = L;
  for (int s = S - 1; s > 0; --s) {
    const int b = cut[size_t(s)][size_t(e)];
    out[size_t(s)] = {b, e - 1};
    e = b;
  }
  out[0] = {0, e - 1};
  return out;
}

// The slowest stage's cost under a split.
inline double split_step(const SplitCosts& c, const std::vector<std::pair<int, int>>& split) {
  double m = 0;
  for (size_t s = 0; s < split.size(); ++s)
    m = std::max(m, stage_cost(c, split[s].first, split[s].second, int(s), int(split.size())));
  return m;
}

// Per-layer costs inferred from the stages' measured step times (ms per
// micro-batch) and their layer ranges, for a ring of one kind of device:
// every layer costs the same, the lightest stage per layer has no extra,
// and what the head and the tail take beyond their layers at that rate is
// their extra (embedding; output head and sampler). Empty costs when the
// stages do not say enough (one stage, or nothing measured).
inline SplitCosts costs_from_stages(const std::vector<std::pair<int, int>>& layers,
                                    const std::vector<double>& stage_ms) {
  SplitCosts c;
  const size_t S = layers.size();
  if (S < 2 || stage_ms.size() != S) return c;
  auto n = [&](size_t s) { return double(layers[s].second - layers[s].first + 1); };
  double per_layer = std::numeric_limits<double>::infinity();
  for (size_t s = 0; s < S; ++s) {
    if (!(stage_ms[s] > 0) || n(s) < 1) return c;
    per_layer = std::min(per_layer, stage_ms[s] / n(s));
  }
  c.layer.assign(size_t(layers[S - 1].second) + 1, per_layer);
  c.head = std::max(0.0, stage_ms[0] - n(0) * per_layer);
  c.tail = std::max(0.0, stage_ms[S - 1] - n(S - 1) * per_layer);
  return c;
}

}  // namespace kvasir
