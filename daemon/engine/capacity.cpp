#include "daemon/engine/capacity.h"

#include <algorithm>

#include "base/check.h"

namespace kvasir {

bool CapacityScheduler::may_admit(int32_t admitted_this_batch) const {
  if (q_.waiting.empty() || q_.waiting.front()->finished()) return false;
  const int32_t running = int32_t(q_.running.size());
  if (running >= lim_.max_num_seqs) return false;
  switch (lim_.policy) {
    case Policy::kNaive:
      return running == 0;
    case Policy::kStatic:
      // The batch forms only when the previous one has wholly left, and only
      // within one decision: later arrivals wait for the next batch.
      return running == admitted_this_batch && admitted_this_batch < lim_.max_rows;
    case Policy::kContinuous:
    case Policy::kChunked:
      return true;
  }
  return false;
}

void CapacityScheduler::admit(Sequence* s) {
  q_.waiting.pop_front();
  s->start_running();
  s->admitted = next_admit_++;
  q_.running.push_back(s);
}

int32_t CapacityScheduler::admit_waiting() {
  // A waiter is admitted only when the pool has blocks for its first piece
  // and one spare block per running sequence (their next decodes):
  // admitting into a pool that decodes are about to need would only cause a
  // preemption. The blocks are promised here, not taken: they are taken when
  // the piece is scheduled (grow), so a sequence admitted now but scheduled
  // a few batches later holds no KV meanwhile. Held early, two long prompts'
  // first chunks (512 slots each) waited unwritten behind the chunks of a
  // third: ~8 of the 10.5% KV waste measured on bench/policies' trace.
  int32_t admitted = 0;
  int32_t promised = 0;      // blocks the sequences admitted in this decision will need first
  int32_t promised_swa = 0;  // the same in the sliding group
  int64_t longest = 0;       // `static`: the batch's longest prompt, its padded length
  const int32_t free_before = blocks_.free();
  while (may_admit(admitted)) {
    Sequence* s = q_.waiting.front();
    const int64_t rem = s->remaining();
    int32_t swa_need = 0;
    const int32_t need = first_need(s, &swa_need);
    const int32_t spare = int32_t(q_.running.size());
    if (need + promised + spare > blocks_.free() && spare > 0) break;
    if (need + promised > blocks_.free()) break;
    if (swa_.on() && swa_need + promised_swa + spare > swa_.free()) break;
    // A padded batch holds KV for every member's padded prompt: admit no
    // more than fit together (the first always does: submission checked it).
    const int64_t padded = std::max(longest, rem);
    if (lim_.policy == Policy::kStatic && admitted > 0 &&
        int64_t(admitted + 1) * blocks_.blocks_for(padded) > free_before)
      break;
    promised += need;
    promised_swa += swa_need;
    admit(s);
    admitted++;
    longest = padded;
  }
  if (lim_.policy == Policy::kStatic) pad_static_batch(admitted, longest);
  return admitted;
}

int32_t CapacityScheduler::first_need(const Sequence* s, int32_t* swa_need) const {
  HybridHit hit;
  if (may_reuse(s) && s->table.empty() && s->n_scheduled == 0)
    hit = cache_.find_prefix(s->tokens, s->req.cache_salt);
  const int64_t start = s->n_scheduled + hit.tokens(blocks_.block_size());
  const int64_t rem = int64_t(s->tokens.size()) - start;
  const int64_t first = lim_.policy == Policy::kChunked ? std::min<int64_t>(rem, lim_.chunk_size)
                                                        : std::min<int64_t>(rem, lim_.max_tokens);
  // Per group: the new blocks past the hit, and the hit's evictable ones
  // (taking them off the evictable list uses up capacity too).
  *swa_need = swa_.need(s->swa_table, start + first) - int32_t(hit.swa.size()) + hit.swa_evictable;
  return blocks_.blocks_for(start + first) - int32_t(s->table.size()) - hit.n_blocks() +
         hit.full.n_evictable;
}

// Pads every member to the longest prompt of the batch (the members are the
// last `admitted` of running; a recomputed one counts its tokens so far as
// prompt, as its prefill computes them).
void CapacityScheduler::pad_static_batch(int32_t admitted, int64_t longest) {
  for (int32_t i = 0; i < admitted; ++i) {
    Sequence* s = q_.running[q_.running.size() - size_t(admitted) + size_t(i)];
    s->pad_next = int64_t(s->tokens.size());
    s->pad_end = std::max(longest, s->pad_next);
  }
}

// The newest running sequence with nothing in flight: the one whose loss
// costs least and whose eviction cannot touch KV a stage is reading.
Sequence* CapacityScheduler::victim(const std::vector<SchedRow>& taken) const {
  Sequence* victim = nullptr;
  for (Sequence* v : q_.running) {
    // (A table of reused blocks only is no one's yet: take() gives it back.)
    if (v->batches_in_flight > 0 || v->awaiting() || v->finished() ||
        int32_t(v->table.size()) <= v->n_shared)
      continue;
    if (std::any_of(taken.begin(), taken.end(), [&](const SchedRow& r) { return r.seq == v; }))
      continue;
    if (!victim || v->admitted > victim->admitted) victim = v;
  }
  return victim;
}

bool CapacityScheduler::short_of_blocks(const Sequence* s, int64_t tokens) const {
  return blocks_.blocks_for(tokens) - int32_t(s->table.size()) > blocks_.free() ||
         swa_.need(s->swa_table, tokens) > swa_.free();
}

bool CapacityScheduler::grow(Sequence* s, int64_t tokens, const std::vector<SchedRow>& taken) {
  // Its next row starts at n_scheduled (or, padding, past its tokens):
  // nothing before that position's window is read again.
  swa_.slide(s->swa_table, s->n_scheduled);
  // A sequence with nothing computed yet (just admitted, or back after a
  // preemption; blocks it reused from the cache are not its work) never
  // evicts another for its first blocks: it would trade work done for work
  // not started. It waits for room instead.
  const bool may_preempt = int32_t(s->table.size()) > s->n_shared;
  while (short_of_blocks(s, tokens)) {
    if (!may_preempt) return false;
    Sequence* v = victim(taken);
    if (!v) return false;
    preempt(v, PreemptCause::kKvPressure);
    if (v == s) return false;  // s was the newest: it waits, the older ones go on
  }
  return ensure(s, tokens);
}

bool CapacityScheduler::ensure(Sequence* s, int64_t tokens) {
  if (short_of_blocks(s, tokens)) return false;
  return blocks_.ensure(s->table, tokens) && swa_.ensure(s->swa_table, tokens);
}

int64_t CapacityScheduler::room(const Sequence* s, int64_t end) const {
  const int64_t bs = blocks_.block_size();
  int64_t r = (int64_t(s->table.size()) + blocks_.free()) * bs - end;
  if (swa_.on()) r = std::min(r, (int64_t(s->swa_table.size()) + swa_.free()) * bs - end);
  return r;
}

void CapacityScheduler::release(Sequence* s) {
  blocks_.release(s->table);
  swa_.release(s->swa_table);
}

void CapacityScheduler::trim(Sequence* s, int64_t tokens) {
  blocks_.trim(s->table, tokens);
  swa_.trim(s->swa_table, tokens);
}

void CapacityScheduler::preempt(Sequence* s, PreemptCause why) {
  KV_CHECK(s->running() && s->batches_in_flight == 0,
           "scheduler: preempting request {} while it has a batch in flight", s->id);
  release(s);  // its full blocks stay cached: its recompute may reuse them
  s->reset_for_recompute();
  q_.running.erase(std::find(q_.running.begin(), q_.running.end(), s));
  q_.waiting.push_front(s);
  (why == PreemptCause::kKvPressure ? preemptions_ : requeued_)++;
}

// ---- prefix caching -------------------------------------------------------------

bool CapacityScheduler::may_reuse(const Sequence* s) const {
  // A penalised row is sampled with the sequence's history from position
  // 0, which the tail builds from the rows it sees: it must see them all.
  // Prompt logprobs need every prompt position's logits: no cached prefix.
  return blocks_.caching() && !penalties_active(s->req.sampling) && s->req.prompt_logprobs < 0;
}

int64_t CapacityScheduler::reusable(const Sequence* s) const {
  if (!may_reuse(s) || !s->table.empty() || s->n_scheduled != 0) return 0;
  return cache_.find_prefix(s->tokens, s->req.cache_salt).tokens(blocks_.block_size());
}

int64_t CapacityScheduler::reuse_prefix(Sequence* s) {
  if (!may_reuse(s) || !s->table.empty() || s->n_scheduled != 0) return 0;
  const HybridHit hit = cache_.find_prefix(s->tokens, s->req.cache_salt);
  cache_.reuse(s->table, s->swa_table, hit, s->cache);
  s->n_shared = hit.n_blocks();
  s->n_scheduled = hit.tokens(blocks_.block_size());
  return s->n_scheduled;
}

void CapacityScheduler::undo_reuse(Sequence* s) {
  KV_CHECK(int32_t(s->table.size()) == s->n_shared, "scheduler: undoing a reuse after growth");
  release(s);
  s->n_scheduled = 0;  // (a fork had moved it to the last prompt token)
  s->n_shared = 0;
  s->cache = {};
}

void CapacityScheduler::count_lookup(Sequence* s, int64_t hit) {
  if (!blocks_.caching()) return;
  prefix_queries_ += int64_t(s->tokens.size());
  prefix_hits_ += hit;
  if (s->cached_tokens < 0) s->cached_tokens = int32_t(std::min<int64_t>(hit, s->n_prompt));
}

void CapacityScheduler::cache_written(Sequence* s, uint64_t writer) {
  cache_.cache_full_blocks(s->table, s->swa_table, s->tokens, s->n_scheduled, s->req.cache_salt,
                           writer, s->cache);
}

}  // namespace kvasir
