// tests/unit/kernels/batch_check.h — what the batch-kernel tests share: a
// batch must give each row the bits n one-row decode calls give it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
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
