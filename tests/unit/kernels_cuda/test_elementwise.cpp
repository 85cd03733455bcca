// The row-wise CUDA kernels against plain CPU references: dequant (GGUF ->
// bf16), embedding gather, RMSNorm + residual, RoPE, SwiGLU, row gather.
// Tolerances (documented in docs/cuda-kernels.md):
//   bf16 outputs: |got - want| <= 1e-5 + 4e-3 * |want| (half a bf16 ulp is
//   2^-9 relative, plus f32 noise); f32 outputs: 1e-5 + 1e-5 * |want|
//   (RoPE: sincosf and FMA contraction, a few ulp); copies: exact.
// The argument checks run on every machine (they never reach the device).
#include <gtest/gtest.h>

#include <limits>

#include "base/dtype.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/dequant.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gather_rows.h"
#include "kernels/cuda/paged_kv_layout.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"
#include "tests/unit/kernels/reference.h"
#include "tests/unit/kernels_cuda/cuda_test.h"

namespace kvasir::cuda {
namespace {

using test::DeviceBuffer;

__nv_bfloat16* as_bf(uint16_t* p) {
  return reinterpret_cast<__nv_bfloat16*>(p);
}

// ---- argument checks: CPU only ---------------------------------------------

TEST(CudaLaunchers, RejectBadArgumentsWithoutTouchingTheDevice) {
  float dummy = 0.f;
  DequantArgs dq;
  dq.type = DType::Q5_0;  // not a type the GPU path expands
  dq.n_rows = 1;
  dq.n_cols = 32;
  EXPECT_EQ(cudaErrorInvalidValue, launch_dequant(dq, nullptr));
  dq.type = DType::Q8_0;
  dq.n_cols = 33;  // not a multiple of the block
  EXPECT_EQ(cudaErrorInvalidValue, launch_dequant(dq, nullptr));
  dq.n_cols = 32;  // null pointers
  EXPECT_EQ(cudaErrorInvalidValue, launch_dequant(dq, nullptr));
  dq.n_rows = int64_t(1) << 40;
  dq.n_cols = int64_t(1) << 40;  // overflow
  EXPECT_EQ(cudaErrorInvalidValue, launch_dequant(dq, nullptr));
  dq.n_rows = 0;  // empty: nothing to do
  EXPECT_EQ(cudaSuccess, launch_dequant(dq, nullptr));

  EmbeddingArgs em;
  em.n_tokens = 3;
  em.vocab = 10;
  em.dim = 4;
  EXPECT_EQ(cudaErrorInvalidValue, launch_embedding(em, nullptr));
  em.vocab = 0;
  EXPECT_EQ(cudaErrorInvalidValue, launch_embedding(em, nullptr));

  RmsNormArgs rn;
  rn.n_rows = 2;
  rn.dim = 8;
  rn.x = &dummy;
  rn.out_f32 = &dummy;  // an output but no weight
  EXPECT_EQ(cudaErrorInvalidValue, launch_rmsnorm(rn, nullptr));
  rn.weight = &dummy;
  rn.eps = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(cudaErrorInvalidValue, launch_rmsnorm(rn, nullptr));

  RopeArgs ro;
  ro.n_tokens = 1;
  ro.n_q_heads = 1;
  ro.head_dim = 64;
  ro.rot_dim = 63;  // odd
  EXPECT_EQ(cudaErrorInvalidValue, launch_rope(ro, nullptr));
  ro.rot_dim = 128;  // > head_dim
  EXPECT_EQ(cudaErrorInvalidValue, launch_rope(ro, nullptr));
  ro.rot_dim = 64;
  ro.linear_factor = 0.f;
  EXPECT_EQ(cudaErrorInvalidValue, launch_rope(ro, nullptr));
  ro.linear_factor = 1.f;
  ro.n_k_heads = 2;  // k heads but no k
  EXPECT_EQ(cudaErrorInvalidValue, launch_rope(ro, nullptr));

  SwiGluArgs sw;
  sw.n_rows = 2;
  sw.n_ff = 8;
  sw.in_stride = 4;  // stride shorter than a row
  EXPECT_EQ(cudaErrorInvalidValue, launch_swiglu(sw, nullptr));

  GatherRowsArgs ga;
  ga.n_in = 4;
  ga.n_out = 2;
  ga.dim = 8;
  ga.x = &dummy;
  ga.out = &dummy;  // neither rows nor q_start
  EXPECT_EQ(cudaErrorInvalidValue, launch_gather_rows(ga, nullptr));
}

// ---- GPU tests ---------------------------------------------------------------

TEST(CudaDequant, EveryTypeMatchesTheBlockDefinitions) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(11);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {37, 96}, {5, 2048}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" +
                   std::to_string(cols));
      ref::OwnedWeight w = ref::random_weight(t, rows, cols, rng);
      DeviceBuffer<uint8_t> src(w.bytes);
      DeviceBuffer<uint16_t> dst(size_t(rows * cols));
      DequantArgs a;
      a.src = src.get();
      a.type = t;
      a.n_rows = rows;
      a.n_cols = cols;
      a.dst = as_bf(dst.get());
      KV_CUDA_OK(launch_dequant(a, nullptr));
      KV_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> got = test::from_bf16(dst.read());
      std::vector<float> want;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> row = ref::dequant_row(w.view, r);
        for (float v : row) want.push_back(test::round_bf16(v));
      }
      // d*q + m may be contracted to an FMA on the GPU: allow one bf16 ulp.
      EXPECT_LE(test::worst_error(got, want, 1e-6, 8e-3), 1.0);
      EXPECT_EQ(test::count_nan(got), 0u);
    }
  }
}

