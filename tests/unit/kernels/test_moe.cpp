// moe_route and moe_ffn against the token-by-token references of
// reference.h (ref::moe_route, ref::moe_ffn): odd routings (experts no token
// chose, one token, every token), every weight type, a held range of
// experts, with and without a pool.
//
// Tolerances: F32/F16/BF16 weights, |out - ref| ≤ 1e-4 · (|ref| + 1) per
// element (f32 accumulation over two matmuls). Quantised weights round the activations to
// 8 bits twice (x, then the SwiGLU output): ‖out - ref‖ / ‖ref‖ < 3%, 8%
// for K-quants, 25% for Q4_1 (see quant_tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>

#include "base/check.h"
#include "kernels/cpu/moe.h"
#include "reference.h"

namespace kvasir::cpu {
namespace {

struct Stack {
  std::vector<ref::OwnedWeight> owned;
  std::vector<TensorView> views;
};

Stack random_stack(DType t, int n, int64_t rows, int64_t cols, std::mt19937& rng) {
  Stack s;
  for (int i = 0; i < n; ++i) s.owned.push_back(ref::random_weight(t, rows, cols, rng));
  for (const auto& o : s.owned) s.views.push_back(o.view);
  return s;
}

struct Layer {
  int n_experts, hidden, ffn;
  Stack gate, up, down;
  Layer(DType t, int n_experts_, int hidden_, int ffn_, std::mt19937& rng)
      : n_experts(n_experts_), hidden(hidden_), ffn(ffn_) {
    gate = random_stack(t, n_experts, ffn, hidden, rng);
    up = random_stack(t, n_experts, ffn, hidden, rng);
    down = random_stack(t, n_experts, hidden, ffn, rng);
  }
  MoeExperts held(int first, int count) const {
    auto part = [&](const Stack& s) {
      return std::span<const TensorView>(s.views).subspan(size_t(first), size_t(count));
    };
    MoeExperts e;
    e.n_total = n_experts;
    e.first = first;
    e.gate = part(gate);
    e.up = part(up);
    e.down = part(down);
    return e;
  }
};

std::vector<float> random_x(int64_t n, int64_t cols, std::mt19937& rng) {
  std::vector<float> x(size_t(n * cols));
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& v : x) v = d(rng);
  return x;
}

bool is_plain(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

bool is_kquant(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

// Relative L2 error allowed for quantised weights: the matmul kernels round
// the activations to 8 bits, per 32 values (Q8_0 blocks) or, for K-quants,
// per 256 (Q8_K blocks: one scale over a longer, heavier-tailed row of
// SwiGLU outputs, so coarser steps). Q4_1 adds min · Σx to d · Σ q·x, two
// large terms that nearly cancel on random weights, so on a token or two of
// 32-wide rows the rounding shows most there. These bounds catch a wrong
// expert, slice or weight (errors of order 1); the grouping and the combine
// are checked tightly on the F32/F16/BF16 weights.
double quant_tolerance(DType t) {
  if (t == DType::Q4_1) return 0.25;
  return is_kquant(t) ? 0.08 : 0.03;
}

// The kernel against the reference for one routing, every pool.
void expect_matches(const Layer& L, DType t, const std::vector<float>& x, int64_t n, int k,
                    const std::vector<int32_t>& ids, const std::vector<float>& weights, int first,
                    int count, const char* what) {
  std::vector<double> wd(weights.begin(), weights.end());
  std::vector<TensorView> g(L.gate.views.begin() + first, L.gate.views.begin() + first + count),
      u(L.up.views.begin() + first, L.up.views.begin() + first + count),
      d(L.down.views.begin() + first, L.down.views.begin() + first + count);
  const auto want = ref::moe_ffn(g, u, d, first, x.data(), n, k, ids, wd);
  std::unique_ptr<ThreadPool> pools[] = {nullptr, std::make_unique<ThreadPool>(3)};
  for (auto& pool : pools) {
    MoeScratch s;
    std::vector<float> out(size_t(n * L.hidden), NAN);
    moe_ffn(L.held(first, count), x.data(), n, k, ids.data(), weights.data(), out.data(), s,
            pool.get());
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(std::isfinite(out[i])) << what << " at " << i;
      const double e = out[i] - want[i];
      err2 += e * e;
      ref2 += want[i] * want[i];
      if (is_plain(t)) {
        ASSERT_LE(std::fabs(e), 1e-4 * (std::fabs(want[i]) + 1.0))
            << what << " " << dtype_name(t) << " element " << i << ": " << out[i] << " vs "
            << want[i];
      }
    }
    if (!is_plain(t)) {
      EXPECT_LT(std::sqrt(err2 / std::max(ref2, 1e-30)), quant_tolerance(t))
          << what << " " << dtype_name(t);
    }
  }
}

const DType kTypes[] = {DType::F32, DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                        DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

TEST(MoeRoute, MatchesTheReference) {
  std::mt19937 rng(7);
  for (int E : {1, 3, 8, 60}) {
    for (int k : {1, 2, 4, 8}) {
      if (k > E) continue;
      for (bool norm : {false, true}) {
        const int64_t n = 13;
        const auto logits = random_x(n, E, rng);
        std::vector<int32_t> ids(size_t(n * k));
        std::vector<float> w(size_t(n * k));
        moe_route(MoeRouteConfig{E, k, norm}, logits.data(), n, ids.data(), w.data());
        std::vector<int32_t> rid;
        std::vector<double> rw;
        ref::moe_route(logits.data(), n, E, k, norm, rid, rw);
        EXPECT_EQ(ids, rid) << E << " experts, top " << k;
        for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], rw[i], 1e-6) << i;
        if (norm) {
          for (int64_t t = 0; t < n; ++t)
            EXPECT_NEAR(std::accumulate(w.begin() + t * k, w.begin() + (t + 1) * k, 0.0), 1.0,
                        1e-6);
        }
      }
    }
  }
}

// Equal logits: the lower ids first, each weight 1/E (1/k normalised).
TEST(MoeRoute, TiesAndSoftmaxOverTheChosen) {
  const std::vector<float> flat(6, 0.25f);
  std::vector<int32_t> ids(3);
  std::vector<float> w(3);
  moe_route(MoeRouteConfig{6, 3, false}, flat.data(), 1, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2}));
  for (float v : w) EXPECT_NEAR(v, 1.0 / 6, 1e-7);
  moe_route(MoeRouteConfig{6, 3, true}, flat.data(), 1, ids.data(), w.data());
  for (float v : w) EXPECT_NEAR(v, 1.0 / 3, 1e-7);
  // Normalised top-k weights are a softmax over the k largest logits (Mixtral).
  const std::vector<float> l = {0.5f, -1.f, 2.f, 1.5f, -3.f};
  std::vector<int32_t> id2(2);
  std::vector<float> w2(2);
  moe_route(MoeRouteConfig{5, 2, true}, l.data(), 1, id2.data(), w2.data());
  EXPECT_EQ(id2, (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(w2[0], 1 / (1 + std::exp(-0.5)), 1e-6);
  EXPECT_NEAR(w2[1], 1 / (1 + std::exp(0.5)), 1e-6);
}

TEST(MoeRoute, RefusesBadInput) {
  std::vector<int32_t> ids(4);
  std::vector<float> w(4), l(4, 0.f);
  EXPECT_THROW(moe_route(MoeRouteConfig{4, 5, false}, l.data(), 1, ids.data(), w.data()), Error);
  EXPECT_THROW(moe_route(MoeRouteConfig{4, 0, false}, l.data(), 1, ids.data(), w.data()), Error);
  l[2] = NAN;
  EXPECT_THROW(moe_route(MoeRouteConfig{4, 2, false}, l.data(), 1, ids.data(), w.data()), Error);
}

// A routed batch with known ids → per-expert counts, added to what the
// array held (one call per layer); a bad id is refused.
TEST(MoeCountRouted, CountsEachChoice) {
  // 4 tokens, top 2, of 6 experts: expert 0 on every token, 5 once, 2 and 4 never.
  const std::vector<int32_t> ids{0, 3, 1, 0, 0, 5, 3, 0};
  std::vector<uint64_t> counts(6, 0);
  moe_count_routed(ids.data(), 4, 2, 6, counts.data());
  EXPECT_EQ(counts, (std::vector<uint64_t>{4, 1, 0, 2, 0, 1}));
  moe_count_routed(ids.data(), 2, 2, 6, counts.data());  // a second layer, two tokens
  EXPECT_EQ(counts, (std::vector<uint64_t>{6, 2, 0, 3, 0, 1}));
  moe_count_routed(ids.data(), 0, 2, 6, counts.data());  // no token: nothing
  EXPECT_EQ(counts, (std::vector<uint64_t>{6, 2, 0, 3, 0, 1}));
  const std::vector<int32_t> bad{0, 6};
  EXPECT_THROW(moe_count_routed(bad.data(), 1, 2, 6, counts.data()), Error);
  // Counted from moe_route's ids: k per token in all.
  std::vector<float> logits(size_t(9 * 5));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float((i * 37) % 11) * 0.3f;
  std::vector<int32_t> rid(9 * 2);
  std::vector<float> rw(9 * 2);
  moe_route(MoeRouteConfig{5, 2, true}, logits.data(), 9, rid.data(), rw.data());
  std::vector<uint64_t> c5(5, 0);
  moe_count_routed(rid.data(), 9, 2, 5, c5.data());
  uint64_t total = 0;
  for (uint64_t c : c5) total += c;
  EXPECT_EQ(total, 18u);
}

// Routings chosen by hand: expert 0 takes every token, expert 5 exactly one,
// experts 3 and 7 none; then one token alone; then k = E (every expert on
// every token).
TEST(MoeFfn, OddRoutingsEveryType) {
  std::mt19937 rng(11);
  for (DType t : kTypes) {
    const int hidden = is_kquant(t) ? 256 : 96, ffn = is_kquant(t) ? 256 : 64, E = 8;
    const Layer L(t, E, hidden, ffn, rng);
    const int64_t n = 9;
    const int k = 2;
    std::vector<int32_t> ids(size_t(n * k));
    for (int64_t i = 0; i < n; ++i) {
      ids[size_t(i * k)] = 0;
      ids[size_t(i * k + 1)] = i == 4 ? 5 : int32_t(1 + i % 2 * 5);  // 1 or 6, token 4: 5
    }
    std::vector<float> w(size_t(n * k));
    for (auto& v : w) v = std::uniform_real_distribution<float>(0.1f, 1.f)(rng);
    const auto x = random_x(n, hidden, rng);
    expect_matches(L, t, x, n, k, ids, w, 0, E, "hand routing");
    expect_matches(L, t, x, 1, k, ids, w, 0, E, "one token");

    std::vector<int32_t> all(size_t(n * E));
    std::vector<float> wall(size_t(n * E));
    for (int64_t i = 0; i < n; ++i)
      for (int j = 0; j < E; ++j) {
        all[size_t(i * E + j)] = (j + int(i)) % E;  // every expert, in rotating order
        wall[size_t(i * E + j)] = 1.f / float(E);
      }
    expect_matches(L, t, x, n, E, all, wall, 0, E, "k = E");
  }
}

// Router-chosen routings over a larger batch, and a held range of experts:
// the outputs of the three ranges add up to the whole layer's.
// One gpt-oss expert on one token, in double from the dequantised weights:
// down · h + b_d, h = min(g, 7)·σ(1.702·min(g, 7))·(clamp(u, ±7) + 1),
// g = gate · x + b_g, u = up · x + b_u.
std::vector<double> oai_expert(const TensorView& gate, const TensorView& up, const TensorView& down,
                               const float* const* bias, const float* x) {
  const auto mv = [](const TensorView& m, const auto* in, int64_t r) {
    const std::vector<float> row = ref::dequant_row(m, r);
    double acc = 0;
    for (int64_t c = 0; c < m.cols(); ++c) acc += double(row[size_t(c)]) * double(in[c]);
    return acc;
  };
  std::vector<double> h, y;
  for (int64_t r = 0; r < gate.rows(); ++r) {
    const double g = std::min(mv(gate, x, r) + bias[0][r], 7.0);
    const double u = std::clamp(mv(up, x, r) + bias[1][r], -7.0, 7.0);
    h.push_back(g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0));
  }
  for (int64_t c = 0; c < down.rows(); ++c) y.push_back(mv(down, h.data(), c) + bias[2][c]);
  return y;
}

