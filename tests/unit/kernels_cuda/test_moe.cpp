// The MoE kernels' argument checks (all launchers, CPU only), the router
// against cpu::moe_route and the grouping against the CPU's counting sort
// (moe_test_util.h). test_moe_ffn.cpp: the grouped GEMM, the combine and the
// whole expert FFN. Tolerances (docs/cuda-kernels.md):
//   route: ids exact; weights 1e-12 + 1e-6·|want| (double exp and sums in
//     another order, then rounded to f32);
//   group: offsets, slots, pos, tiles and gathered rows exact.
// The argument checks run on every machine (they never reach the device).
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

// ---- argument checks: CPU only ---------------------------------------------

TEST(CudaMoeLaunchers, RejectBadArgumentsWithoutTouchingTheDevice) {
  float f = 0.f;
  int32_t i = 0;
  uint16_t h = 0;

  MoeRouteArgs r;
  r.n = 2;
  r.n_experts = 8;
  r.top_k = 2;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_route(r, nullptr));  // null pointers
  r.logits = &f;
  r.ids = &i;
  r.weights = &f;
  r.top_k = 9;  // more than the experts
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_route(r, nullptr));
  r.top_k = 0;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_route(r, nullptr));
  r.n_experts = kMoeMaxExperts + 1;
  r.top_k = 2;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_route(r, nullptr));
  r.n_experts = 128;
  r.top_k = kMoeMaxTopK + 1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_route(r, nullptr));
  r.top_k = 2;
  r.n = int64_t(1) << 40;  // past the grid
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_route(r, nullptr));
  r.n = -1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_route(r, nullptr));
  r = MoeRouteArgs{};
  r.n_experts = 8;
  r.top_k = 2;  // n = 0: nothing to do, null pointers allowed
  EXPECT_EQ(cudaSuccess, launch_moe_route(r, nullptr));

  MoeGroupArgs g;
  g.n = 3;
  g.top_k = 2;
  g.n_experts = 8;
  g.hidden = 16;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_group(g, nullptr));  // null pointers
  g.ids = &i;
  g.x = as_bf(&h);
  g.offsets = g.slots = g.pos = g.tile_expert = g.tile_row = &i;
  g.xs = as_bf(&h);
  g.n = int64_t(INT32_MAX) / 2 + 1;  // n·top_k past int32
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_group(g, nullptr));
  g.n = 1 << 20;
  g.hidden = int64_t(1) << 40;  // n·top_k·hidden overflows
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_group(g, nullptr));
  g.n = 3;
  g.hidden = 0;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_group(g, nullptr));
  g.hidden = 16;
  g.n_experts = 0;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_group(g, nullptr));
  g.n_experts = 8;
  g.top_k = kMoeMaxTopK + 1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_group(g, nullptr));
  g.top_k = 2;
  g.offsets = nullptr;  // needed even for n = 0
  g.n = 0;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_group(g, nullptr));

  MoeGemmArgs m;
  m.n_tiles = 4;
  m.rows = 6;
  m.n_experts = 8;
  m.n_out = 72;
  m.k = 200;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_gemm(m, nullptr));  // null pointers
  m.xs = m.w = as_bf(&h);
  m.offsets = m.tile_expert = m.tile_row = &i;
  m.y = &f;
  m.n_out = int64_t(1) << 30;
  m.k = int64_t(1) << 30;  // one expert overflows
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_gemm(m, nullptr));
  m.k = 1 << 10;
  m.n_out = 1 << 24;  // the stack (8 experts) still fits 2^50, the grid does not
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_gemm(m, nullptr));
  m.n_out = 72;
  m.k = 0;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_gemm(m, nullptr));
  m.k = 200;
  m.n_experts = kMoeMaxExperts + 1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_gemm(m, nullptr));
  m.n_experts = 8;
  m.n_tiles = -1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_gemm(m, nullptr));
  m = MoeGemmArgs{};
  m.n_experts = 8;
  m.n_out = 72;
  m.k = 200;  // no tiles, no rows: nothing to do
  EXPECT_EQ(cudaSuccess, launch_moe_gemm(m, nullptr));

  MoeCombineArgs c;
  c.rows = 6;
  c.n = 3;
  c.top_k = 2;
  c.hidden = 72;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_combine(c, nullptr));  // null pointers
  c.y = c.weights = c.out = &f;
  c.ids = c.pos = &i;
  c.top_k = 0;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_combine(c, nullptr));
  c.top_k = 2;
  c.hidden = int64_t(1) << 49;  // n·hidden overflows
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_combine(c, nullptr));
  c.hidden = 72;
  c.n = 0;
  EXPECT_EQ(cudaSuccess, launch_moe_combine(c, nullptr));

  EXPECT_GT(moe_ffn_workspace_bytes(3, 2, 8, 72, 200), 0u);
  EXPECT_EQ(0u, moe_ffn_workspace_bytes(3, 0, 8, 72, 200));
  EXPECT_EQ(0u, moe_ffn_workspace_bytes(3, 2, kMoeMaxExperts + 1, 72, 200));
  EXPECT_EQ(0u, moe_ffn_workspace_bytes(int64_t(1) << 31, 2, 8, 72, 200));
  EXPECT_EQ(0u, moe_ffn_workspace_bytes(1 << 20, 8, 8, int64_t(1) << 40, 200));
  MoeFfnArgs ffn;
  ffn.n = 3;
  ffn.top_k = 2;
  ffn.n_experts = 8;
  ffn.hidden = 72;
  ffn.ffn = 200;
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_ffn(ffn, nullptr));  // null pointers
  ffn.x = ffn.gate = ffn.up = ffn.down = as_bf(&h);
  ffn.ids = &i;
  ffn.weights = ffn.out = &f;
  ffn.workspace = &f;
  ffn.workspace_bytes = moe_ffn_workspace_bytes(3, 2, 8, 72, 200) - 1;  // short
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_ffn(ffn, nullptr));
  ffn.workspace_bytes += 1;
  ffn.hidden = int64_t(1) << 26;
  ffn.ffn = int64_t(1) << 26;  // the expert stacks overflow
  EXPECT_EQ(cudaErrorInvalidValue, launch_moe_ffn(ffn, nullptr));
  ffn.hidden = 72;
  ffn.ffn = 200;
  ffn.n = 0;  // nothing to do
  EXPECT_EQ(cudaSuccess, launch_moe_ffn(ffn, nullptr));
}

