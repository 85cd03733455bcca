// daemon/engine/sequence.h — one request as the scheduler keeps it.
//
// Internal to the scheduler (scheduler.h, capacity.h, batch_former.h): the
// bridge never sees a Sequence. It hands a request to Scheduler::add, gets
// plain rows back from Scheduler::schedule and gives results to
// Scheduler::update; every field below is written by the scheduler alone.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "daemon/engine/block_manager.h"
#include "daemon/engine/draft_length.h"
#include "daemon/engine/engine.h"

namespace kvasir {

// The id a sequence goes by in descriptors (DescRow::seq_id, so the tail's
// penalty histories): the request's id for its first choice (as before
// parallel sampling), the choice above bit 48 for the others.
inline uint64_t sequence_key(RequestId id, int32_t index) {
  return uint64_t(id) | (uint64_t(index) << 48);
}

// The id `static` padding's rows go by: a filler sequence of its own beside
// the member it pads (bit 63; choices stay below it), whose rows carry no
// sampling state. The stages see ordinary rows that are never sampled and
// keep no record of them, so padding is decided and known in the engine
// alone (docs/scheduler.md, "What `static` pads").
inline uint64_t filler_key(RequestId id, int32_t index) {
  return sequence_key(id, index) | (uint64_t(1) << 63);
}

// Where a sequence stands. Waiting and preempted sequences are in the
// waiting queue; prefilling and decoding ones in the running set; a
// finished one stays in the running set until nothing in flight names it
// (Scheduler::reap), then it is forgotten.
enum class SeqState : uint8_t {
  kWaiting,     // queued, never admitted
  kPreempted,   // queued again after losing its blocks: to be recomputed
  kPrefilling,  // running: its prompt going in
  kDecoding,    // running, past its prompt: a token generated, or its first being sampled
  kFinished,    // its final event sent (finish_reason says why)
};

struct Sequence {
  RequestId id = 0;
  int32_t index = 0;  // its choice of an n > 1 request
  GenRequest req;
  EventSink sink;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  int64_t n_scheduled = 0;  // positions sent to the ring (KV written or being written)
  int32_t batches_in_flight = 0;
  SeqState state = SeqState::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;  // once kFinished
  uint64_t admitted = 0;       // admission order: the newest is preempted first
  int32_t preempted = 0;       // times it lost its blocks (KV pressure or a lost stage)
  std::vector<int32_t> table;  // KV blocks (the full-attention group's)
  // The sliding-window group's (sliding_group.h; empty without one): as
  // long as `table`, its entries before the window unmapped (-1).
  std::vector<int32_t> swa_table;
  // `static` padding (docs/scheduler.md): filler positions [pad_next,
  // pad_end) past its prompt still to be computed before its prefill, so
  // its prefill costs what the batch's longest prompt costs.
  int64_t pad_next = 0, pad_end = 0;
  // Micro-batches in which the time budget left its prefill no more than
  // the aging floor: the floor doubles with them (batch_former.h).
  int32_t starved = 0;
  // Prefix caching (docs/scheduler.md): the first n_shared blocks of
  // `table` were reused from the cache (read, never written by it); the
  // cursor tracks which full blocks are cached. cached_tokens: what its
  // first lookup found (usage reports it). tainted: a block it reused was
  // lost with a failed batch; it is recomputed once nothing is in flight.
  int32_t n_shared = 0;
  int32_t cached_tokens = -1;
  // When its last token was born (BatchResult::done_s; 0: none yet, or
  // unknown): the start of the gap its next token closes.
  double last_token_s = 0;
  CacheCursor cache;
  // Apart from the state, as it may mark a prefilling or a decoding
  // sequence alike: its results in flight are dropped, and it is
  // recomputed (preempted) once nothing of it is in the ring.
  bool tainted = false;
  // Parallel sampling: the batch that carried its last prompt position (0:
  // not yet, or since a preemption); and, for a choice that copied choice
  // 0's last prompt block (copy-on-write), that batch of choice 0's: a
  // failure up to it may have left the copy's source unwritten.
  uint64_t prompt_batch = 0;
  uint64_t copy_writer = 0;
  // Speculative decoding: its drafter's recent acceptance, which sets how
  // many drafts its rows carry (draft_length.h). Kept across a preemption:
  // the text it judges is the same.
  DraftEstimate draft;
  // Grammar-forced drafts (docs/speculative.md): the tokens the tail found
  // its grammar forcing after the sequence's first forced_at tokens (its
  // last result); drafted only while tokens.size() == forced_at. Their
  // acceptance is kept apart from the drafter's: a forced string is
  // certain, only its tokenization is a guess.
  std::vector<int32_t> forced;
  size_t forced_at = 0;
  DraftEstimate forced_draft;

