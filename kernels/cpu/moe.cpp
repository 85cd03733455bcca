// kernels/cpu/moe.cpp — see moe.h.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"

namespace kvasir::cpu {

void moe_route(const MoeRouteConfig& cfg, const float* logits, int64_t n, int32_t* ids,
               float* weights) {
  const int32_t E = cfg.n_experts, k = cfg.top_k;
  KV_CHECK(E >= 1 && k >= 1 && k <= E, "moe_route: top_k {} of {} experts", k, E);
  KV_CHECK(n >= 0, "moe_route: n {}", n);
  std::vector<double> p(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * E;
    float mx = l[0];
    for (int32_t e = 0; e < E; ++e) {
      KV_CHECK(std::isfinite(l[e]), "moe_route: token {}: router logit {} is {}", t, e, l[e]);
      mx = std::max(mx, l[e]);
    }
    double sum = 0;
    for (int32_t e = 0; e < E; ++e) sum += (p[size_t(e)] = std::exp(double(l[e]) - mx));
    for (int32_t e = 0; e < E; ++e) {
      p[size_t(e)] /= sum;
      order[size_t(e)] = e;
    }
    // The k largest, descending; equal probabilities keep the lower id first.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return p[size_t(a)] > p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && a < b);
    });
    double chosen = 0;
    for (int32_t j = 0; j < k; ++j) chosen += p[size_t(order[size_t(j)])];
    const double scale = cfg.norm_topk ? 1.0 / std::max(chosen, 0x1p-14) : 1.0;
    for (int32_t j = 0; j < k; ++j) {
      ids[t * k + j] = order[size_t(j)];
      weights[t * k + j] = float(p[size_t(order[size_t(j)])] * scale);
    }
  }
}

void moe_count_routed(const int32_t* ids, int64_t n, int32_t top_k, int32_t n_experts,
                      uint64_t* counts) {
  KV_CHECK(n >= 0 && top_k >= 0, "moe_count_routed: n {}, top_k {}", n, top_k);
  const int64_t choices = n * top_k;
  for (int64_t i = 0; i < choices; ++i) {
    const int32_t e = ids[i];
    KV_CHECK(e >= 0 && e < n_experts, "moe_count_routed: expert id {} outside [0, {})", e,
             n_experts);
    counts[e]++;
  }
}

namespace {

void check_experts(const MoeExperts& e) {
  const size_t held = e.gate.size();
  KV_CHECK(e.up.size() == held && e.down.size() == held,
           "moe_ffn: {} gate, {} up and {} down matrices", held, e.up.size(), e.down.size());
  KV_CHECK(e.first >= 0 && int64_t(e.first) + int64_t(held) <= e.n_total,
           "moe_ffn: experts [{}, {}) outside the layer's {}", e.first, int64_t(e.first) + held,
           e.n_total);
  if (held == 0) return;
  const int64_t hidden = e.gate[0].cols(), ffn = e.gate[0].rows();
  for (size_t i = 0; i < held; ++i) {
    KV_CHECK(e.gate[i].cols() == hidden && e.gate[i].rows() == ffn && e.up[i].cols() == hidden &&
                 e.up[i].rows() == ffn && e.down[i].cols() == ffn && e.down[i].rows() == hidden,
             "moe_ffn: expert {}: gate [{}, {}], up [{}, {}], down [{}, {}] do not form a "
             "[{}] -> [{}] -> [{}] FFN",
             e.first + int64_t(i), e.gate[i].rows(), e.gate[i].cols(), e.up[i].rows(),
             e.up[i].cols(), e.down[i].rows(), e.down[i].cols(), hidden, ffn, hidden);
  }
}

// Counting sort of the (token, j) pairs whose expert is held: s.slots holds
// token * top_k + j grouped by expert (tokens ascending within an expert),
// s.offsets[i] .. s.offsets[i + 1] the range of held expert i.
void group_by_expert(const MoeExperts& e, int64_t n, int32_t top_k, const int32_t* ids,
                     MoeScratch& s) {
  const int32_t held = int32_t(e.gate.size());
  s.offsets.assign(size_t(held) + 1, 0);
  for (int64_t i = 0; i < n * top_k; ++i) {
    const int32_t id = ids[i];
    KV_CHECK(id >= 0 && id < e.n_total, "moe_ffn: token {}: expert id {} outside 0..{}",
             i / top_k, id, e.n_total - 1);
    if (id >= e.first && id < e.first + held) ++s.offsets[size_t(id - e.first) + 1];
  }
  for (int32_t i = 0; i < held; ++i) s.offsets[size_t(i) + 1] += s.offsets[size_t(i)];
  s.slots.resize(size_t(s.offsets[size_t(held)]));
  std::vector<int32_t> fill(s.offsets.begin(), s.offsets.end() - 1);
  for (int64_t i = 0; i < n * top_k; ++i) {
    const int32_t id = ids[i];
    if (id >= e.first && id < e.first + held)
      s.slots[size_t(fill[size_t(id - e.first)]++)] = int32_t(i);
  }
}

}  // namespace

void moe_ffn(const MoeExperts& e, const float* x, int64_t n, int32_t top_k, const int32_t* ids,
             const float* weights, float* out, MoeScratch& s, ThreadPool* pool) {
  KV_CHECK(n >= 0 && top_k >= 1, "moe_ffn: n {} / top_k {}", n, top_k);
  check_experts(e);
  if (n == 0 || e.gate.empty()) return;
  const int64_t hidden = e.gate[0].cols(), ffn = e.gate[0].rows();
  std::memset(out, 0, size_t(n * hidden) * sizeof(float));
  group_by_expert(e, n, top_k, ids, s);
  s.xs.resize(size_t(n * hidden));
  s.ys.resize(size_t(n * hidden));
  s.gate.resize(size_t(n * ffn));
  s.up.resize(size_t(n * ffn));
  for (size_t i = 0; i + 1 < s.offsets.size(); ++i) {
    const int32_t begin = s.offsets[i], count = s.offsets[i + 1] - begin;
    if (count == 0) continue;  // not chosen: its weights are not read
    for (int32_t r = 0; r < count; ++r) {
      const int64_t t = s.slots[size_t(begin + r)] / top_k;
      std::memcpy(s.xs.data() + r * hidden, x + t * hidden, size_t(hidden) * sizeof(float));
    }
    matmul(e.gate[i], s.xs.data(), count, s.gate.data(), pool);  // [count, ffn]
    matmul(e.up[i], s.xs.data(), count, s.up.data(), pool);
    swiglu(s.gate.data(), s.up.data(), int64_t(count) * ffn, s.gate.data());
    matmul(e.down[i], s.gate.data(), count, s.ys.data(), pool);  // [count, hidden]
    for (int32_t r = 0; r < count; ++r) {
      const int32_t slot = s.slots[size_t(begin + r)];
      const float w = weights[slot];
      float* o = out + int64_t(slot / top_k) * hidden;
      const float* y = s.ys.data() + r * hidden;
      for (int64_t c = 0; c < hidden; ++c) o[c] += w * y[c];
    }
  }
}

void add_sigmoid_gated(const float* y, const float* gate, int64_t n, int64_t dim, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float g = float(1.0 / (1.0 + std::exp(-double(gate[t]))));
    for (int64_t c = 0; c < dim; ++c) out[t * dim + c] += g * y[t * dim + c];
  }
}

}  // namespace kvasir::cpu
