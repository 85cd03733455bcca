// ipc/ring.h — the in-flight ring: SPSC queues of fixed-size messages in one
// shared segment, and the slots those messages point at.
//
// The segment of one instance (ipc/segment.h, Segment::layout), S stages,
// M expert-group members, I = max_inflight, in address order:
//
//   +--------------------------------------------------------------------+
//   | SegmentHeader  magic "KVSR", version, size, owner pid, shutdown,   |
//   |                the plan (widths, stages, members, model path, kv, |
//   |                grammar table size)                                 |
//   +--------------------------------------------------------------------+
//   | StageShared[S+M] status, pid, KV capacity, error text, stats:      |
//   |                busy/starved/blocked ns, batches, tokens (atomics), |
//   |                kernels text (SIMD levels / device, own seqlock);   |
//   |                the members' slots follow the stages'               |
//   +--------------------------------------------------------------------+
//   | Ring[S+1]      ring s feeds stage s; ring S feeds the bridge       |
//   |                                                                    |
//   |   head (producer) ─┐            ┌─ tail (consumer)                 |
//   |                    ▼            ▼                                  |
//   |   msgs:  [ free ][ full ][ full ][ free ] ... capacity = I          |
//   |   each msg {kind, version, status, batch id, slot, rows, tokens}   |
//   +--------------------------------------------------------------------+
//   | Descriptor[I]  written once by the bridge, read by every stage:    |
//   |                batch id, rows {seq, pos0, n, sample, n_table},     |
//   |                token ids [max_tokens], block tables, sampling,     |
//   |                logit biases [max_rows][300]                        |
//   +--------------------------------------------------------------------+
//   | Result[I]      token id + logprob (+ top-N) per row, status, error |
//   +--------------------------------------------------------------------+
//   | Boundary[I][S-1]  hidden states [max_tokens, hidden] f32 from      |
//   |                   stage s to s+1 for the batch in slot k           |
//   +--------------------------------------------------------------------+
//   | CUDA IPC table [S-1][I]  GPU stages' boundary buffer handles       |
//   |                (ipc/cuda_boundary.h)                               |
//   +--------------------------------------------------------------------+
//   | Grammar table  entries x capacity bytes: structured-output specs   |
//   |                in grammar/'s wire form, each with header {id,      |
//   |                version, bytes, checksum}; written by the bridge,   |
//   |                read by the tail (ipc/grammar_table.h); 0 entries   |
//   |                when structured outputs are off                     |
//   +--------------------------------------------------------------------+
//   | Member area[M] one per expert-group member: MemberCall {req_seq,   |
//   |                layer, n, posted_ns, request bell, ans_seq,         |
//   |                ans_failed, answer bell}, then x [max_tokens,       |
//   |                hidden] f32, ids [max_tokens, top_k] i32,           |
//   |                y [max_tokens * top_k, hidden] f32 (MemberArea)     |
//   +--------------------------------------------------------------------+
//
// A slot k (descriptor k, boundaries [k][*], result k) is a credit the bridge
// holds. Its life:
//
//   FREE ──bridge writes desc──▶ SUBMITTED ──stage 0..S-1 in turn──▶ stage s
//   reads boundary[k][s-1], writes boundary[k][s] ──tail writes result──▶
//   DONE ──bridge reads result──▶ FREE
//
// Only the bridge turns DONE back into FREE, and a stage is finished with
// every byte of slot k before the tail can report it, so no producer ever
// overwrites a slot another process is still reading: the credits are the
// slots, and at most I batches exist at once. Each ring holds I messages, so
// a push never finds its ring full in a correct run; a full ring is still
// handled (the producer sleeps, counted as "blocked") because a stalled
// consumer must not be overrun.
//
// Everything read from the segment is untrusted: a message's slot, counts
// and batch id are checked before use (ipc/batch.h), and a descriptor is
// copied out of the segment before it is validated and used.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "ipc/futex.h"

namespace kvasir::ipc {

constexpr int kMaxInflight = 64;

// One SPSC queue of trivially-copyable messages, placed in shared memory by
// the creator (constructed in place) and used by exactly one producer and one
// consumer process.
template <class T>
struct SpscRing {
  static_assert(std::is_trivially_copyable_v<T>);

  alignas(64) std::atomic<uint32_t> head{0};  // next write (producer), monotonic
  Bell not_empty;                               // rung by the producer after a push
  alignas(64) std::atomic<uint32_t> tail{0};   // next read (consumer), monotonic
  Bell not_full;                                // rung by the consumer after a pop
  alignas(64) uint32_t capacity = 0;            // set once at creation
  T msgs[kMaxInflight];

  void init(uint32_t cap) { capacity = cap; }

  uint32_t size() const {
    return head.load(std::memory_order_acquire) - tail.load(std::memory_order_acquire);
  }

  // Non-blocking; false if full (or the capacity word is corrupt).
  bool try_push(const T& m) {
    const uint32_t cap = capacity;
    if (cap == 0 || cap > kMaxInflight) return false;
    const uint32_t h = head.load(std::memory_order_relaxed);
    if (h - tail.load(std::memory_order_acquire) >= cap) return false;
    msgs[h % cap] = m;
    head.store(h + 1, std::memory_order_release);
    not_empty.ring();
    return true;
  }

  // Non-blocking; false if empty. A head more than `capacity` ahead (a
  // corrupt or hostile producer) reads as empty: nothing is trusted.
  bool try_pop(T& out) {
    const uint32_t cap = capacity;
    if (cap == 0 || cap > kMaxInflight) return false;
    const uint32_t t = tail.load(std::memory_order_relaxed);
    const uint32_t h = head.load(std::memory_order_acquire);
    if (h == t || h - t > cap) return false;
    out = msgs[t % cap];
    tail.store(t + 1, std::memory_order_release);
    not_full.ring();
    return true;
  }

  // Blocking forms: a short counted spin, then wait on the bell as `w` says
  // (a bounded timed spin when w.spin_ns > 0, then a sleep). Return false
  // when `stop()` becomes true (checked at least every w.poll_ns, and after
  // the timed spin).
  template <class Stop>
  bool push(const T& m, Stop&& stop, const WaitPolicy& w = {}) {
    for (int spin = 0;; ++spin) {
      uint32_t seen = not_full.seen();
      if (try_push(m)) return true;
      if (stop()) return false;
      if (spin < 64) continue;
      // The timed spin once per call: a bell rung for nothing, or the poll's
      // timeouts, must not turn a long wait into a busy one.
      not_full.await(seen, spin == 64 ? w : WaitPolicy{0, w.poll_ns});
    }
  }
  template <class Stop>
  bool pop(T& out, Stop&& stop, const WaitPolicy& w = {}) {
    for (int spin = 0;; ++spin) {
      uint32_t seen = not_empty.seen();
      if (try_pop(out)) return true;
      if (stop()) return false;
      if (spin < 64) continue;
      not_empty.await(seen, spin == 64 ? w : WaitPolicy{0, w.poll_ns});
    }
  }
};

}  // namespace kvasir::ipc
