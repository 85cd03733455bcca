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
#include "daemon/engine/engine.h"

namespace kvasir {

// The id a sequence goes by in descriptors (DescRow::seq_id, so the tail's
// penalty histories): the request's id for its first choice (as before
// parallel sampling), the choice above bit 48 for the others.
inline uint64_t sequence_key(RequestId id, int32_t index) {
  return uint64_t(id) | (uint64_t(index) << 48);
}

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
  bool awaiting = false;       // its sampling row is in flight
  bool done = false;           // final event sent; freed when batches_in_flight == 0
  bool running = false;        // in the running set
  uint64_t admitted = 0;       // admission order: the newest is preempted first
  int32_t preempted = 0;       // times it lost its blocks (KV pressure or a lost stage)
  std::vector<int32_t> table;  // KV blocks
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
  bool tainted = false;
  // Parallel sampling: the batch that carried its last prompt position (0:
  // not yet, or since a preemption); and, for a choice that copied choice
  // 0's last prompt block (copy-on-write), that batch of choice 0's: a
  // failure up to it may have left the copy's source unwritten.
  uint64_t prompt_batch = 0;
  uint64_t copy_writer = 0;

  // Positions not yet sent to the ring (its prompt, or a recompute, or the
  // one decode position once its last token is known).
  int64_t remaining() const { return int64_t(tokens.size()) - n_scheduled; }
  int64_t padding() const { return pad_end - pad_next; }
  // Whether it could go into a micro-batch now. A sequence whose sampling
  // row is in flight waits for its token: a decode is never in two batches.
  bool schedulable() const {
    return (remaining() > 0 || padding() > 0) && !awaiting && !done && !tainted;
  }
  // Whether it is past its prompt: a token generated, or its first being
  // sampled. The time budget protects these rows' gaps; while none is, the
  // ring carries prompts only (Scheduler::pipeline_piece).
  bool decoding() const { return n_generated > 0 || awaiting; }
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
};

// Where a sequence stands, both queues kept by the Scheduler: waiting in
// FIFO order (a preempted sequence goes back to the head), running in
// admission order.
struct SeqQueues {
  std::deque<Sequence*> waiting;
  std::vector<Sequence*> running;
};

}  // namespace kvasir
