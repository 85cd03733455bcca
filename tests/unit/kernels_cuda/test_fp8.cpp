// FP8 on the device against the host reference (base/fp8.h):
//   - cuda_fp8.h's conversions, on the host, equal base/fp8 (CPU, every bf16
//     value and random floats): the device kernels use the same functions;
//   - row quantisation (fp8_quant.h): codes and scales bit for bit, odd
//     shapes, zero and saturating rows;
//   - E4M3 weights through launch_gemm: the skinny kernel (m <= 4, bf16
//     activations as they are) and cuBLASLt E4M3 (m > 4, activations
//     quantised per row; for beta 0 and f32 out also rescaled in place)
//     against a double reference on the same decoded
//     values: |got - want| <= 1e-3 · sum |a·w| (+ 4e-3 · |want| for bf16 out);
//   - the gate/up + SwiGLU skinny kernel, bf16 and E4M3 weights: bit for bit
//     the unfused path (skinny GEMM to f32, then launch_swiglu), and within
//     the bound of a double reference.
// The argument checks run on every machine.
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cstring>

#include "base/fp8.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/swiglu.h"
#include "tests/unit/kernels_cuda/cuda_test.h"

namespace kvasir::cuda {
namespace {

using test::DeviceBuffer;

float bits_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(CudaFp8Host, CudaConversionsEqualTheReference) {
  auto same = [](float x) {
    return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) == fp8::f32_to_e4m3(x);
  };
  for (uint32_t h = 0; h < 0x10000; ++h) ASSERT_TRUE(same(bits_f32(h << 16))) << h;
  std::mt19937 rng(5);
  for (int i = 0; i < 2000000; ++i) ASSERT_TRUE(same(bits_f32(uint32_t(rng())))) << i;
  for (int c = 0; c < 256; ++c) {
    const __half h(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3));
    const float got = __half2float(h), want = fp8::e4m3_to_f32(uint8_t(c));
    EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << c;
  }
}

// A pointer that is never dereferenced: the launchers refuse before a launch.
template <class T>
T* fake(uintptr_t at = 256) {
  return reinterpret_cast<T*>(at);
}

TEST(CudaFp8Args, RejectBadArgumentsWithoutTouchingTheDevice) {
  QuantizeRowsFp8Args q;
  q.n_rows = -1;
  EXPECT_EQ(launch_quantize_rows_fp8(q, nullptr), cudaErrorInvalidValue);
  q.n_rows = 0;
  EXPECT_EQ(launch_quantize_rows_fp8(q, nullptr), cudaSuccess);
  q.n_rows = 2;
  q.n_cols = 8;
  EXPECT_EQ(launch_quantize_rows_fp8(q, nullptr), cudaErrorInvalidValue);  // null pointers
  q.x = fake<__nv_bfloat16>();
  q.q = fake<uint8_t>();
  q.scale = fake<float>();
  q.x_stride = 4;  // shorter than a row
  EXPECT_EQ(launch_quantize_rows_fp8(q, nullptr), cudaErrorInvalidValue);
  Fp8RescaleArgs r;
  r.m = 2;
  r.n = 3;
  EXPECT_EQ(launch_fp8_rescale(r, nullptr), cudaErrorInvalidValue);

  GemmArgs g;
  g.handle = fake<cublasLtContext>();
  g.a = fake<__nv_bfloat16>();
  g.b = fake<uint8_t>();
  g.d = fake<float>();
  g.m = 1;
  g.n = 16;
  g.k = 32;
  g.b_type = GemmWeight::kE4M3;
  EXPECT_FALSE(gemv_applies(g));  // no scale
  EXPECT_EQ(launch_gemm(g, nullptr), cudaErrorInvalidValue);
  g.b_scale = fake<float>();
  EXPECT_TRUE(gemv_applies(g));
  g.k = 24;  // a multiple of 8, not of 16
  EXPECT_FALSE(gemv_applies(g));
  g.b_type = GemmWeight::kBF16;
  EXPECT_TRUE(gemv_applies(g));
  g.b_type = static_cast<GemmWeight>(5);
  EXPECT_EQ(launch_gemm(g, nullptr), cudaErrorInvalidValue);
  g.b_type = GemmWeight::kE4M3;
  g.k = 32;
  g.m = 5;  // cuBLASLt E4M3 path: no scratch
  EXPECT_EQ(launch_gemm(g, nullptr), cudaErrorInvalidValue);
  g.fp8.a = fake<uint8_t>();
  g.fp8.a_scale = fake<float>();
  g.fp8.prod = fake<float>();
  g.fp8.a_bytes = 5 * 32;
  g.fp8.a_scale_bytes = 5 * 4;
  g.fp8.prod_bytes = 5 * 16 * 4 - 1;  // one byte short
  EXPECT_EQ(launch_gemm(g, nullptr), cudaErrorInvalidValue);
  g.fp8.prod = nullptr;  // in place needs beta 0 and f32 out
  g.beta = 1.f;
  EXPECT_EQ(launch_gemm(g, nullptr), cudaErrorInvalidValue);
  g.beta = 0.f;
  g.out_type = GemmOut::kBF16;
  EXPECT_EQ(launch_gemm(g, nullptr), cudaErrorInvalidValue);
  g.out_type = GemmOut::kF32;

  GemmArgs s = g;  // SwiGLU: bf16 out, alpha 1, beta 0, m <= 4
  s.m = 2;
  s.out_type = GemmOut::kF32;
  EXPECT_EQ(launch_gemv_swiglu(s, nullptr), cudaErrorInvalidValue);
  s.out_type = GemmOut::kBF16;
  s.beta = 1.f;
  EXPECT_EQ(launch_gemv_swiglu(s, nullptr), cudaErrorInvalidValue);
  s.beta = 0.f;
  s.alpha = 2.f;
  EXPECT_EQ(launch_gemv_swiglu(s, nullptr), cudaErrorInvalidValue);
  s.alpha = 1.f;
  s.m = 5;
  EXPECT_EQ(launch_gemv_swiglu(s, nullptr), cudaErrorInvalidValue);
}