// gpt-oss's experts: a bias after each matmul and the clamped SwiGLU (gate
// pre-activations of std ~4.6 here: both clamps at 7 are hit), on F32 and
// MXFP4 weights, a held range, against the formula token by token.
TEST(MoeFfn, GptOssBiasesAndClampedSwiglu) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (DType t : {DType::F32, DType::MXFP4}) {
    const int E = 4, hidden = 64, ffn = 96, first = 1, count = 3;
    const Layer L(t, E, hidden, ffn, rng);
    std::vector<float> bias[3];  // gate, up, down: [E, ffn or hidden], as GGUF stores them
    for (int b = 0; b < 3; ++b) {
      bias[b].resize(size_t(E * (b == 2 ? hidden : ffn)));
      for (auto& v : bias[b]) v = nd(rng);
    }
    MoeExperts ex = L.held(first, count);
    ex.gate_bias = bias[0].data();
    ex.up_bias = bias[1].data();
    ex.down_bias = bias[2].data();
    ex.act = MoeAct::kSwigluOai;
    const int64_t n = 5;
    const int k = 2;
    const std::vector<int32_t> ids = {0, 1, 2, 3, 3, 1, 0, 2, 1, 2};
    const std::vector<float> w = {.6f, .4f, .7f, .3f, .5f, .5f, .9f, .1f, .2f, .8f};
    const auto x = random_x(n, hidden, rng);
    MoeScratch s;
    std::vector<float> out(size_t(n * hidden), NAN);
    moe_ffn(ex, x.data(), n, k, ids.data(), w.data(), out.data(), s, nullptr);
    double err2 = 0, ref2 = 0;
    for (int64_t tok = 0; tok < n; ++tok) {
      std::vector<double> want(size_t(hidden), 0.0);
      for (int j = 0; j < k; ++j) {
        const size_t e = size_t(ids[size_t(tok * k + j)]);
        if (e < size_t(first)) continue;  // not held
        const float* b[3] = {bias[0].data() + e * ffn, bias[1].data() + e * ffn,
                             bias[2].data() + e * hidden};
        const auto y =
            oai_expert(L.gate.views[e], L.up.views[e], L.down.views[e], b, x.data() + tok * hidden);
        for (int64_t c = 0; c < hidden; ++c)
          want[size_t(c)] += w[size_t(tok * k + j)] * y[size_t(c)];
      }
      for (int64_t c = 0; c < hidden; ++c) {
        const double got = out[size_t(tok * hidden + c)], e = got - want[size_t(c)];
        ASSERT_TRUE(std::isfinite(got));
        if (t == DType::F32) {
          ASSERT_LE(std::fabs(e), 1e-4 * (std::fabs(want[size_t(c)]) + 1.0));
        }
        err2 += e * e;
        ref2 += want[size_t(c)] * want[size_t(c)];
      }
    }
    EXPECT_LT(std::sqrt(err2 / ref2), t == DType::F32 ? 1e-5 : 0.03) << dtype_name(t);
  }
}

