// tests/unit/kernels/batch_check.h — what the batch-kernel tests share: a
// batch must give each row the bits n one-row decode calls give it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
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

}  // namespace kvasir::cpu::testing