  // Positions not yet sent to the ring (its prompt, or a recompute, or the
  // one decode position once its last token is known).
  int64_t remaining() const { return int64_t(tokens.size()) - n_scheduled; }
  int64_t padding() const { return pad_end - pad_next; }
  bool running() const { return state == SeqState::kPrefilling || state == SeqState::kDecoding; }
  bool finished() const { return state == SeqState::kFinished; }
  // Whether its sampling row is in flight: it is past its prompt and every
  // position it knows has been sent (the row that sends the last known
  // position always samples, BatchFormer::add), so its next token is
  // still unknown. (A tainted one's dropped result leaves it so until it
  // is preempted, before the next batch is formed.)
  bool awaiting() const { return state == SeqState::kDecoding && remaining() == 0; }
  // Whether it could go into a micro-batch now. A sequence whose sampling
  // row is in flight waits for its token: a decode is never in two batches.
  bool schedulable() const {
    return (remaining() > 0 || padding() > 0) && !awaiting() && !finished() && !tainted;
  }
  // Whether it is past its prompt: a token generated, or its first being
  // sampled. The time budget protects these rows' gaps; while none is, the
  // ring carries prompts only (TimeBudget::pipeline_piece).
  bool decoding() const { return state == SeqState::kDecoding; }

  // Joins the running set: decoding at once if it has generated tokens
  // (a recompute: its client is waiting for the next one).
  void start_running() { state = n_generated > 0 ? SeqState::kDecoding : SeqState::kPrefilling; }
  // Its final event has been sent (or is not to be: a lost request).
  void end(FinishReason why) {
    state = SeqState::kFinished;
    finish_reason = why;
  }
  // THE reset of a preemption (CapacityScheduler::preempt, for KV pressure,
  // a lost stage or a lost cached block alike), once its blocks went back
  // and `table` is empty: it is to be recomputed from its prompt plus the
  // tokens generated so far (nothing is re-sent to the client), its
  // `static` padding is dropped (its next batch pads it afresh), its cache
  // cursor and fork state are forgotten (its prompt is to be sent again),
  // and it is counted.
  void reset_for_recompute() {
    n_scheduled = 0;
    pad_next = pad_end = 0;
    n_shared = 0;
    cache = {};
    tainted = false;
    prompt_batch = copy_writer = 0;
    state = SeqState::kPreempted;
    preempted++;
  }
  uint64_t key() const { return sequence_key(id, index); }
};

// A row of the micro-batch being formed. Scheduler::schedule turns the
// finished batch into a SchedulerOutput (plain copies, no pointer).
struct SchedRow {
  Sequence* seq = nullptr;
  int32_t pos0 = 0;
  int32_t n_tokens = 0;
  bool sample = false;
  // Padding (`static`): n_tokens filler tokens at [pos0, pos0 + n_tokens),
  // all past the sequence's tokens. Computed like any row, never sampled;
  // the KV they write is overwritten by the sequence's own decodes before
  // any row reads it (attention at position q reads positions <= q only).
  bool pad = false;
  // Copy-on-write before the batch: block copy_src into copy_dst (-1: none).
  int32_t copy_src = -1, copy_dst = -1;
  // Speculative decoding (docs/speculative.md): a decode row's draft tokens,
  // the last draft.size() of its n_tokens, at positions past the
  // sequence's tokens. Not the sequence's until the result accepts them:
  // n_scheduled counts the row's own position only.
  std::vector<int32_t> draft = {};
  bool forced = false;  // the drafts are grammar-forced tokens (Sequence::forced)
};

// Where a sequence stands, both queues kept by the Scheduler: waiting in
// FIFO order (a preempted sequence goes back to the head), running in
// admission order.
struct SeqQueues {
  std::deque<Sequence*> waiting;
  std::vector<Sequence*> running;
};

}  // namespace kvasir
