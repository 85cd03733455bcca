// One direction of a shaped link: the frames that leave through one port.
//
// The model, in the order a frame meets it:
//   1. loss: dropped with probability `drop` on arrival (a seeded RNG, so a
//      run repeats), like netem's loss, before it takes any link time;
//   2. a full line (`limit` frames held) tail-drops the frame;
//   3. serialisation: the link sends one frame at a time at `rate_bps`; a
//      frame starts when it arrives or when the previous one is done,
//      whichever is later, and takes size * 8 / rate (layer-2 bytes: no
//      preamble, FCS or inter-frame gap);
//   4. propagation: `delay_ms` plus jitter, uniform in [-jitter, +jitter]
//      and clamped so that a frame never leaves before the one ahead of it
//      (no reordering: TCP would read reordering as loss) nor before it was
//      serialised.
// Departure times are therefore non-decreasing, so the line is a FIFO and
// its head is always the next frame due: the shaper's loop needs no
// priority queue, only the earliest head over its lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvasir::linkshaper {

using Nanos = int64_t;  // CLOCK_MONOTONIC nanoseconds

struct LinkParams {
  double delay_ms = 0;   // fixed one-way delay
  double jitter_ms = 0;  // half-width of the uniform jitter
  double rate_bps = 0;   // bandwidth cap in bits/s; 0 is no cap
  double drop = 0;       // loss probability per frame, [0, 1]
  size_t limit = 1000;   // frames held at most (netem's default limit)
};

struct LineCounters {
  uint64_t frames_in = 0;  // offered to the line
  uint64_t bytes_in = 0;
  uint64_t frames_out = 0;  // sent out of the port
  uint64_t bytes_out = 0;
  uint64_t dropped_random = 0;    // lost on purpose (`drop`)
  uint64_t dropped_full = 0;      // tail-dropped: the line held `limit` frames
  uint64_t dropped_oversize = 0;  // larger than a slot (MTU + headers)
  uint64_t send_errors = 0;       // the kernel refused the send
  int64_t late_ns_sum = 0;        // how late frames left, summed over frames_out:
  int64_t late_ns_max = 0;        //   the loop's timer and wake-up error
  size_t queued = 0;              // frames held now
  size_t queued_max = 0;
};

enum class Admit { kQueued, kDropRandom, kDropFull, kOversize };

class DelayLine {
 public:
  // `slot_bytes`: the largest frame held; memory is limit * slot_bytes,
  // allocated once.
  DelayLine(const LinkParams& params, size_t slot_bytes, uint64_t seed);

  Admit push(std::span<const uint8_t> frame, Nanos now);
  // The head's departure time, or -1 when the line is empty.
  Nanos next_departure() const { return count_ ? slots_[head_].depart : -1; }
  // The head frame when it is due at `now`, else an empty span.
  std::span<const uint8_t> due(Nanos now) const;
  // Removes the head after the caller sent it at `now` (sent) or failed to.
  void pop(bool sent, Nanos now);

  const LineCounters& counters() const { return c_; }
  const LinkParams& params() const { return p_; }

 private:
  struct Slot {
    Nanos depart = 0;
    uint32_t len = 0;
  };
  Nanos departure(size_t bytes, Nanos now);

  LinkParams p_;
  size_t slot_bytes_;
  std::vector<uint8_t> storage_;  // [limit, slot_bytes]
  std::vector<Slot> slots_;       // [limit], a ring from head_
  size_t head_ = 0;
  size_t count_ = 0;
  Nanos tx_free_ = 0;      // when the serialiser finishes its last frame
  Nanos last_depart_ = 0;  // departure of the newest frame held or sent
  std::mt19937_64 rng_;
  LineCounters c_;
};

}  // namespace kvasir::linkshaper