// ---- GPU -------------------------------------------------------------------

bool fp8_tensor_cores(std::string* why) {
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    *why = "cudaGetDeviceProperties failed";
    return false;
  }
  if (p.major * 10 + p.minor >= 89) return true;
  *why = "compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) +
         " has no FP8 tensor cores (8.9+)";
  return false;
}

// Random bf16 values, with a zero row and a row of large values if there
// are enough rows.
std::vector<uint16_t> bf16_rows(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<float> x = test::random_floats(size_t(rows * cols), rng, -2.f, 2.f);
  if (rows > 2)
    for (int64_t c = 0; c < cols; ++c) {
      x[size_t(cols + c)] = 0.f;
      x[size_t(2 * cols + c)] *= 1e30f;
    }
  return test::to_bf16(x);
}

TEST(CudaFp8Quantize, RowsMatchTheReferenceBitForBit) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(8);
  struct Shape {
    int64_t rows, cols;
  };
  for (Shape s : {Shape{1, 1}, Shape{3, 17}, Shape{5, 4096}, Shape{64, 576}, Shape{7, 14336},
                  Shape{300, 33}}) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.cols));
    const std::vector<uint16_t> x = bf16_rows(s.rows, s.cols, rng);
    std::vector<uint8_t> want(x.size());
    std::vector<float> want_scale(size_t(s.rows));
    const std::vector<float> xf = test::from_bf16(x);
    for (int64_t r = 0; r < s.rows; ++r)
      want_scale[size_t(r)] =
          fp8::quantize_row_e4m3(xf.data() + r * s.cols, s.cols, want.data() + r * s.cols);
    DeviceBuffer<uint16_t> dx(x);
    DeviceBuffer<uint8_t> dq(x.size());
    DeviceBuffer<float> ds(size_t(s.rows));
    QuantizeRowsFp8Args a;
    a.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
    a.n_rows = s.rows;
    a.n_cols = s.cols;
    a.q = dq.get();
    a.scale = ds.get();
    KV_CUDA_OK(launch_quantize_rows_fp8(a, nullptr));
    KV_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(dq.read(), want);
    EXPECT_EQ(ds.read(), want_scale);
  }
}

// Random E4M3 weights (no NaN codes) and per-row scales.
struct Fp8Weights {
  std::vector<uint8_t> codes;
  std::vector<float> scale;
  double w(int64_t j, int64_t p, int64_t k) const {
    return double(scale[size_t(j)]) * fp8::e4m3_to_f32(codes[size_t(j * k + p)]);
  }
};

Fp8Weights random_fp8(int64_t n, int64_t k, std::mt19937& rng) {
  Fp8Weights w;
  w.codes.resize(size_t(n * k));
  for (uint8_t& c : w.codes) {
    c = uint8_t(rng());
    if ((c & 0x7F) == 0x7F) c = 0x30;  // not NaN
  }
  w.scale = test::random_floats(size_t(n), rng, 1e-4f, 2e-3f);
  return w;
}

struct Fp8Scratch {
  DeviceBuffer<uint8_t> a;
  DeviceBuffer<float> a_scale, prod;
  Fp8Scratch(int64_t m, int64_t n, int64_t k)
      : a(size_t(m * k)), a_scale(size_t(m)), prod(size_t(m * n)) {}
  GemmFp8Scratch view() {
    return GemmFp8Scratch{a.get(),  a_scale.get(),      prod.get(),
                          a.size(), 4 * a_scale.size(), 4 * prod.size()};
  }
};