// ---- router ---------------------------------------------------------------------

TEST(CudaMoeRoute, MatchesCpuOverShapesAndTies) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(7);
  for (const Shape& s : shapes()) {
    for (bool ties : {false, true}) {
      for (bool norm : {false, true}) {
        std::vector<float> logits(size_t(s.n * s.n_experts));
        std::normal_distribution<float> d(0.f, 2.f);
        // Ties: four values only, so most ranks are decided by the id.
        for (float& v : logits) v = ties ? float(int(rng() % 4)) * 0.5f - 1.f : d(rng);
        cpu::MoeRouteConfig cfg{s.n_experts, s.top_k, norm};
        std::vector<int32_t> want_ids(size_t(s.n * s.top_k));
        std::vector<float> want_w(want_ids.size());
        cpu::moe_route(cfg, logits.data(), s.n, want_ids.data(), want_w.data());

        DeviceBuffer<float> dl(logits), dw(want_w.size());
        DeviceBuffer<int32_t> di(want_ids.size()), err(std::vector<int32_t>{0});
        MoeRouteArgs a;
        a.logits = dl.get();
        a.n = s.n;
        a.n_experts = s.n_experts;
        a.top_k = s.top_k;
        a.norm_topk = norm;
        a.ids = di.get();
        a.weights = dw.get();
        a.error = err.get();
        KV_CUDA_OK(launch_moe_route(a, nullptr));
        KV_CUDA_OK(cudaDeviceSynchronize());
        SCOPED_TRACE(testing::Message() << "n " << s.n << " experts " << s.n_experts << " k "
                                        << s.top_k << " ties " << ties << " norm " << norm);
        EXPECT_EQ(want_ids, di.read());
        EXPECT_LE(test::worst_error(dw.read(), want_w, 1e-12, 1e-6), 1.0);
        EXPECT_EQ(kErrorNone, err.read()[0]);
      }
    }
  }
}

