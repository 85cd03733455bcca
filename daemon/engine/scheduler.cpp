#include "daemon/engine/scheduler.h"

#include <algorithm>

namespace kvasir {

std::optional<Policy> parse_policy(std::string_view name) {
  if (name == "naive") return Policy::kNaive;
  if (name == "static") return Policy::kStatic;
  if (name == "continuous") return Policy::kContinuous;
  if (name == "continuous+chunked") return Policy::kChunked;
  return std::nullopt;
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kNaive:
      return "naive";
    case Policy::kStatic:
      return "static";
    case Policy::kContinuous:
      return "continuous";
    case Policy::kChunked:
      return "continuous+chunked";
  }
  return "?";
}

namespace {
int64_t remaining(const Sequence& s) {
  return int64_t(s.tokens.size()) - s.n_scheduled;
}
int64_t padding(const Sequence& s) {
  return s.pad_end - s.pad_next;
}
bool schedulable(const Sequence& s) {
  return (remaining(s) > 0 || padding(s) > 0) && !s.awaiting && !s.done && !s.cancelled;
}
}  // namespace

// ---- capacity ---------------------------------------------------------------

bool CapacityScheduler::may_admit(const std::deque<Sequence*>& waiting,
                                  const std::vector<Sequence*>& running,
                                  int32_t admitted_this_batch) const {
  if (waiting.empty() || waiting.front()->cancelled || waiting.front()->done) return false;
  if (int32_t(running.size()) >= lim_.max_num_seqs) return false;
  switch (lim_.policy) {
    case Policy::kNaive:
      return running.empty();
    case Policy::kStatic:
      // The batch forms only when the previous one has wholly left, and only
      // within one decision: later arrivals wait for the next batch.
      return int32_t(running.size()) == admitted_this_batch && admitted_this_batch < lim_.max_rows;
    case Policy::kContinuous:
    case Policy::kChunked:
      return true;
  }
  return false;
}

void CapacityScheduler::admit(Sequence* s, std::deque<Sequence*>& waiting,
                              std::vector<Sequence*>& running) {
  waiting.pop_front();
  s->running = true;
  s->admitted = next_admit_++;
  running.push_back(s);
}

bool CapacityScheduler::grow(Sequence* s, int64_t tokens, BlockManager& blocks,
                             std::deque<Sequence*>& waiting, std::vector<Sequence*>& running,
                             const std::vector<SchedRow>& taken, bool may_preempt) {
  // A sequence with nothing computed yet (just admitted, or back after a
  // preemption) never evicts another for its first blocks: it would trade
  // work done for work not started. It waits for room instead.
  if (s->table.empty()) may_preempt = false;
  while (blocks.blocks_for(tokens) - int32_t(s->table.size()) > blocks.free()) {
    if (!may_preempt) return false;
    // The newest running sequence with nothing in flight: the one whose loss
    // costs least and whose eviction cannot touch KV a stage is reading.
    Sequence* victim = nullptr;
    for (Sequence* v : running) {
      if (v->batches_in_flight > 0 || v->awaiting || v->done || v->table.empty()) continue;
      if (std::any_of(taken.begin(), taken.end(), [&](const SchedRow& r) { return r.seq == v; }))
        continue;
      if (!victim || v->admitted > victim->admitted) victim = v;
    }
    if (!victim) return false;
    preempt(victim, blocks, waiting, running);
    if (victim == s) return false;  // s was the newest: it waits, the older ones go on
  }
  return blocks.ensure(s->table, tokens);
}

void CapacityScheduler::preempt(Sequence* v, BlockManager& blocks, std::deque<Sequence*>& waiting,
                                std::vector<Sequence*>& running) {
  blocks.release(v->table);
  v->n_scheduled = 0;            // recompute prompt + generated tokens; nothing is re-sent
  v->pad_next = v->pad_end = 0;  // its next (static) batch pads it afresh
  v->running = false;
  v->preempted++;
  running.erase(std::find(running.begin(), running.end(), v));
  waiting.push_front(v);
  preemptions_++;
}

// ---- micro-batch forming ----------------------------------------------------

void BatchFormer::begin(int64_t active, int64_t work, RingLoad load, int64_t floor) {
  budget_ = lim_.max_tokens;
  row_cap_ = lim_.max_rows;
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
  if (!schedulable(s) || budget_ <= 0) return 0;
  // Padding goes first, before the prefill that samples, so no filler
  // position can land on KV the sequence has already made its own. Filler
  // can be cut anywhere.
  if (padding(s) > 0) return int32_t(std::min<int64_t>(padding(s), budget_));
  const int64_t rem = remaining(s);
  if (lim_.policy == Policy::kChunked)
    return int32_t(std::min<int64_t>({rem, budget_, lim_.chunk_size}));
  // Whole prefills: a prompt that fits a micro-batch waits for one with room
  // for all of it. One longer than any micro-batch has to be cut: it takes
  // what is left of the budget (a full batch when it is alone).
  if (rem <= lim_.max_tokens) return rem <= budget_ ? int32_t(rem) : 0;
  return budget_;
}

