// stages/spec_accept.cpp — see spec_accept.h.
#include "stages/spec_accept.h"

#include <algorithm>

#include "base/check.h"

namespace kvasir {

std::vector<double> speculative_residual(std::span<const float> p, std::span<const float> q) {
  KV_CHECK(p.size() == q.size(), "speculative_residual: p has {} entries, q {}", p.size(),
           q.size());
  std::vector<double> r(p.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += r[i] = std::max(0.0, double(p[i]) - double(q[i]));
  if (sum > 0)
    for (double& v : r) v /= sum;
  return r;
}

SpecDecision speculative_accept(std::span<const float> p, std::span<const float> q, int32_t x,
                                double u_accept, double u_residual) {
  KV_CHECK(x >= 0 && size_t(x) < p.size() && p.size() == q.size() && q[size_t(x)] > 0,
           "speculative_accept: draft {} outside the vocabulary or with q = 0", x);
  if (u_accept * double(q[size_t(x)]) < double(p[size_t(x)])) return {x, true};
  const std::vector<double> r = speculative_residual(p, q);
  double acc = 0;
  int32_t last = x;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] <= 0) continue;
    last = int32_t(i);
    acc += r[i];
    if (u_residual < acc) return {int32_t(i), false};
  }
  return {last, false};  // rounding left u_residual at the very top
}

}  // namespace kvasir
