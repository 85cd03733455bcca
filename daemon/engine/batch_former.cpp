#include "daemon/engine/batch_former.h"

#include <algorithm>

namespace kvasir {

void BatchFormer::begin(int64_t active, int64_t work, RingLoad load, int64_t floor,
                        StepBudget time) {
  budget_ = lim_.max_tokens;
  row_cap_ = lim_.max_rows;
  time_ = time;
  shape_ = {};
  prefill_taken_ = false;
  if (lim_.inflight <= 1) return;
  if (load.free_slots <= 0) {
    // The ring unknown: balance rows only, over all the slots.
    if (active > 0)
      row_cap_ =
          int32_t(std::min<int64_t>(lim_.max_rows, (active + lim_.inflight - 1) / lim_.inflight));
    return;
  }
  // Balance by tokens: a row cap alone lets one batch take a 500-token chunk
  // and the next two decodes; the pipeline then runs at the pace of the big
  // one, the other batches leaving their stages idle. Two shares, the
  // smaller wins:
  //  - the work ready now split over the free slots (the batches formed
  //    together to fill them carry similar token counts);
  //  - the whole ring's work, tokens in flight included, split over all its
  //    slots. Without it a batch formed while the others are busy takes
  //    everything ready, and an imbalance (14 decodes in one batch, 2 in the
  //    other, after a staggered burst) repeats forever, each decode going
  //    back into the batch it came from: 16 concurrent decodes ran at 0.64x
  //    the balanced rate (bench/serve). Work held back goes into the next
  //    free slot.
  // When there is more work than the ring can carry the budget stays at
  // max_tokens: nothing is held back.
  if (work > 0) {
    const int64_t total = work + std::max<int64_t>(load.tokens_in_flight, 0);
    const int64_t share = std::min((work + load.free_slots - 1) / load.free_slots,
                                   (total + lim_.inflight - 1) / lim_.inflight);
    budget_ = int32_t(std::clamp<int64_t>(std::max(share, floor), 1, lim_.max_tokens));
  }
}

int32_t BatchFormer::want(const Sequence& s) const {
  if (!s.schedulable() || budget_ <= 0) return 0;
  // Padding goes first, before the prefill that samples, so no filler
  // position can land on KV the sequence has already made its own. Filler
  // can be cut anywhere.
  if (s.padding() > 0) return int32_t(std::min<int64_t>(s.padding(), budget_));
  const int64_t rem = s.remaining();
  if (lim_.policy == Policy::kChunked) {
    const auto n = int32_t(std::min<int64_t>({rem, budget_, lim_.chunk_size}));
    // A decode (one position left) is what the budget protects: never cut.
    return rem > 1 && time_.step_s > 0 ? within_time(s, n) : n;
  }
  // Whole prefills: a prompt that fits a micro-batch waits for one with room
  // for all of it. One longer than any micro-batch has to be cut: it takes
  // what is left of the budget (a full batch when it is alone).
  if (rem <= lim_.max_tokens) return rem <= budget_ ? int32_t(rem) : 0;
  return budget_;
}

// The piece's size under the step budget: the largest k <= n whose batch
// (the rows so far plus k positions of s) the cost model predicts within
// step_s, found by bisection (the prediction grows with k). The batch's
// first prefill piece gets at least its aging floor.
int32_t BatchFormer::within_time(const Sequence& s, int32_t n) const {
  auto fits = [&](int32_t k) {
    BatchShape b = shape_;
    b.add_row(s.n_scheduled, k, k == s.remaining(), false);
    return cost_.step(b) <= time_.step_s;
  };
  int32_t lo = 0, hi = n;
  if (fits(n)) {
    lo = n;
  } else {
    while (hi - lo > 1) {
      const int32_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
  }
  if (prefill_taken_) return lo;
  return std::max(lo, std::min(n, aging_floor(s)));
}

// floor_tokens until the budget has starved the sequence's prefill (the
// decodes left it under a quarter of the step) for aging_steps micro-batches,
// then kAgedFloor, doubled for every aging_steps more. Only starvation ages
// it: a prompt that gets its share of the step is moving at the budget's
// pace, however few tokens that is at a long prompt's late positions.
int32_t BatchFormer::aging_floor(const Sequence& s) const {
  const int64_t periods = s.starved / std::max(time_.aging_steps, 1);
  int64_t floor = std::max(time_.floor_tokens, 1);
  if (periods > 0)
    floor = std::max<int64_t>(floor, int64_t(StepBudget::kAgedFloor)
                                         << std::min<int64_t>(periods - 1, 20));
  return int32_t(std::min<int64_t>(floor, lim_.max_tokens));
}

void BatchFormer::add(std::vector<SchedRow>& rows, Sequence* s, int32_t n) {
  budget_ -= n;
  if (s->padding() > 0) {
    rows.push_back(SchedRow{s, int32_t(s->pad_next), n, false, true});
    shape_.add_row(s->pad_next, n, false, false);
    s->pad_next += n;
    return;
  }
  // Only the row that reaches the last known token samples: earlier chunks
  // of a prompt only write KV.
  const int64_t rem = s->remaining();
  SchedRow r{s, int32_t(s->n_scheduled), n, n == rem};
  const bool decode = rem == 1 && s->n_scheduled >= s->n_prompt;
  if (!decode && rem > 1 && time_.step_s > 0) count_piece(*s, n);
  shape_.add_row(s->n_scheduled, n, r.sample, decode);
  s->n_scheduled += n;
  if (r.sample) s->state = SeqState::kDecoding;  // its next token is being sampled
  rows.push_back(r);
}

void BatchFormer::add_drafts(SchedRow& row, int32_t n) {
  budget_ = std::max(0, budget_ - n);
  shape_.add_drafts(row.pos0 + row.n_tokens, n);
  row.n_tokens += n;
}

// What the time budget did to a prefill piece of n positions: cut it (the
// token budget alone would have sent more), or let the aging floor through.
// The batch's first piece counts a starved micro-batch when the decodes
// before it left prefill under a quarter of the step budget: then the
// budget, not the prompt's length or position, is what holds it back.
void BatchFormer::count_piece(Sequence& s, int32_t n) {
  const auto by_tokens = int32_t(std::min<int64_t>({s.remaining(), budget_ + n, lim_.chunk_size}));
  BatchShape b = shape_;
  b.add_row(s.n_scheduled, n, n == s.remaining(), false);
  if (cost_.step(b) > time_.step_s * 1.000001)
    counts_.aged++;
  else if (n < by_tokens)
    counts_.cut++;
  const double full = time_.target_step_s > 0 ? time_.target_step_s : time_.step_s;
  if (!prefill_taken_ && n < by_tokens && full - cost_.step(shape_) < 0.25 * full) s.starved++;
  prefill_taken_ = true;
}

}  // namespace kvasir
