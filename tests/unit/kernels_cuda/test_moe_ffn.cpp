// The MoE grouped expert GEMM and combine against plain loops, and the
// whole expert FFN (router, moe_ffn) against cpu::moe_route + cpu::moe_ffn
// on the same bf16 weights. Tolerances (docs/cuda-kernels.md):
//   grouped GEMM: 1e-6 + 1e-4·Σ|a·b| against double on the same bf16 inputs;
//   combine: 1e-6·Σ|w·y| (the CPU's order; exact unless the host compiler
//     contracts to FMA);
//   end to end: 1e-5 + 4e-3·Σ_j |w_j| Σ_f |down[c, f]·act[f]| (the GPU
//     rounds the SwiGLU output to bf16, the CPU does not).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "base/tensor.h"
#include "kernels/cpu/moe.h"
#include "kernels/cuda/moe_combine.h"
#include "kernels/cuda/moe_ffn.h"
#include "kernels/cuda/moe_gemm.h"
#include "kernels/cuda/moe_group.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/paged_kv_layout.h"
#include "tests/unit/kernels_cuda/cuda_test.h"
#include "tests/unit/kernels_cuda/moe_test_util.h"

namespace kvasir::cuda {
namespace {

using test::as_bf;
using test::DeviceBuffer;
using test::DeviceGroup;
using test::host_group;
using test::HostGroup;
using test::random_bf16;
using test::random_ids;
using test::Shape;
using test::shapes;

// ---- grouped GEMM ---------------------------------------------------------------

TEST(CudaMoeGemm, MatchesDoubleOnTheSameBf16Inputs) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(13);
  std::vector<Shape> all = shapes();
  all.push_back({700, 128, 8});
  // (n_out, k): neither a multiple of the 64-wide output tile nor of the
  // 32-wide k step, and a single output.
  for (auto [n_out, k] : {std::pair<int64_t, int64_t>{72, 200}, {200, 72}, {1, 33}}) {
    for (const Shape& s : all) {
      const bool skewed = s.n == 130;  // long runs of rows per expert too
      const std::vector<int32_t> ids = random_ids(s, skewed, rng);
      const std::vector<uint16_t> x = random_bf16(size_t(s.n * k), rng);
      const std::vector<uint16_t> w = random_bf16(size_t(s.n_experts * n_out * k), rng);
      const HostGroup hg = host_group(ids, s, x, k);
      DeviceBuffer<int32_t> di(ids), err(std::vector<int32_t>{0});
      DeviceBuffer<uint16_t> dx(x), dw(w);
      DeviceGroup g(s, k);
      KV_CUDA_OK(launch_moe_group(g.args(s, di.get(), dx.get(), k, err.get()), nullptr));
      const int64_t rows = s.n * s.top_k;
      DeviceBuffer<float> dy(size_t(rows * n_out));
      MoeGemmArgs m;
      m.xs = as_bf(g.xs.get());
      m.w = as_bf(dw.get());
      m.offsets = g.offsets.get();
      m.tile_expert = g.tile_expert.get();
      m.tile_row = g.tile_row.get();
      m.n_tiles = moe_max_tiles(rows, s.n_experts);
      m.rows = rows;
      m.n_experts = s.n_experts;
      m.n_out = n_out;
      m.k = k;
      m.y = dy.get();
      m.error = err.get();
      KV_CUDA_OK(launch_moe_gemm(m, nullptr));
      KV_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> y = dy.read();
      SCOPED_TRACE(testing::Message() << "n " << s.n << " experts " << s.n_experts << " k "
                                      << s.top_k << " gemm " << n_out << "x" << k);
      EXPECT_EQ(kErrorNone, err.read()[0]);
      double worst = 0;
      for (int32_t e = 0; e < s.n_experts; ++e) {
        for (int32_t r = hg.offsets[size_t(e)]; r < hg.offsets[size_t(e) + 1]; ++r) {
          for (int64_t c = 0; c < n_out; ++c) {
            double want = 0, mag = 0;
            for (int64_t kk = 0; kk < k; ++kk) {
              const double p = double(bf16_to_f32(hg.xs[size_t(r * k + kk)])) *
                               bf16_to_f32(w[size_t((e * n_out + c) * k + kk)]);
              want += p;
              mag += std::fabs(p);
            }
            const double got = y[size_t(r * n_out + c)];
            worst = std::max(worst, std::fabs(got - want) / (1e-6 + 1e-4 * mag));
          }
        }
      }
      EXPECT_LE(worst, 1.0);
    }
  }
}

// ---- combine --------------------------------------------------------------------

// out[t] in the CPU's order: ascending expert, equal experts in j order;
// mag[t, c] = Σ |w·y| for the tolerance.
void host_combine(const std::vector<float>& y, const std::vector<int32_t>& ids,
                  const std::vector<int32_t>& pos, const std::vector<float>& w, const Shape& s,
                  int64_t hidden, std::vector<float>& out, std::vector<double>& mag) {
  out.assign(size_t(s.n * hidden), 0.f);
  mag.assign(out.size(), 0.0);
  for (int64_t t = 0; t < s.n; ++t) {
    std::vector<int32_t> js(size_t(s.top_k));
    for (int32_t j = 0; j < s.top_k; ++j) js[size_t(j)] = j;
    std::stable_sort(js.begin(), js.end(), [&](int32_t a, int32_t b) {
      return ids[size_t(t * s.top_k + a)] < ids[size_t(t * s.top_k + b)];
    });
    for (int32_t j : js) {
      const int32_t p = pos[size_t(t * s.top_k + j)];
      if (p < 0) continue;
      const float wj = w[size_t(t * s.top_k + j)];
      for (int64_t c = 0; c < hidden; ++c) {
        const float term = wj * y[size_t(p * hidden + c)];
        out[size_t(t * hidden + c)] += term;
        mag[size_t(t * hidden + c)] += std::fabs(double(term));
      }
    }
  }
}

TEST(CudaMoeCombine, AddsInTheCpuOrder) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(17);
  const int64_t hidden = 200;
  for (const Shape& s : shapes()) {
    for (bool skewed : {false, true}) {  // skewed: repeated experts in a token
      // accumulate: out += the sum (the residual add); else out is
      // overwritten (it starts as NaN to show that).
      const bool accumulate = skewed == (s.n % 2 == 1);
      std::vector<int32_t> ids = random_ids(s, skewed, rng);
      if (s.n == 17) ids[4] = -1;  // a dropped pair
      const HostGroup hg = host_group(ids, s, std::vector<uint16_t>(size_t(s.n)), 1);
      const int64_t rows = s.n * s.top_k;
      const std::vector<float> y = test::random_floats(size_t(rows * hidden), rng, -4.f, 4.f);
      const std::vector<float> w = test::random_floats(size_t(rows), rng, 0.f, 1.f);
      const std::vector<float> init =
          accumulate ? test::random_floats(size_t(s.n * hidden), rng, -8.f, 8.f)
                     : std::vector<float>(size_t(s.n * hidden), std::nanf(""));
      std::vector<float> want;
      std::vector<double> mag;
      host_combine(y, ids, hg.pos, w, s, hidden, want, mag);
      if (accumulate) {
        for (size_t q = 0; q < want.size(); ++q) {
          want[q] = init[q] + want[q];
          mag[q] += std::fabs(double(init[q]));
        }
      }
      DeviceBuffer<float> dy(y), dw(w), dout(init);
      DeviceBuffer<int32_t> di(ids), dpos(hg.pos), err(std::vector<int32_t>{0});
      MoeCombineArgs c;
      c.y = dy.get();
      c.rows = rows;
      c.ids = di.get();
      c.pos = dpos.get();
      c.weights = dw.get();
      c.n = s.n;
      c.top_k = s.top_k;
      c.hidden = hidden;
      c.out = dout.get();
      c.accumulate = accumulate;
      c.error = err.get();
      KV_CUDA_OK(launch_moe_combine(c, nullptr));
      KV_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> got = dout.read();
      SCOPED_TRACE(testing::Message()
                   << "n " << s.n << " experts " << s.n_experts << " k " << s.top_k << " skewed "
                   << skewed << " accumulate " << accumulate);
      EXPECT_EQ(0u, test::count_nan(got));
      double worst = 0;
      for (size_t q = 0; q < got.size(); ++q)
        worst = std::max(worst, std::fabs(double(got[q]) - want[q]) / (1e-30 + 1e-6 * mag[q]));
      EXPECT_LE(worst, 1.0);
      EXPECT_EQ(kErrorNone, err.read()[0]);
    }
  }
}