TEST(CudaEmbedding, GathersRowsAndFlagsBadIds) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(12);
  for (int dim : {64, 576, 2048}) {
    const int vocab = 1001;
    const std::vector<float> table = test::random_floats(size_t(vocab) * dim, rng, -2.f, 2.f);
    const std::vector<uint16_t> table_bf = test::to_bf16(table);
    const std::vector<int32_t> tokens = {0, vocab - 1, 17, 17, 500, 999};
    DeviceBuffer<uint16_t> dt(table_bf);
    DeviceBuffer<int32_t> dtok(tokens);
    DeviceBuffer<float> dout(tokens.size() * dim);
    DeviceBuffer<int32_t> err(std::vector<int32_t>{0});
    EmbeddingArgs a;
    a.table = as_bf(dt.get());
    a.tokens = dtok.get();
    a.n_tokens = int32_t(tokens.size());
    a.vocab = vocab;
    a.dim = dim;
    a.out = dout.get();
    a.error = err.get();
    KV_CUDA_OK(launch_embedding(a, nullptr));
    KV_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got = dout.read();
    for (size_t t = 0; t < tokens.size(); ++t)
      for (int i = 0; i < dim; ++i)
        ASSERT_EQ(got[t * dim + i], bf16_to_f32(table_bf[size_t(tokens[t]) * dim + i]));
    EXPECT_EQ(err.read()[0], kErrorNone);

    DeviceBuffer<int32_t> bad(std::vector<int32_t>{3, vocab, -1});
    a.tokens = bad.get();
    a.n_tokens = 3;
    KV_CUDA_OK(launch_embedding(a, nullptr));
    KV_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got2 = dout.read();
    EXPECT_EQ(err.read()[0], kErrorTokenId);
    for (int i = 0; i < dim; ++i) {
      EXPECT_EQ(got2[size_t(dim) + i], 0.f);
      EXPECT_EQ(got2[size_t(2 * dim) + i], 0.f);
    }
  }
}