TEST(MoeFfn, RoutedBatchAndHeldRangesAddUp) {
  std::mt19937 rng(5);
  const int E = 6, k = 2, hidden = 64, ffn = 32;
  const int64_t n = 37;
  const Layer L(DType::Q8_0, E, hidden, ffn, rng);
  const auto x = random_x(n, hidden, rng);
  const auto logits = random_x(n, E, rng);
  std::vector<int32_t> ids(size_t(n * k));
  std::vector<float> w(size_t(n * k));
  moe_route(MoeRouteConfig{E, k, true}, logits.data(), n, ids.data(), w.data());
  expect_matches(L, DType::Q8_0, x, n, k, ids, w, 0, E, "routed");
  expect_matches(L, DType::Q8_0, x, n, k, ids, w, 2, 3, "experts 2-4");

  MoeScratch s;
  std::vector<float> whole(size_t(n * hidden)), part(size_t(n * hidden)),
      sum(size_t(n * hidden), 0.f);
  moe_ffn(L.held(0, E), x.data(), n, k, ids.data(), w.data(), whole.data(), s, nullptr);
  for (auto [first, count] : {std::pair{0, 2}, std::pair{2, 3}, std::pair{5, 1}}) {
    moe_ffn(L.held(first, count), x.data(), n, k, ids.data(), w.data(), part.data(), s, nullptr);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  for (size_t i = 0; i < sum.size(); ++i)
    EXPECT_NEAR(sum[i], whole[i], 1e-5 * (std::fabs(whole[i]) + 1)) << i;
}

// Odd shapes: expert counts that are multiples of nothing, k = 1..4, batches
// of 1 to 37 tokens routed by moe_route (so some experts get no token), odd
// widths where the type allows them (K-quants: rows of 256).
TEST(MoeFfn, OddShapesSweep) {
  std::mt19937 rng(19);
  int unrouted = 0;
  for (DType t : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_1, DType::Q6_K}) {
    const int hidden = is_kquant(t) ? 256 : (is_plain(t) ? 24 : 32);
    const int ffn = is_kquant(t) ? 256 : (is_plain(t) ? 40 : 64);
    for (int E : {1, 3, 5, 7, 13}) {
      const Layer L(t, E, hidden, ffn, rng);
      for (int k = 1; k <= std::min(E, 4); ++k)
        for (int64_t n : {int64_t(1), int64_t(2), int64_t(7), int64_t(37)}) {
          if (is_kquant(t) && n > 7) continue;  // the reference is slow at 256 x 256
          const auto x = random_x(n, hidden, rng);
          const auto logits = random_x(n, E, rng);
          std::vector<int32_t> ids(size_t(n * k));
          std::vector<float> w(size_t(n * k));
          moe_route(MoeRouteConfig{E, k, k % 2 == 0}, logits.data(), n, ids.data(), w.data());
          std::vector<bool> used(size_t(E), false);
          for (int32_t id : ids) used[size_t(id)] = true;
          unrouted += int(std::count(used.begin(), used.end(), false));
          const std::string what = std::to_string(E) + " experts, k " + std::to_string(k) +
                                   ", " + std::to_string(n) + " tokens";
          expect_matches(L, t, x, n, k, ids, w, 0, E, what.c_str());
        }
    }
  }
  EXPECT_GT(unrouted, 0) << "no case left an expert without tokens";
}