void BatchFormer::add(std::vector<SchedRow>& rows, Sequence* s, int32_t n) {
  if (padding(*s) > 0) {
    rows.push_back(SchedRow{s, int32_t(s->pad_next), n, false, true});
    s->pad_next += n;
    budget_ -= n;
    return;
  }
  SchedRow r{s, int32_t(s->n_scheduled), n, n == remaining(*s)};
  s->n_scheduled += n;
  s->awaiting = r.sample;
  budget_ -= n;
  rows.push_back(r);
}

// ---- the decision -------------------------------------------------------------

bool Scheduler::take(std::vector<SchedRow>& rows, Sequence* s, BlockManager& blocks,
                     std::deque<Sequence*>& waiting, std::vector<Sequence*>& running) {
  if (form_.full(rows)) return false;
  const int32_t n = form_.want(*s);
  if (n <= 0) return false;
  const int64_t end = padding(*s) > 0 ? s->pad_next + n : s->n_scheduled + n;
  if (!cap_.grow(s, end, blocks, waiting, running, rows, true)) return false;
  form_.add(rows, s, n);
  return true;
}

std::vector<SchedRow> Scheduler::next(std::deque<Sequence*>& waiting,
                                      std::vector<Sequence*>& running, BlockManager& blocks,
                                      RingLoad load) {
  std::vector<SchedRow> rows;
  // Admission first, so the row cap sees everyone who wants the ring. A
  // waiter is admitted only when the pool has blocks for its first piece
  // and one spare block per running sequence (their next decodes):
  // admitting into a pool that decodes are about to need would only cause a
  // preemption. The blocks are promised here, not taken: they are taken when
  // the piece is scheduled (take), so a sequence admitted now but scheduled
  // a few batches later holds no KV meanwhile. Held early, two long prompts'
  // first chunks (512 slots each) waited unwritten behind the chunks of a
  // third: ~8 of the 10.5% KV waste measured on bench/policies' trace.
  int32_t admitted = 0;
  int32_t promised = 0;  // blocks the sequences admitted in this decision will need first
  int64_t longest = 0;   // `static`: the batch's longest prompt, its padded length
  const int32_t free_before = blocks.free();
  while (cap_.may_admit(waiting, running, admitted)) {
    Sequence* s = waiting.front();
    const int64_t rem = remaining(*s);
    const int64_t first = lim_.policy == Policy::kChunked ? std::min<int64_t>(rem, lim_.chunk_size)
                                                          : std::min<int64_t>(rem, lim_.max_tokens);
    const int32_t need = blocks.blocks_for(s->n_scheduled + first) - int32_t(s->table.size());
    if (need + promised + int32_t(running.size()) > blocks.free() && !running.empty()) break;
    if (need + promised > blocks.free()) break;
    // A padded batch holds KV for every member's padded prompt: admit no
    // more than fit together (the first always does: submission checked it).
    const int64_t padded = std::max(longest, rem);
    if (lim_.policy == Policy::kStatic && admitted > 0 &&
        int64_t(admitted + 1) * blocks.blocks_for(padded) > free_before)
      break;
    promised += need;
    cap_.admit(s, waiting, running);
    admitted++;
    longest = padded;
  }
  if (lim_.policy == Policy::kStatic) {
    // Pad every member to the longest prompt of the batch (the members are
    // the last `admitted` of running; a recomputed one counts its tokens
    // so far as prompt, as its prefill computes them).
    for (int32_t i = 0; i < admitted; ++i) {
      Sequence* s = running[running.size() - size_t(admitted) + size_t(i)];
      s->pad_next = int64_t(s->tokens.size());
      s->pad_end = std::max(longest, s->pad_next);
    }
  }

  // The work at hand: every token the running sequences could send now
  // (a prefill chunk may follow its predecessor through the ring, so a whole
  // remaining prompt counts). Whole-prefill policies cannot cut a prompt
  // that fits a micro-batch: the largest such is the budget's floor.
  int64_t active = 0, work = 0, floor = 0;
  for (const Sequence* s : running) {
    if (s->done) continue;
    active++;
    if (!schedulable(*s)) continue;
    work += remaining(*s) + padding(*s);
    if (lim_.policy != Policy::kChunked && remaining(*s) <= lim_.max_tokens)
      floor = std::max(floor, remaining(*s));
  }
  form_.begin(active, work, load, floor);
  // Decodes first: their latency is what users feel, and chunked prefill
  // fills the rest of the budget. A copy: preemption edits `running`.
  const std::vector<Sequence*> order = running;
  for (Sequence* s : order)
    if (s->running && remaining(*s) == 1 && padding(*s) == 0)
      take(rows, s, blocks, waiting, running);
  // Then prefill (whole or chunks), oldest admission first.
  for (Sequence* s : order)
    if (s->running && (remaining(*s) > 1 || padding(*s) > 0))
      take(rows, s, blocks, waiting, running);
  return rows;
}

}  // namespace kvasir
