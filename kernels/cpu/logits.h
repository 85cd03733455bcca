// kernels/cpu/logits.h — the passes a sampler makes over one row of logits
// (a vocabulary of up to 262,144 for Gemma 3), SIMD-wide.
//
// Contract: every level gives the bits of the 4-lane reference (the scalar
// level: GCC vector extensions of 4 floats, what the sampler always ran), so
// a sampled token and its logprob never depend on the CPU or on KVASIR_SIMD.
// The wide paths compute each term with the reference's operations, none
// fused (this file is built with -ffp-contract=off), and add the terms in
// the reference's order; only the exp work, which does not depend on order,
// runs 8 or 16 wide. The level is simd_level(): AVX-512F, AVX2, or scalar.
#pragma once

#include <cstdint>

namespace kvasir::cpu {

// In place over x[0, n): NaN -> -inf, +inf -> the largest finite float.
// Returns the maximum (-inf if every entry is -inf or NaN); a zero maximum
// is returned as +0, whichever zero the row holds.
float logits_sanitize_max(float* x, int32_t n);

// sum over i < n of exp((x[i] - max) * inv_t), for x[i] <= max (sanitised
// logits; a term below e^-87.3 is exactly 0, so -inf gives 0). The order:
// four float lanes, lane j adding the terms i = j (mod 4) of the first
// n - n % 4 in index order; the lanes then added in double, lane 0 first;
// then the last n % 4 terms in double. With out, out[i] = the i-th term.
double logits_exp_sum(const float* x, int32_t n, float max, float inv_t, float* out);

// The first i < n with x[i] == v (as floats compare: -0 == +0, NaN never);
// n if there is none.
int32_t logits_find(const float* x, int32_t n, float v);

}  // namespace kvasir::cpu
