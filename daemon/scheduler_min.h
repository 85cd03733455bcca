// daemon/scheduler_min.h — the minimal iteration-level scheduler ("continuous").
//
// One decision per micro-batch, made by the bridge whenever a ring slot is
// free: decodes first (one token each, for sequences whose last token is
// known), then the next prefill chunks of admitted prompts, then admission
// of waiting requests (FIFO) while rows, the token budget and KV blocks
// allow. Prefills are whole when they fit in one micro-batch; a prompt
// longer than max_tokens goes in chunks of chunk_size, which may follow each
// other through the ring back to back (stages run batches in order).
//
// A sequence whose next token is still unknown (its sampling row in flight)
// is never scheduled again until the result is back: that is what keeps a
// decode out of two in-flight micro-batches.
//
// Blocks: a request reserves blocks for prompt + max_tokens at admission, so
// a running sequence never runs out and nothing is ever preempted. Simple and
// safe, but it under-fills the cache; the full scheduler (its own issue)
// replaces this class with on-demand blocks, preemption and policies.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "daemon/block_manager.h"
#include "daemon/engine.h"

namespace kvasir {

struct Sequence {
  RequestId id = 0;
  GenRequest req;
  EventSink sink;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  int64_t n_scheduled = 0;      // positions sent to the ring (KV written or being written)
  int32_t batches_in_flight = 0;
  bool awaiting = false;        // its sampling row is in flight
  bool cancelled = false;
  bool done = false;            // final event sent; free when batches_in_flight == 0
  std::vector<int32_t> table;   // KV blocks
};

struct SchedRow {
  Sequence* seq = nullptr;
  int32_t pos0 = 0;
  int32_t n_tokens = 0;
  bool sample = false;
};

struct SchedLimits {
  int32_t max_rows = 32;
  int32_t max_tokens = 512;
  int32_t chunk_size = 512;
  int32_t max_num_seqs = 256;
};

class MinScheduler {
 public:
  explicit MinScheduler(SchedLimits lim) : lim_(lim) {}

  // Builds the next micro-batch; moves admitted sequences from `waiting` to
  // `running` and reserves their blocks. Marks the chosen positions as
  // scheduled. Empty when there is nothing to run.
  std::vector<SchedRow> next(std::deque<Sequence*>& waiting, std::vector<Sequence*>& running,
                             BlockManager& blocks);

  // Blocks a request reserves at admission.
  static int64_t reserve_tokens(const Sequence& s) { return s.n_prompt + s.req.max_tokens; }

 private:
  SchedLimits lim_;
};

}  // namespace kvasir