TEST(CudaRmsNorm, FusedResidualAddMatchesCpu) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(13);
  for (int64_t n : {1, 7, 64}) {
    for (int dim : {64, 576, 2048, 4096}) {
      for (bool with_residual : {false, true}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " dim=" + std::to_string(dim) +
                     (with_residual ? " +res" : ""));
        const std::vector<float> x = test::random_floats(size_t(n) * dim, rng, -3.f, 3.f);
        const std::vector<float> res = test::random_floats(size_t(n) * dim, rng, -1.f, 1.f);
        const std::vector<float> w = test::random_floats(size_t(dim), rng, 0.5f, 1.5f);
        std::vector<float> want_x = x;
        if (with_residual) cpu::add_inplace(want_x.data(), res.data(), int64_t(want_x.size()));
        std::vector<float> want(want_x.size());
        cpu::rmsnorm(want_x.data(), w.data(), 1e-5f, n, dim, want.data());

        DeviceBuffer<float> dx(x), dres(res), dw(w), dout32(x.size());
        DeviceBuffer<uint16_t> dout(x.size());
        RmsNormArgs a;
        a.x = dx.get();
        a.residual = with_residual ? dres.get() : nullptr;
        a.weight = dw.get();
        a.n_rows = n;
        a.dim = dim;
        a.eps = 1e-5f;
        a.out = as_bf(dout.get());
        a.out_f32 = dout32.get();
        KV_CUDA_OK(launch_rmsnorm(a, nullptr));
        KV_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(dx.read(), want_x);  // one f32 add each: exact
        const std::vector<float> got = test::from_bf16(dout.read());
        EXPECT_LE(test::worst_error(got, want, 1e-5, 4e-3), 1.0);
        EXPECT_LE(test::worst_error(dout32.read(), want, 1e-5, 1e-5), 1.0);
        EXPECT_EQ(test::count_nan(got), 0u);
      }
    }
  }
}

TEST(CudaRope, BothLayoutsAndScalingsMatchCpu) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(14);
  struct Cfg {
    int head_dim, rot_dim;
    cpu::RopeStyle style;
    float theta, llama3, linear;
  };
  const Cfg cfgs[] = {
      {64, 64, cpu::RopeStyle::kAdjacent, 10000.f, 0.f, 1.f},
      {64, 32, cpu::RopeStyle::kHalf, 10000.f, 0.f, 1.f},     // partial rotation
      {128, 128, cpu::RopeStyle::kHalf, 500000.f, 8.f, 1.f},  // Llama-3.x
      {128, 128, cpu::RopeStyle::kAdjacent, 500000.f, 32.f, 1.f},
      {128, 96, cpu::RopeStyle::kAdjacent, 10000.f, 0.f, 4.f},  // linear scaling
  };
  const std::vector<int32_t> pos = {0, 1, 2, 17, 511, 4095, 8191, 131071};
  for (const Cfg& c : cfgs) {
    SCOPED_TRACE("head_dim=" + std::to_string(c.head_dim) + " rot=" + std::to_string(c.rot_dim));
    cpu::RopeConfig rc;
    rc.head_dim = c.head_dim;
    rc.rot_dim = c.rot_dim;
    rc.theta = c.theta;
    rc.style = c.style;
    rc.llama3_factor = c.llama3;
    rc.linear_factor = c.linear;
    const std::vector<float> inv = cpu::rope_inv_freq(rc);
    const int nq = 8, nk = 2;
    const int64_t T = int64_t(pos.size());
    const std::vector<float> q = test::random_floats(size_t(T * nq * c.head_dim), rng);
    const std::vector<float> k = test::random_floats(size_t(T * nk * c.head_dim), rng);
    std::vector<float> want_q = q, want_k = k;
    cpu::rope(rc, inv.data(), pos.data(), T, nq, want_q.data());
    cpu::rope(rc, inv.data(), pos.data(), T, nk, want_k.data());

    DeviceBuffer<float> dq(q), dk(k), dinv(inv);
    DeviceBuffer<int32_t> dpos(pos);
    RopeArgs a;
    a.q = dq.get();
    a.k = dk.get();
    a.pos = dpos.get();
    a.inv_freq = dinv.get();
    a.n_tokens = int32_t(T);
    a.n_q_heads = nq;
    a.n_k_heads = nk;
    a.head_dim = c.head_dim;
    a.rot_dim = c.rot_dim;
    a.layout = c.style == cpu::RopeStyle::kHalf ? RopeLayout::kHalf : RopeLayout::kAdjacent;
    a.linear_factor = c.linear;
    KV_CUDA_OK(launch_rope(a, nullptr));
    KV_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_LE(test::worst_error(dq.read(), want_q, 1e-5, 1e-5), 1.0);
    EXPECT_LE(test::worst_error(dk.read(), want_k, 1e-5, 1e-5), 1.0);
  }
}