TEST(CudaMoeRoute, NonFiniteLogitZeroesTheRowAndFlags) {
  KV_REQUIRE_CUDA();
  const Shape s{4, 8, 2};
  std::mt19937 rng(3);
  std::vector<float> logits = test::random_floats(size_t(s.n * s.n_experts), rng, -3.f, 3.f);
  logits[1 * 8 + 5] = std::numeric_limits<float>::quiet_NaN();
  logits[2 * 8 + 0] = std::numeric_limits<float>::infinity();
  DeviceBuffer<float> dl(logits), dw(size_t(s.n * s.top_k));
  DeviceBuffer<int32_t> di(size_t(s.n * s.top_k)), err(std::vector<int32_t>{0});
  MoeRouteArgs a;
  a.logits = dl.get();
  a.n = s.n;
  a.n_experts = s.n_experts;
  a.top_k = s.top_k;
  a.norm_topk = true;
  a.ids = di.get();
  a.weights = dw.get();
  a.error = err.get();
  KV_CUDA_OK(launch_moe_route(a, nullptr));
  KV_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<int32_t> ids = di.read();
  const std::vector<float> w = dw.read();
  EXPECT_EQ(kErrorRouterLogit, err.read()[0]);
  for (int64_t t : {1, 2}) {
    EXPECT_EQ(0, ids[size_t(t * 2)]);
    EXPECT_EQ(1, ids[size_t(t * 2 + 1)]);
    EXPECT_EQ(0.f, w[size_t(t * 2)]);
    EXPECT_EQ(0.f, w[size_t(t * 2 + 1)]);
  }
  for (int64_t t : {0, 3}) {  // the finite rows as the CPU routes them
    int32_t want_ids[2];
    float want_w[2];
    cpu::moe_route({8, 2, true}, logits.data() + t * 8, 1, want_ids, want_w);
    EXPECT_EQ(want_ids[0], ids[size_t(t * 2)]);
    EXPECT_EQ(want_ids[1], ids[size_t(t * 2 + 1)]);
    EXPECT_NEAR(want_w[0], w[size_t(t * 2)], 1e-6 * want_w[0]);
    EXPECT_NEAR(want_w[1], w[size_t(t * 2 + 1)], 1e-6 * want_w[1]);
  }
}

// ---- grouping -------------------------------------------------------------------

TEST(CudaMoeGroup, MatchesTheCountingSortExactly) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(11);
  std::vector<Shape> all = shapes();
  all.push_back({700, 128, 8});  // 5600 pairs: more than one pass of every loop
  const int64_t hidden = 72;
  for (const Shape& s : all) {
    for (bool skewed : {false, true}) {
      const std::vector<int32_t> ids = random_ids(s, skewed, rng);
      const std::vector<uint16_t> x = random_bf16(size_t(s.n * hidden), rng);
      const HostGroup want = host_group(ids, s, x, hidden);
      DeviceBuffer<int32_t> di(ids), err(std::vector<int32_t>{0});
      DeviceBuffer<uint16_t> dx(x);
      DeviceGroup g(s, hidden);
      KV_CUDA_OK(launch_moe_group(g.args(s, di.get(), dx.get(), hidden, err.get()), nullptr));
      KV_CUDA_OK(cudaDeviceSynchronize());
      SCOPED_TRACE(testing::Message() << "n " << s.n << " experts " << s.n_experts << " k "
                                      << s.top_k << " skewed " << skewed);
      EXPECT_EQ(want.offsets, g.offsets.read());
      EXPECT_EQ(want.slots, g.slots.read());
      EXPECT_EQ(want.pos, g.pos.read());
      EXPECT_EQ(want.tile_expert, g.tile_expert.read());
      EXPECT_EQ(want.tile_row, g.tile_row.read());
      EXPECT_EQ(want.xs, g.xs.read());
      EXPECT_EQ(kErrorNone, err.read()[0]);
    }
  }
}

TEST(CudaMoeGroup, BadIdsAreFlaggedAndDropped) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(5);
  const Shape s{17, 8, 2};
  const int64_t hidden = 40;
  std::vector<int32_t> ids = random_ids(s, false, rng);
  ids[3] = -1;
  ids[10] = 8;
  ids[33] = 1 << 30;
  const std::vector<uint16_t> x = random_bf16(size_t(s.n * hidden), rng);
  const HostGroup want = host_group(ids, s, x, hidden);
  ASSERT_EQ(-1, want.pos[3]);
  DeviceBuffer<int32_t> di(ids), err(std::vector<int32_t>{0});
  DeviceBuffer<uint16_t> dx(x);
  DeviceGroup g(s, hidden);
  KV_CUDA_OK(launch_moe_group(g.args(s, di.get(), dx.get(), hidden, err.get()), nullptr));
  KV_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(kErrorExpertId, err.read()[0]);
  EXPECT_EQ(want.offsets, g.offsets.read());
  EXPECT_EQ(want.slots, g.slots.read());
  EXPECT_EQ(want.pos, g.pos.read());
  EXPECT_EQ(want.tile_expert, g.tile_expert.read());
  EXPECT_EQ(want.xs, g.xs.read());
}

}  // namespace
}  // namespace kvasir::cuda
