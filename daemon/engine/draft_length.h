// daemon/engine/draft_length.h — how many drafts a decoding row carries this
// step: the adaptive draft length (docs/speculative.md, "When k drops to 0").
// Internal to the Scheduler.
//
// Two parts, both plain numbers so each can be tested alone:
//
//   DraftEstimate   per sequence: its drafter's recent per-token acceptance
//                   a (decayed counts, seeded optimistically) and the
//                   rest-and-probe state of a sequence whose drafts keep
//                   missing.
//   best_draft_length  the k in [0, max_k] that maximises the batch's
//                   expected emitted tokens per unit of step time: k drafts
//                   accepted each with probability a (given the previous
//                   ones) add sum_{i=1..k} a^i tokens, and cost what the
//                   cost model says k more positions add to the step.
//
// Deterministic in its inputs: the same acceptance history and the same
// costs give the same k. Only how many tokens are drafted changes, never
// which ones are emitted (the tail's verification is exact).
#pragma once

#include <cstdint>
#include <span>

namespace kvasir {

class DraftEstimate {
 public:
  // Decay of the counts per drafting step: the last ~4 steps count.
  static constexpr double kDecay = 0.75;
  // The seed: a = 0.8, worth two drafted tokens. Optimistic, so a new
  // sequence drafts at once and its first few misses are what turn it down.
  static constexpr double kSeedA = 0.8, kSeedWeight = 2.0;

  // Per-token acceptance: of the draft tokens the target saw (each
  // accepted one, and the first rejected one: the tokens after it were
  // never judged), the share it accepted.
  double acceptance() const { return hits_ / trials_; }
  // A drafting row's result: `proposed` drafts, `accepted` of them.
  // A probe (resting() over, k = 1) that hits re-seeds the estimate: the
  // text has turned predictable again, and the old misses would keep it
  // down for several steps more.
  void observe(int32_t proposed, int32_t accepted);

  // Rest and probe: a sequence whose estimate alone turns its drafts down
  // (k would be > 0 at a = 1) drafts nothing for `steps` decode steps, the
  // drafter not even asked, then probes with k = 1.
  // `steps` counts the step that decides it.
  void rest(int32_t steps) {
    rest_ = steps - 1;
    probe_ = true;
  }
  // Whether the sequence rests this step; rest_step() counts one off.
  bool resting() const { return rest_ > 0; }
  void rest_step() {
    if (rest_ > 0) --rest_;
  }
  // The rest is over and the next drafting row is a probe (k = 1).
  bool probing() const { return probe_ && rest_ <= 0; }

 private:
  double hits_ = kSeedA * kSeedWeight, trials_ = kSeedWeight;
  int32_t rest_ = 0;
  bool probe_ = false;
};

// The draft length for a row with per-token acceptance a, in a batch that
// now emits `emitted` tokens (expected) in a step of `step` (any time
// unit): extra[k] is what k drafts of this row add to the step (extra[0]
// = 0; its size - 1 is the most drafts allowed). The k maximising
// (emitted + sum_{i=1..k} a^i) / (step + extra[k]); ties go to the
// smaller k. 0 when extra is empty or step <= 0.
int32_t best_draft_length(double a, double emitted, double step, std::span<const double> extra);

// Expected tokens k drafts add: sum_{i=1..k} a^i.
double expected_accepted(double a, int32_t k);

}  // namespace kvasir
