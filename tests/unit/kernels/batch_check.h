// tests/unit/kernels/batch_check.h — what the batch-kernel tests share: a
// batch must give each row the bits n one-row decode calls give it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/simd.h"

namespace kvasir::cpu::testing {

// Puts the SIMD dispatch back as the process found it.
struct SimdGuard {
  ~SimdGuard() { simd_reset_for_testing(); }
};

// y [n, rows] from one decode call per activation row (the n = 1 kernel).
inline std::vector<float> one_row_at_a_time(const TensorView& w, const std::vector<float>& x,
                                            int64_t n) {
  const int64_t rows = w.rows(), cols = w.cols();
  std::vector<float> y(size_t(n * rows), NAN);
  for (int64_t j = 0; j < n; ++j) matmul(w, x.data() + j * cols, 1, y.data() + j * rows, nullptr);
  return y;
}

// The first differing element of two outputs [n, rows], or -1.
inline int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return int64_t(i);
  return -1;
}

// What a sub-range test fills y with before calling a batch kernel.
constexpr float kUnwritten = -7.f;

// What went wrong in y [n, rows] (filled with kUnwritten) after a batch
// kernel ran on weight rows [r0, r1): a row outside the range written, or
// one inside without the bits of `alone` (one_row_at_a_time); "" if none.
inline std::string range_error(const std::vector<float>& y, const std::vector<float>& alone,
                               int64_t n, int64_t rows, int64_t r0, int64_t r1) {
  std::ostringstream e;
  e.precision(9);  // every float's own digits: a one-ulp miss shows
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      const size_t k = size_t(j * rows + r);
      const float want = r < r0 || r >= r1 ? kUnwritten : alone[k];
      if (std::memcmp(&y[k], &want, sizeof(float)) == 0) continue;
      e << "j=" << j << " r=" << r << " (range [" << r0 << ", " << r1 << ")): " << y[k] << ", want "
        << want;
      return e.str();
    }
  return "";
}

// Activations [n, cols] ~ N(0, 1), with what quantised blocks must
// survive: an all-zero block (its scale d == 0) and an outlier.
inline std::vector<float> quant_activations(int64_t n, int64_t cols, std::mt19937& rng) {
  std::vector<float> x(size_t(n * cols));  // [n, cols]
  std::normal_distribution<float> d(0.f, 1.f);
  for (auto& v : x) v = d(rng);
  for (int i = 0; i < 32 && cols >= 64; ++i) x[size_t(32 + i)] = 0.f;  // d == 0 block
  x[0] = 40.f;                                                         // an outlier
  return x;
}

}  // namespace kvasir::cpu::testing
