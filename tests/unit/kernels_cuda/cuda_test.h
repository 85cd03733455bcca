// tests/unit/kernels_cuda/cuda_test.h — helpers for the CUDA kernel tests:
// skip without a device, owned device buffers, bf16 rounding on the host.
//
// Without a usable device (no driver, no GPU, cudaGetDeviceCount failing or
// returning 0) a GPU test calls KV_REQUIRE_CUDA() first and is reported
// skipped with "SKIPPED: no CUDA device (<reason>)"; ctest reads the
// "[  SKIPPED ]" line (gtest_discover_tests' SKIP_REGULAR_EXPRESSION).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"

namespace kvasir::cuda::test {

// Empty if a device is usable, else the reason.
inline std::string cuda_unavailable() {
  static const std::string reason = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    if (n == 0) return std::string("cudaGetDeviceCount returned 0");
    return std::string();
  }();
  return reason;
}

#define KV_REQUIRE_CUDA()                                                          \
  do {                                                                             \
    const std::string why_ = ::kvasir::cuda::test::cuda_unavailable();             \
    if (!why_.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << why_ << ")"; \
  } while (0)

// Evaluates expr once (a launch must not run again to name its error).
#define KV_CUDA_OK(expr)                                                   \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(cudaSuccess, e_) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// A device array of T that frees itself. Tests only: aborts the test (via
// ADD_FAILURE, null pointer) if an allocation fails.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { alloc(n); }
  explicit DeviceBuffer(const std::vector<T>& host) {
    alloc(host.size());
    if (p_ && !host.empty()) {
      EXPECT_EQ(cudaSuccess,
                cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  std::vector<T> read() const {
    std::vector<T> h(n_);
    if (n_ > 0) {
      EXPECT_EQ(cudaSuccess, cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return h;
  }
  void fill_bytes(int byte) {
    if (n_ > 0) {
      EXPECT_EQ(cudaSuccess, cudaMemset(p_, byte, n_ * sizeof(T)));
    }
  }

 private:
  void alloc(size_t n) {
    n_ = n;
    if (n == 0) return;
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T));
    if (e != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc(" << n * sizeof(T) << "): " << cudaGetErrorString(e);
      p_ = nullptr;
      n_ = 0;
    }
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

// bf16 stored as uint16 bits on the host (the layout of __nv_bfloat16).
inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = f32_to_bf16(x[i]);
  return r;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(x[i]);
  return r;
}
inline float round_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.f,
                                        float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> r(n);
  for (float& v : r) v = d(rng);
  return r;
}

// Largest |got - want| / (atol + rtol * |want|); NaN in got counts as failure
// (returns +inf).
inline double worst_error(const std::vector<float>& got, const std::vector<float>& want,
                          double atol, double rtol) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (std::isnan(got[i])) continue;
    const double e =
        std::fabs(double(got[i]) - want[i]) / (atol + rtol * std::fabs(double(want[i])));
    worst = std::max(worst, e);
  }
  return worst;
}

inline size_t count_nan(const std::vector<float>& x) {
  size_t n = 0;
  for (float v : x) n += std::isnan(v);
  return n;
}

}  // namespace kvasir::cuda::test