TEST(MoeFfn, RefusesBadIdsAndStacks) {
  std::mt19937 rng(3);
  const Layer L(DType::F32, 4, 32, 32, rng);
  const auto x = random_x(1, 32, rng);
  std::vector<float> out(32), w = {0.5f, 0.5f};
  MoeScratch s;
  std::vector<int32_t> bad = {1, 4};
  EXPECT_THROW(moe_ffn(L.held(0, 4), x.data(), 1, 2, bad.data(), w.data(), out.data(), s, nullptr),
               Error);
  bad = {-1, 0};
  EXPECT_THROW(moe_ffn(L.held(0, 4), x.data(), 1, 2, bad.data(), w.data(), out.data(), s, nullptr),
               Error);
  MoeExperts wrong = L.held(0, 4);
  wrong.down = wrong.down.subspan(0, 3);
  const std::vector<int32_t> ok = {0, 1};
  EXPECT_THROW(moe_ffn(wrong, x.data(), 1, 2, ok.data(), w.data(), out.data(), s, nullptr), Error);
  const Layer W(DType::F32, 2, 32, 64, rng);
  MoeExperts mixed = W.held(0, 2);
  mixed.up = mixed.down;  // up [32 x 64] where [64 x 32] is needed
  EXPECT_THROW(moe_ffn(mixed, x.data(), 1, 2, ok.data(), w.data(), out.data(), s, nullptr), Error);
}

