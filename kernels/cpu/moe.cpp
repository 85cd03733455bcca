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

// Counting sort of the (token, j) pairs whose expert is in [first, first +
// held): s.slots holds token * top_k + j grouped by expert (tokens ascending
// within an expert), s.offsets[i] .. s.offsets[i + 1] the range of expert
// first + i.
void group_by_expert(int32_t n_total, int32_t first, int32_t held, int64_t n, int32_t top_k,
                     const int32_t* ids, MoeScratch& s) {
  s.offsets.assign(size_t(held) + 1, 0);
  for (int64_t i = 0; i < n * top_k; ++i) {
    const int32_t id = ids[i];
    KV_CHECK(id >= 0 && id < n_total, "moe_ffn: token {}: expert id {} outside 0..{}", i / top_k,
             id, n_total - 1);
    if (id >= first && id < first + held) ++s.offsets[size_t(id - first) + 1];
  }
  for (int32_t i = 0; i < held; ++i) s.offsets[size_t(i) + 1] += s.offsets[size_t(i)];
  s.slots.resize(size_t(s.offsets[size_t(held)]));
  std::vector<int32_t> fill(s.offsets.begin(), s.offsets.end() - 1);
  for (int64_t i = 0; i < n * top_k; ++i) {
    const int32_t id = ids[i];
    if (id >= first && id < first + held) s.slots[size_t(fill[size_t(id - first)]++)] = int32_t(i);
  }
}

// The one copy of the combine's arithmetic: out[slot / top_k] += w[slot] *
// row r of ys, for the count slots given (one expert's). moe_ffn and
// moe_combine both add through it, so a term added by the leader of an
// expert group is the same float operation as in the unsharded moe_ffn.
void add_terms(const int32_t* slots, int32_t count, const float* weights, int32_t top_k,
               const float* ys, int64_t ys_row_of_slot, int64_t hidden, float* out) {
  for (int32_t r = 0; r < count; ++r) {
    const int32_t slot = slots[r];
    const float w = weights[slot];
    float* o = out + int64_t(slot / top_k) * hidden;
    const float* y = ys + (ys_row_of_slot ? int64_t(slot) : int64_t(r)) * hidden;
    for (int64_t c = 0; c < hidden; ++c) o[c] += w * y[c];
  }
}

// y[r, :] += bias for r < rows (y: [rows, dim]).
void add_rows(const float* bias, int32_t rows, int64_t dim, float* y) {
  for (int32_t r = 0; r < rows; ++r) add_inplace(y + r * dim, bias, dim);
}

// Expert i's FFN over its grouped tokens: s.ys [count, hidden].
void expert_rows(const MoeExperts& e, size_t i, const float* x, int32_t top_k, MoeScratch& s,
                 ThreadPool* pool) {
  const int64_t hidden = e.gate[0].cols(), ffn = e.gate[0].rows();
  const int32_t begin = s.offsets[i], count = s.offsets[i + 1] - begin;
  for (int32_t r = 0; r < count; ++r) {
    const int64_t t = s.slots[size_t(begin + r)] / top_k;
    std::memcpy(s.xs.data() + r * hidden, x + t * hidden, size_t(hidden) * sizeof(float));
  }
  matmul(e.gate[i], s.xs.data(), count, s.gate.data(), pool);  // [count, ffn]
  matmul(e.up[i], s.xs.data(), count, s.up.data(), pool);
  const int64_t id = e.first + int64_t(i);
  if (e.gate_bias) add_rows(e.gate_bias + id * ffn, count, ffn, s.gate.data());
  if (e.up_bias) add_rows(e.up_bias + id * ffn, count, ffn, s.up.data());
  if (e.act == MoeAct::kSwigluOai)
    swiglu_oai(s.gate.data(), s.up.data(), int64_t(count) * ffn, e.alpha, e.limit, s.gate.data());
  else
    swiglu(s.gate.data(), s.up.data(), int64_t(count) * ffn, s.gate.data());
  matmul(e.down[i], s.gate.data(), count, s.ys.data(), pool);  // [count, hidden]
  if (e.down_bias) add_rows(e.down_bias + id * hidden, count, hidden, s.ys.data());
}

