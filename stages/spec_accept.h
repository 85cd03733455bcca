// stages/spec_accept.h — the general rejection rule of speculative sampling
// (Leviathan et al. 2023; Chen et al. 2023), for a drafter that proposes a
// distribution q rather than a point (a draft model; docs/speculative.md).
//
// A draft token x drawn from q is accepted with probability
// min(1, p(x) / q(x)); on rejection the token is drawn from the residual
// max(0, p - q), normalised. The token that results is distributed exactly
// as p, whatever q is. For a deterministic drafter (q one-hot on x) the rule
// reduces to "accept x with probability p(x), else draw from p without x" —
// which is what sampling t ~ p and accepting iff t == x does, so the tail's
// verification of prompt-lookup drafts (stages/tail_sampler.cpp) needs no
// residual: its draw, keyed by (seed, position), is the one the sequence
// would have made without speculation.
//
// Not yet wired to a drafter: the seam a draft model will use.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvasir {

struct SpecDecision {
  int32_t token = 0;
  bool accepted = false;  // token is the draft
};

// p, q: probabilities over the vocabulary (each sums to 1; q(x) > 0 for the
// draft x, drawn from q). u_accept, u_residual: independent uniforms in
// [0, 1). Accepts x iff u_accept < p(x) / q(x); else returns the token the
// residual's inverse CDF gives at u_residual. When p <= q everywhere the
// residual is empty only if p == q, where rejection has probability 0.
SpecDecision speculative_accept(std::span<const float> p, std::span<const float> q, int32_t x,
                                double u_accept, double u_residual);

// The residual distribution max(0, p - q) / sum, [vocab] (all zero if p <= q
// everywhere).
std::vector<double> speculative_residual(std::span<const float> p, std::span<const float> q);

}  // namespace kvasir
