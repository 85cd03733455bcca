// The cuBLASLt bf16 GEMM against a double-precision reference on the same
// bf16 inputs. D[m, n] = A[m, k] · B[n, k]ᵀ. Tolerance per element:
// |got - want| <= 1e-3 * sum_k |a||b| (+ for bf16 output 4e-3 * |want|):
// f32 accumulation (any order, split-K included) is far inside it; a wrong
// transpose or layout is far outside it.
// The argument checks run on every machine.
#include <gtest/gtest.h>

#include "kernels/cuda/gemm.h"
#include "tests/unit/kernels_cuda/cuda_test.h"

namespace kvasir::cuda {
namespace {

using test::DeviceBuffer;

TEST(CudaGemmArgs, RejectBadArgumentsWithoutTouchingTheDevice) {
  GemmArgs g;
  g.m = 4;
  g.n = 4;
  g.k = 4;
  EXPECT_EQ(cudaErrorInvalidValue, launch_gemm(g, nullptr));  // no handle, no pointers
  g.m = -1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_gemm(g, nullptr));
  g.m = int64_t(1) << 33;
  EXPECT_EQ(cudaErrorInvalidValue, launch_gemm(g, nullptr));
  g.m = 0;
  EXPECT_EQ(cudaSuccess, launch_gemm(g, nullptr));  // empty
  g.m = 4;
  g.out_type = static_cast<GemmOut>(7);
  EXPECT_EQ(cudaErrorInvalidValue, launch_gemm(g, nullptr));
}

struct LtHandle {
  cublasLtHandle_t h = nullptr;
  LtHandle() { EXPECT_EQ(CUBLAS_STATUS_SUCCESS, cublasLtCreate(&h)); }
  ~LtHandle() {
    if (h) cublasLtDestroy(h);
  }
};

TEST(CudaGemm, MatchesDoubleReference) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(41);
  LtHandle lt;
  ASSERT_NE(lt.h, nullptr);
  DeviceBuffer<uint8_t> ws(size_t(32) << 20);
  struct Shape {
    int64_t m, n, k;
  };
  // m <= 4 with k % 8 == 0 takes the skinny kernel (kernels/cuda/gemv.h);
  // k = 100 does not (cuBLASLt), nor m >= 5.
  for (Shape s :
       {Shape{1, 64, 64}, Shape{7, 576, 576}, Shape{128, 1000, 1536}, Shape{3, 49152, 576},
        Shape{33, 1536, 8192}, Shape{1, 1, 8}, Shape{2, 33, 72}, Shape{4, 4097, 4096},
        Shape{1, 14336, 4096}, Shape{1, 10, 100}, Shape{5, 17, 64}}) {
    for (GemmOut ot : {GemmOut::kF32, GemmOut::kBF16}) {
      for (float beta : {0.f, 1.f}) {
        SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                     (ot == GemmOut::kF32 ? " f32" : " bf16") + " beta " + std::to_string(beta));
        const std::vector<uint16_t> a = test::to_bf16(test::random_floats(size_t(s.m * s.k), rng));
        const std::vector<uint16_t> b = test::to_bf16(test::random_floats(size_t(s.n * s.k), rng));
        const std::vector<float> d0 = test::random_floats(size_t(s.m * s.n), rng);
        std::vector<float> want(d0.size()), bound(d0.size());
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            double acc = 0.0, mag = 0.0;
            for (int64_t p = 0; p < s.k; ++p) {
              const double x = bf16_to_f32(a[size_t(i * s.k + p)]);
              const double y = bf16_to_f32(b[size_t(j * s.k + p)]);
              acc += x * y;
              mag += std::fabs(x * y);
            }
            const double init = ot == GemmOut::kF32 ? d0[size_t(i * s.n + j)]
                                                    : test::round_bf16(d0[size_t(i * s.n + j)]);
            want[size_t(i * s.n + j)] = float(acc + beta * init);
            bound[size_t(i * s.n + j)] = float(1e-3 * mag + 1e-6);
          }
        DeviceBuffer<uint16_t> da(a), db(b);
        DeviceBuffer<float> dd32(d0);
        DeviceBuffer<uint16_t> dd16(test::to_bf16(d0));
        GemmArgs g;
        g.handle = lt.h;
        g.a = reinterpret_cast<const __nv_bfloat16*>(da.get());
        g.b = reinterpret_cast<const __nv_bfloat16*>(db.get());
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
          if (!(std::fabs(double(got[i]) - want[i]) <= tol)) ++bad;  // NaN counts as bad
        }
        EXPECT_EQ(bad, 0u);
      }
    }
  }
}

}  // namespace
}  // namespace kvasir::cuda