// An expert group (docs/expert-groups.md): the leader's moe_ffn over the
// lowest range, then each member's moe_expert_rows added by moe_combine in
// range order, gives the bits of moe_ffn over every expert (memcmp, not a
// tolerance). With a pool and without, quantised and plain weights, 2 and
// 4 parts, and a batch where some tokens choose nothing in the leader's range.
TEST(MoeCombine, SplitRangesGiveTheUnshardedBits) {
  std::mt19937 rng(23);
  const int E = 8, k = 3, hidden = 64, ffn = 32;
  for (DType t : {DType::F32, DType::BF16, DType::Q8_0}) {
    const Layer L(t, E, hidden, ffn, rng);
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(33)}) {
      const auto x = random_x(n, hidden, rng);
      const auto logits = random_x(n, E, rng);
      std::vector<int32_t> ids(size_t(n * k));
      std::vector<float> w(size_t(n * k));
      moe_route(MoeRouteConfig{E, k, true}, logits.data(), n, ids.data(), w.data());
      std::unique_ptr<ThreadPool> pools[] = {nullptr, std::make_unique<ThreadPool>(3)};
      for (auto& pool : pools) {
        MoeScratch s;
        std::vector<float> whole(size_t(n * hidden));
        moe_ffn(L.held(0, E), x.data(), n, k, ids.data(), w.data(), whole.data(), s, pool.get());
        for (const std::vector<int>& cuts :
             {std::vector<int>{0, 3, E}, std::vector<int>{0, 1, 2, 6, E}}) {
          std::vector<float> out(size_t(n * hidden), NAN);
          moe_ffn(L.held(0, cuts[1]), x.data(), n, k, ids.data(), w.data(), out.data(), s,
                  pool.get());
          for (size_t m = 1; m + 1 < cuts.size(); ++m) {
            const int first = cuts[m], count = cuts[m + 1] - cuts[m];
            std::vector<float> y(size_t(n * k * hidden), NAN);
            MoeScratch ms;
            moe_expert_rows(L.held(first, count), x.data(), n, k, ids.data(), y.data(), ms,
                            pool.get());
            moe_combine(E, first, count, n, k, ids.data(), w.data(), y.data(), hidden, out.data(),
                        s);
          }
          EXPECT_EQ(0, std::memcmp(out.data(), whole.data(), out.size() * sizeof(float)))
              << dtype_name(t) << ", " << n << " tokens, " << cuts.size() - 1 << " parts";
        }
      }
    }
  }
}