void size_scratch(const MoeExperts& e, int64_t n, MoeScratch& s) {
  const int64_t hidden = e.gate[0].cols(), ffn = e.gate[0].rows();
  s.xs.resize(size_t(n * hidden));
  s.ys.resize(size_t(n * hidden));
  s.gate.resize(size_t(n * ffn));
  s.up.resize(size_t(n * ffn));
}

}  // namespace

void moe_ffn(const MoeExperts& e, const float* x, int64_t n, int32_t top_k, const int32_t* ids,
             const float* weights, float* out, MoeScratch& s, ThreadPool* pool) {
  KV_CHECK(n >= 0 && top_k >= 1, "moe_ffn: n {} / top_k {}", n, top_k);
  check_experts(e);
  if (n == 0 || e.gate.empty()) return;
  const int64_t hidden = e.gate[0].cols();
  std::memset(out, 0, size_t(n * hidden) * sizeof(float));
  group_by_expert(e.n_total, e.first, int32_t(e.gate.size()), n, top_k, ids, s);
  size_scratch(e, n, s);
  for (size_t i = 0; i + 1 < s.offsets.size(); ++i) {
    const int32_t begin = s.offsets[i], count = s.offsets[i + 1] - begin;
    if (count == 0) continue;  // not chosen: its weights are not read
    expert_rows(e, i, x, top_k, s, pool);
    add_terms(s.slots.data() + begin, count, weights, top_k, s.ys.data(), 0, hidden, out);
  }
}

void moe_expert_rows(const MoeExperts& e, const float* x, int64_t n, int32_t top_k,
                     const int32_t* ids, float* y, MoeScratch& s, ThreadPool* pool) {
  KV_CHECK(n >= 0 && top_k >= 1, "moe_expert_rows: n {} / top_k {}", n, top_k);
  check_experts(e);
  if (n == 0 || e.gate.empty()) return;
  const int64_t hidden = e.gate[0].cols();
  group_by_expert(e.n_total, e.first, int32_t(e.gate.size()), n, top_k, ids, s);
  size_scratch(e, n, s);
  for (size_t i = 0; i + 1 < s.offsets.size(); ++i) {
    const int32_t begin = s.offsets[i], count = s.offsets[i + 1] - begin;
    if (count == 0) continue;
    expert_rows(e, i, x, top_k, s, pool);
    for (int32_t r = 0; r < count; ++r)
      std::memcpy(y + int64_t(s.slots[size_t(begin + r)]) * hidden, s.ys.data() + r * hidden,
                  size_t(hidden) * sizeof(float));
  }
}

void moe_combine(int32_t n_total, int32_t first, int32_t held, int64_t n, int32_t top_k,
                 const int32_t* ids, const float* weights, const float* y, int64_t hidden,
                 float* out, MoeScratch& s) {
  KV_CHECK(n >= 0 && top_k >= 1 && hidden >= 1, "moe_combine: n {} / top_k {} / hidden {}", n,
           top_k, hidden);
  KV_CHECK(first >= 0 && held >= 0 && int64_t(first) + held <= n_total,
           "moe_combine: experts [{}, {}) outside the layer's {}", first, int64_t(first) + held,
           n_total);
  if (n == 0 || held == 0) return;
  group_by_expert(n_total, first, held, n, top_k, ids, s);
  for (size_t i = 0; i + 1 < s.offsets.size(); ++i) {
    const int32_t begin = s.offsets[i], count = s.offsets[i + 1] - begin;
    add_terms(s.slots.data() + begin, count, weights, top_k, y, 1, hidden, out);
  }
}

void add_sigmoid_gated(const float* y, const float* gate, int64_t n, int64_t dim, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float g = float(1.0 / (1.0 + std::exp(-double(gate[t]))));
    for (int64_t c = 0; c < dim; ++c) out[t * dim + c] += g * y[t * dim + c];
  }
}

}  // namespace kvasir::cpu