// ---- the whole expert FFN against cpu::moe_ffn ----------------------------------

TEST(CudaMoeFfn, RouterToCombineMatchesCpuMoeFfn) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(19);
  for (auto [hidden, ffn] : {std::pair<int64_t, int64_t>{72, 200}, {200, 72}}) {
    for (const Shape& s : shapes()) {
      // bf16-exact inputs and weights, shared by both sides.
      const std::vector<float> x = test::from_bf16(random_bf16(size_t(s.n * hidden), rng, 2.f));
      const std::vector<float> logits =
          test::random_floats(size_t(s.n * s.n_experts), rng, -3.f, 3.f);
      const size_t stack = size_t(s.n_experts * ffn * hidden);
      const std::vector<uint16_t> wg = random_bf16(stack, rng, 0.2f);
      const std::vector<uint16_t> wu = random_bf16(stack, rng, 0.2f);
      const std::vector<uint16_t> wd = random_bf16(stack, rng, 0.2f);

      // Device: router, then the FFN.
      DeviceBuffer<float> dl(logits), dweights(size_t(s.n * s.top_k)), dout(size_t(s.n * hidden));
      DeviceBuffer<int32_t> dids(size_t(s.n * s.top_k)), err(std::vector<int32_t>{0});
      DeviceBuffer<uint16_t> dx(test::to_bf16(x)), dg(wg), du(wu), dd(wd);
      MoeRouteArgs r;
      r.logits = dl.get();
      r.n = s.n;
      r.n_experts = s.n_experts;
      r.top_k = s.top_k;
      r.norm_topk = s.top_k > 1;
      r.ids = dids.get();
      r.weights = dweights.get();
      r.error = err.get();
      KV_CUDA_OK(launch_moe_route(r, nullptr));
      const size_t ws_bytes = moe_ffn_workspace_bytes(s.n, s.top_k, s.n_experts, hidden, ffn);
      ASSERT_GT(ws_bytes, 0u);
      DeviceBuffer<uint8_t> ws(ws_bytes);
      MoeFfnArgs a;
      a.x = as_bf(dx.get());
      a.ids = dids.get();
      a.weights = dweights.get();
      a.n = s.n;
      a.top_k = s.top_k;
      a.n_experts = s.n_experts;
      a.hidden = hidden;
      a.ffn = ffn;
      a.gate = as_bf(dg.get());
      a.up = as_bf(du.get());
      a.down = as_bf(dd.get());
      a.out = dout.get();
      a.workspace = ws.get();
      a.workspace_bytes = ws_bytes;
      a.error = err.get();
      KV_CUDA_OK(launch_moe_ffn(a, nullptr));
      KV_CUDA_OK(cudaDeviceSynchronize());
      SCOPED_TRACE(testing::Message() << "n " << s.n << " experts " << s.n_experts << " k "
                                      << s.top_k << " hidden " << hidden << " ffn " << ffn);
      EXPECT_EQ(kErrorNone, err.read()[0]);

      // CPU: the same route, then moe_ffn on the same bf16 weights with the
      // device's weights (equal ids; weights within an f32 ulp or so).
      std::vector<int32_t> want_ids(size_t(s.n * s.top_k));
      std::vector<float> cpu_w(want_ids.size());
      cpu::moe_route({s.n_experts, s.top_k, s.top_k > 1}, logits.data(), s.n, want_ids.data(),
                     cpu_w.data());
      const std::vector<int32_t> ids = dids.read();
      ASSERT_EQ(want_ids, ids);
      const std::vector<float> w = dweights.read();
      auto views = [&](const std::vector<uint16_t>& st, int64_t rows, int64_t cols) {
        std::vector<TensorView> v(size_t(s.n_experts));
        for (int32_t e = 0; e < s.n_experts; ++e) {
          TensorView& t = v[size_t(e)];
          t.type = DType::BF16;
          t.n_dims = 2;
          t.ne[0] = cols;
          t.ne[1] = rows;
          t.data = st.data() + size_t(e * rows * cols);
          t.nbytes = uint64_t(rows * cols) * 2;
        }
        return v;
      };
      const std::vector<TensorView> vg = views(wg, ffn, hidden), vu = views(wu, ffn, hidden),
                                    vd = views(wd, hidden, ffn);
      cpu::MoeExperts experts{s.n_experts, 0, vg, vu, vd};
      std::vector<float> want(size_t(s.n * hidden));
      cpu::MoeScratch scratch;
      cpu::moe_ffn(experts, x.data(), s.n, s.top_k, ids.data(), w.data(), want.data(), scratch,
                   nullptr);

      // Scale of each output: Σ_j |w_j| Σ_f |down[c, f]·act[f]| in double.
      std::vector<double> mag(want.size(), 0.0);
      std::vector<double> act(static_cast<size_t>(ffn));
      for (int64_t t = 0; t < s.n; ++t) {
        for (int32_t j = 0; j < s.top_k; ++j) {
          const int64_t e = ids[size_t(t * s.top_k + j)];
          for (int64_t f = 0; f < ffn; ++f) {
            double g = 0, u = 0;
            for (int64_t h = 0; h < hidden; ++h) {
              const double xv = x[size_t(t * hidden + h)];
              g += xv * bf16_to_f32(wg[size_t((e * ffn + f) * hidden + h)]);
              u += xv * bf16_to_f32(wu[size_t((e * ffn + f) * hidden + h)]);
            }
            act[size_t(f)] = g / (1.0 + std::exp(-g)) * u;
          }
          for (int64_t c = 0; c < hidden; ++c) {
            double m = 0;
            for (int64_t f = 0; f < ffn; ++f)
              m += std::fabs(bf16_to_f32(wd[size_t((e * hidden + c) * ffn + f)]) * act[size_t(f)]);
            mag[size_t(t * hidden + c)] += std::fabs(w[size_t(t * s.top_k + j)]) * m;
          }
        }
      }
      const std::vector<float> got = dout.read();
      double worst = 0;
      for (size_t q = 0; q < got.size(); ++q) {
        if (std::isnan(got[q])) worst = INFINITY;
        worst = std::max(worst, std::fabs(double(got[q]) - want[q]) / (1e-5 + 4e-3 * mag[q]));
      }
      EXPECT_LE(worst, 1.0);
    }
  }
}

}  // namespace
}  // namespace kvasir::cuda