struct LtHandle {
  cublasLtHandle_t h = nullptr;
  LtHandle() { EXPECT_EQ(CUBLAS_STATUS_SUCCESS, cublasLtCreate(&h)); }
  ~LtHandle() {
    if (h) cublasLtDestroy(h);
  }
};

// The activations the product sees: bf16 as they are (m <= 4), or quantised
// per row as the cuBLASLt path quantises them.
std::vector<double> seen_activations(const std::vector<uint16_t>& a, int64_t m, int64_t k) {
  const std::vector<float> af = test::from_bf16(a);
  std::vector<double> out(af.begin(), af.end());
  if (m <= kGemvMaxRows) return out;
  std::vector<uint8_t> q(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    const float s = fp8::quantize_row_e4m3(af.data() + i * k, k, q.data());
    for (int64_t p = 0; p < k; ++p)
      out[size_t(i * k + p)] = double(s) * fp8::e4m3_to_f32(q[size_t(p)]);
  }
  return out;
}

TEST(CudaFp8Gemm, SkinnyAndCublasLtPathsMatchDoubleReference) {
  KV_REQUIRE_CUDA();
  std::string why;
  const bool lt_fp8 = fp8_tensor_cores(&why);
  if (!lt_fp8) std::printf("cuBLASLt E4M3 cases SKIPPED: %s\n", why.c_str());
  std::mt19937 rng(9);
  LtHandle lt;
  DeviceBuffer<uint8_t> ws(size_t(32) << 20);
  struct Shape {
    int64_t m, n, k;
  };
  for (Shape s : {Shape{1, 16, 16}, Shape{2, 960, 576}, Shape{3, 4096, 4096}, Shape{4, 48, 1536},
                  Shape{1, 28672, 4096}, Shape{5, 64, 32}, Shape{7, 960, 576}, Shape{33, 1536, 576},
                  Shape{128, 4096, 1024}}) {
    if (s.m > kGemvMaxRows && !lt_fp8) continue;
    for (GemmOut ot : {GemmOut::kF32, GemmOut::kBF16}) {
      for (float beta : {0.f, 1.f}) {
        SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                     (ot == GemmOut::kF32 ? " f32" : " bf16") + " beta " + std::to_string(beta));
        const std::vector<uint16_t> a = test::to_bf16(test::random_floats(size_t(s.m * s.k), rng));
        const Fp8Weights w = random_fp8(s.n, s.k, rng);
        const std::vector<float> d0 = test::random_floats(size_t(s.m * s.n), rng);
        const std::vector<double> av = seen_activations(a, s.m, s.k);
        std::vector<float> want(d0.size()), bound(d0.size());
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            double acc = 0, mag = 0;
            for (int64_t p = 0; p < s.k; ++p) {
              const double x = av[size_t(i * s.k + p)] * w.w(j, p, s.k);
              acc += x;
              mag += std::fabs(x);
            }
            const float init = ot == GemmOut::kF32 ? d0[size_t(i * s.n + j)]
                                                   : test::round_bf16(d0[size_t(i * s.n + j)]);
            want[size_t(i * s.n + j)] = float(acc + beta * init);
            bound[size_t(i * s.n + j)] = float(1e-3 * mag + 1e-6);
          }
        DeviceBuffer<uint16_t> da(a);
        DeviceBuffer<uint8_t> db(w.codes);
        DeviceBuffer<float> dscale(w.scale), dd32(d0);
        DeviceBuffer<uint16_t> dd16(test::to_bf16(d0));
        Fp8Scratch scratch(s.m, s.n, s.k);
        GemmArgs g;
        g.handle = lt.h;
        g.a = reinterpret_cast<const __nv_bfloat16*>(da.get());
        g.b = db.get();
        g.b_type = GemmWeight::kE4M3;
        g.b_scale = dscale.get();
        g.fp8 = scratch.view();
        // beta 0 into f32: the product may go straight to D (no prod buffer).
        if (beta == 0.f && ot == GemmOut::kF32 && s.m % 2 == 1) g.fp8.prod = nullptr;
        g.d = ot == GemmOut::kF32 ? static_cast<void*>(dd32.get()) : dd16.get();
        g.out_type = ot;
        g.m = s.m;
        g.n = s.n;
        g.k = s.k;
        g.beta = beta;
        g.workspace = ws.get();
        g.workspace_bytes = ws.size();
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        g.cublas_status = &st;
        KV_CUDA_OK(launch_gemm(g, nullptr));
        KV_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<float> got =
            ot == GemmOut::kF32 ? dd32.read() : test::from_bf16(dd16.read());
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double tol =
              bound[i] + (ot == GemmOut::kBF16 ? 4e-3 * std::fabs(double(want[i])) : 0.0);
          if (!(std::fabs(double(got[i]) - want[i]) <= tol)) ++bad;
        }
        EXPECT_EQ(bad, 0u) << "cuBLASLt status " << int(st);
      }
    }
  }
}

