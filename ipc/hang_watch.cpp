// ipc/hang_watch.cpp — the per-batch watchdog's decision (ipc/hang_watch.h).
#include "ipc/hang_watch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ipc/segment.h"

namespace kvasir::ipc {

HangSample sample_process(Segment& seg, int p) {
  HangSample s;
  const int S = seg.n_stages();
  StageShared& st = p < S ? seg.stage(p) : seg.member(p - S);
  s.watched = st.status.load() == kStageReady;
  s.batches = st.stats.batches.load(std::memory_order_relaxed);
  s.last_busy_ns = st.last_busy_ns.load(std::memory_order_relaxed);
  if (p >= S) {  // a member: its open request (posted, not answered)
    const MemberCall& call = *seg.member_area(p - S).call;
    s.passed = call.ans_seq.load(std::memory_order_acquire);
    s.pending = call.req_seq.load(std::memory_order_acquire) != s.passed;
    return s;
  }
  Ring& in = seg.ring(p);
  s.passed = st.passed.load(std::memory_order_acquire);
  const uint32_t tail = in.tail.load(std::memory_order_acquire);
  s.pending = in.head.load(std::memory_order_acquire) != tail || tail != s.passed;
  // Waiting for room downstream is the downstream's fault, not this
  // stage's — if the ring downstream really is full (a stage stopped just
  // after it set "blocked" is still this stage's hang). A group's leader
  // waiting for a member's answer is the member's (the member is watched).
  if (st.phase.load() != kPhaseBlocked) return s;
  s.waiting = seg.ring(p + 1).size() >= uint32_t(seg.dims().inflight);
  for (int m = 0; m < seg.n_members() && !s.waiting; ++m) {
    const MemberCall& call = *seg.member_area(m).call;
    s.waiting =
        seg.params().members[m].position == p && call.req_seq.load(std::memory_order_acquire) !=
                                                     call.ans_seq.load(std::memory_order_acquire);
  }
  return s;
}

// Field 2 (comm) may hold spaces and parentheses: parse after the last ')'.
int64_t process_cpu_ticks(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return -1;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');
  if (!p) return -1;
  // After ')': state(3) ppid pgrp session tty tpgid flags minflt cminflt
  // majflt cmajflt utime(14) stime(15).
  char state = 0;
  long long v[12] = {};
  if (std::sscanf(p + 1, " %c %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld", &state,
                  &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10],
                  &v[11]) != 13)
    return -1;
  return int64_t(v[10] + v[11]);
}

std::string Hang::text(const std::string& name, const HangLimits& l) const {
  return fmt::format(
      "{} held a batch for {:.2f} s, {:.2f} s without CPU progress (limit {:.2f} s = "
      "max({} x p99 {:.3f} s, floor {} s); busy cap {} s): hung, killed",
      name, held_s, idle_s, limit_s, l.k, p99_s, l.floor_s, l.busy_cap_s);
}

void HangWatch::reset(int64_t now_ns) {
  since_ns_ = now_ns;
  cpu_ticks_ = -1;
}

double HangWatch::p99_s() const {
  std::vector<uint64_t> h;
  for (uint64_t v : history_)
    if (v) h.push_back(v);
  if (h.empty()) return 0;
  auto k = h.begin() + int64_t(double(h.size() - 1) * 0.99);
  std::nth_element(h.begin(), k, h.end());
  return double(*k) / 1e9;
}

// Records a finished batch (sampled: a tick may see only the last of
// several); whether the process holds work it has not moved on since the
// last look (the first look, or the first after reset(), counts as progress).
bool HangWatch::held(const HangSample& s, int64_t now_ns) {
  if (s.batches != last_batches_) {
    last_batches_ = s.batches;
    history_[next_++ % history_.size()] = s.last_busy_ns;
  }
  if (since_ns_ == 0 || !s.pending || s.waiting || s.passed != last_passed_ || !s.watched) {
    last_passed_ = s.passed;
    reset(now_ns);
    return false;
  }
  return true;
}

std::optional<Hang> HangWatch::judge(const HangLimits& l, int64_t ticks, int64_t now_ns) {
  // A stopped (SIGSTOP) or blocked process's CPU time stands still.
  if (ticks < 0 || ticks != cpu_ticks_) {
    cpu_ticks_ = ticks;
    cpu_since_ns_ = now_ns;
  }
  Hang h;
  h.held_s = double(now_ns - since_ns_) / 1e9;
  h.idle_s = double(now_ns - std::max(since_ns_, cpu_since_ns_)) / 1e9;
  const bool busy_too_long = l.busy_cap_s > 0 && h.held_s > l.busy_cap_s;
  if (h.idle_s <= l.floor_s && !busy_too_long) return std::nullopt;
  h.p99_s = p99_s();
  h.limit_s = std::max(l.k * h.p99_s, l.floor_s);
  if (h.idle_s <= h.limit_s && !busy_too_long) return std::nullopt;
  return h;
}

}  // namespace kvasir::ipc