TEST(CudaSwiGlu, SeparateAndFusedInputsMatchCpu) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(15);
  for (int64_t n : {1, 9}) {
    for (int64_t ff : {64, 1536, 8192}) {
      // One fused [n, 2*ff] buffer: gate = first half of each row, up = second.
      const std::vector<float> gu = test::random_floats(size_t(n * 2 * ff), rng, -6.f, 6.f);
      std::vector<float> gate(size_t(n * ff)), up(size_t(n * ff));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < ff; ++c) {
          gate[size_t(r * ff + c)] = gu[size_t(r * 2 * ff + c)];
          up[size_t(r * ff + c)] = gu[size_t(r * 2 * ff + ff + c)];
        }
      std::vector<float> want(gate.size());
      cpu::swiglu(gate.data(), up.data(), int64_t(gate.size()), want.data());

      DeviceBuffer<float> dg(gate), du(up), dgu(gu);
      DeviceBuffer<uint16_t> dout(gate.size());
      SwiGluArgs a;
      a.gate = dg.get();
      a.up = du.get();
      a.n_rows = n;
      a.n_ff = ff;
      a.out = as_bf(dout.get());
      KV_CUDA_OK(launch_swiglu(a, nullptr));
      KV_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_LE(test::worst_error(test::from_bf16(dout.read()), want, 1e-6, 4e-3), 1.0);

      dout.fill_bytes(0xff);
      a.gate = dgu.get();
      a.up = dgu.get() + ff;
      a.in_stride = 2 * ff;
      KV_CUDA_OK(launch_swiglu(a, nullptr));
      KV_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_LE(test::worst_error(test::from_bf16(dout.read()), want, 1e-6, 4e-3), 1.0);
    }
  }
}

TEST(CudaGatherRows, LastTokensByIndexAndByQStart) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(16);
  const int dim = 576, n_in = 40;
  const std::vector<float> x = test::random_floats(size_t(n_in) * dim, rng);
  const std::vector<int32_t> q_start = {0, 1, 17, 18, 40};  // last tokens 0, 16, 17, 39
  const std::vector<int32_t> last = {0, 16, 17, 39};
  DeviceBuffer<float> dx(x), dout(last.size() * dim);
  DeviceBuffer<int32_t> dq(q_start), drows(last), err(std::vector<int32_t>{0});
  GatherRowsArgs a;
  a.x = dx.get();
  a.q_start = dq.get();
  a.n_in = n_in;
  a.n_out = int32_t(last.size());
  a.dim = dim;
  a.out = dout.get();
  a.error = err.get();
  for (bool by_index : {false, true}) {
    a.rows = by_index ? drows.get() : nullptr;
    dout.fill_bytes(0);
    KV_CUDA_OK(launch_gather_rows(a, nullptr));
    KV_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got = dout.read();
    for (size_t o = 0; o < last.size(); ++o)
      for (int i = 0; i < dim; ++i) ASSERT_EQ(got[o * dim + i], x[size_t(last[o]) * dim + i]);
  }
  EXPECT_EQ(err.read()[0], kErrorNone);
  DeviceBuffer<int32_t> bad(std::vector<int32_t>{5, n_in});
  a.rows = bad.get();
  a.n_out = 2;
  KV_CUDA_OK(launch_gather_rows(a, nullptr));
  KV_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = dout.read();
  EXPECT_EQ(err.read()[0], kErrorBatch);
  EXPECT_EQ(got[0], x[size_t(5) * dim]);
  EXPECT_TRUE(std::isnan(got[size_t(dim)]));
}

}  // namespace
}  // namespace kvasir::cuda