// Gate/up + SwiGLU in the skinny kernel: against the unfused path on the
// same device (bit for bit) and a double reference.
TEST(CudaGemvSwiGlu, FusedEqualsGemvThenSwiGlu) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(10);
  LtHandle lt;
  struct Shape {
    int64_t m, ff, k;
  };
  for (bool fp8w : {false, true}) {
    for (Shape s : {Shape{1, 8, 64}, Shape{2, 96, 64}, Shape{3, 1536, 576}, Shape{4, 14336, 4096},
                    Shape{1, 33, 4096}}) {
      SCOPED_TRACE(std::string(fp8w ? "e4m3 " : "bf16 ") + std::to_string(s.m) + "x" +
                   std::to_string(s.ff) + "x" + std::to_string(s.k));
      const int64_t rows = 2 * s.ff;
      const std::vector<uint16_t> a = test::to_bf16(test::random_floats(size_t(s.m * s.k), rng));
      const Fp8Weights wq = random_fp8(rows, s.k, rng);
      const std::vector<uint16_t> wb =
          test::to_bf16(test::random_floats(size_t(rows * s.k), rng, -0.05f, 0.05f));
      DeviceBuffer<uint16_t> da(a), dwb(wb), dout(size_t(s.m * s.ff)), dref(size_t(s.m * s.ff));
      DeviceBuffer<uint8_t> dwq(wq.codes);
      DeviceBuffer<float> dscale(wq.scale), dgu(size_t(s.m * rows));
      GemmArgs g;
      g.handle = lt.h;
      g.a = reinterpret_cast<const __nv_bfloat16*>(da.get());
      g.b = fp8w ? static_cast<const void*>(dwq.get()) : dwb.get();
      g.b_type = fp8w ? GemmWeight::kE4M3 : GemmWeight::kBF16;
      g.b_scale = fp8w ? dscale.get() : nullptr;
      g.m = s.m;
      g.k = s.k;
      // Unfused: [m, 2ff] f32, then SwiGLU over its two halves.
      g.n = rows;
      g.d = dgu.get();
      g.out_type = GemmOut::kF32;
      KV_CUDA_OK(launch_gemv(g, nullptr));
      SwiGluArgs sw;
      sw.gate = dgu.get();
      sw.up = dgu.get() + s.ff;
      sw.n_rows = s.m;
      sw.n_ff = s.ff;
      sw.in_stride = rows;
      sw.out = reinterpret_cast<__nv_bfloat16*>(dref.get());
      KV_CUDA_OK(launch_swiglu(sw, nullptr));
      // Fused.
      g.n = s.ff;
      g.d = dout.get();
      g.out_type = GemmOut::kBF16;
      KV_CUDA_OK(launch_gemv_swiglu(g, nullptr));
      KV_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<uint16_t> got = dout.read();
      EXPECT_EQ(got, dref.read());
      // Double reference: silu(g)·u, with the bound of g and u carried by
      // |d(silu(g)u)| <= (|u| (1 + |g|/4)) |dg| + |silu(g)| |du|, plus bf16.
      const std::vector<float> af = test::from_bf16(a), wbf = test::from_bf16(wb);
      size_t bad = 0;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.ff; ++j) {
          double gg = 0, uu = 0, mg = 0, mu = 0;
          for (int64_t p = 0; p < s.k; ++p) {
            const double x = af[size_t(i * s.k + p)];
            const double wg = fp8w ? wq.w(j, p, s.k) : wbf[size_t(j * s.k + p)];
            const double wu = fp8w ? wq.w(s.ff + j, p, s.k) : wbf[size_t((s.ff + j) * s.k + p)];
            gg += x * wg;
            uu += x * wu;
            mg += std::fabs(x * wg);
            mu += std::fabs(x * wu);
          }
          const double silu = gg / (1 + std::exp(-gg)), want = silu * uu;
          const double tol = std::fabs(uu) * (1 + std::fabs(gg) / 4) * 1e-3 * mg +
                             std::fabs(silu) * 1e-3 * mu + 4e-3 * std::fabs(want) + 1e-6;
          const double d = bf16_to_f32(got[size_t(i * s.ff + j)]);
          if (!(std::fabs(d - want) <= tol)) ++bad;
        }
      EXPECT_EQ(bad, 0u);
    }
  }
}

}  // namespace
}  // namespace kvasir::cuda