TEST(MoeCombine, RefusesBadIdsAndRanges) {
  std::vector<float> y(64, 1.f), out(32, 0.f), w = {0.5f, 0.5f};
  MoeScratch s;
  const std::vector<int32_t> bad = {1, 4}, ok = {0, 1};
  EXPECT_THROW(moe_combine(4, 2, 2, 1, 2, bad.data(), w.data(), y.data(), 32, out.data(), s),
               Error);
  EXPECT_THROW(moe_combine(4, 3, 2, 1, 2, ok.data(), w.data(), y.data(), 32, out.data(), s), Error);
  moe_combine(4, 1, 3, 1, 2, ok.data(), w.data(), y.data(), 32, out.data(), s);
  EXPECT_EQ(out[0], 0.5f);  // only expert 1's term: slot 1, weight 0.5
}

TEST(MoeFfn, SigmoidGatedAdd) {
  const std::vector<float> y = {1, 2, 3, 4}, g = {0.f, 100.f};
  std::vector<float> out = {1, 1, 1, 1};
  add_sigmoid_gated(y.data(), g.data(), 2, 2, out.data());
  EXPECT_FLOAT_EQ(out[0], 1.5f);
  EXPECT_FLOAT_EQ(out[1], 2.f);
  EXPECT_FLOAT_EQ(out[2], 4.f);
  EXPECT_FLOAT_EQ(out[3], 5.f);
}

}  // namespace
}  // namespace kvasir::cpu
