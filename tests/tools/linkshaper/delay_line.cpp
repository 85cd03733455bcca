#include "delay_line.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvasir::linkshaper {

namespace {
Nanos ms_to_ns(double ms) {
  return static_cast<Nanos>(std::llround(ms * 1e6));
}
}  // namespace

DelayLine::DelayLine(const LinkParams& params, size_t slot_bytes, uint64_t seed)
    : p_(params),
      slot_bytes_(slot_bytes),
      storage_(std::max<size_t>(params.limit, 1) * slot_bytes),
      slots_(std::max<size_t>(params.limit, 1)),
      rng_(seed) {}

Nanos DelayLine::departure(size_t bytes, Nanos now) {
  Nanos start = std::max(now, tx_free_);
  Nanos tx = 0;
  if (p_.rate_bps > 0) tx = static_cast<Nanos>(std::llround(bytes * 8.0 * 1e9 / p_.rate_bps));
  tx_free_ = start + tx;
  Nanos prop = ms_to_ns(p_.delay_ms);
  if (p_.jitter_ms > 0) {
    std::uniform_real_distribution<double> u(-p_.jitter_ms, p_.jitter_ms);
    prop += ms_to_ns(u(rng_));
  }
  // Jitter below zero cannot send a frame before it was serialised, and a
  // frame never overtakes the one ahead of it (no reordering).
  Nanos depart = std::max({tx_free_ + std::max<Nanos>(prop, 0), last_depart_});
  last_depart_ = depart;
  return depart;
}

Admit DelayLine::push(std::span<const uint8_t> frame, Nanos now) {
  c_.frames_in++;
  c_.bytes_in += frame.size();
  if (frame.size() > slot_bytes_) {
    c_.dropped_oversize++;
    return Admit::kOversize;
  }
  if (p_.drop > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p_.drop) {
    c_.dropped_random++;
    return Admit::kDropRandom;
  }
  if (count_ == slots_.size()) {
    c_.dropped_full++;
    return Admit::kDropFull;
  }
  size_t at = (head_ + count_) % slots_.size();
  slots_[at].depart = departure(frame.size(), now);
  slots_[at].len = static_cast<uint32_t>(frame.size());
  std::memcpy(storage_.data() + at * slot_bytes_, frame.data(), frame.size());
  count_++;
  c_.queued = count_;
  c_.queued_max = std::max(c_.queued_max, count_);
  return Admit::kQueued;
}

std::span<const uint8_t> DelayLine::due(Nanos now) const {
  if (!count_ || slots_[head_].depart > now) return {};
  return {storage_.data() + head_ * slot_bytes_, slots_[head_].len};
}

void DelayLine::pop(bool sent, Nanos now) {
  if (!count_) return;
  if (sent) {
    c_.frames_out++;
    c_.bytes_out += slots_[head_].len;
    Nanos late = std::max<Nanos>(now - slots_[head_].depart, 0);
    c_.late_ns_sum += late;
    c_.late_ns_max = std::max(c_.late_ns_max, late);
  } else {
    c_.send_errors++;
  }
  head_ = (head_ + 1) % slots_.size();
  count_--;
  c_.queued = count_;
}

}  // namespace kvasir::linkshaper
