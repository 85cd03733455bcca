// ipc/hang_watch.h — the per-batch watchdog's decision (docs/recovery.md,
// "The watchdog"): whether a stage process that holds a batch has hung.
//
// Two owners run it over the processes of their segment: the supervisor
// over the leader's (daemon/supervisor) and `kvasird --worker` over the
// stages it runs for a leader (daemon/worker). Each looks every tick and
// kills what this module calls hung; what a kill leads to (a restart, a
// session's end) is theirs, not this module's.
//
// The rule: a process that holds work (`pending`), is not waiting on
// another (`waiting`) and has moved nothing on (`passed` unchanged) since
// the last look is held. It has hung once it has used no CPU time for
// longer than max(k × p99 of its recent batch times, floor) — CPU time that
// still advances means it computes, slowly (a loaded host), and killing it
// would only compute the same batch again — or once it has held the batch
// longer than the busy cap, CPU or not. floor = 0 turns the watchdog off;
// busy cap = 0 spares a computing process forever.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvasir::ipc {

class Segment;

// The [recovery] watchdog keys of the leader's config (a worker gets them
// in its plan, relay/plan.h).
struct HangLimits {
  double k = 10;            // a batch held > k × p99 of the batch times...
  double floor_s = 10;      // ...and > this many seconds; 0 = no watchdog
  double busy_cap_s = 600;  // a process still using CPU is spared this long; 0 = forever
};

// What one look sees of a process.
struct HangSample {
  bool watched = false;  // serving, and its owner expects it to (not being restarted)
  bool pending = false;  // holds work
  bool waiting = false;  // waits on another process (room downstream, a member's answer)
  uint32_t passed = 0;   // messages (or a member's answers) it has finished with
  uint64_t batches = 0;  // batches it has finished: a new one puts last_busy_ns in the history
  uint64_t last_busy_ns = 0;
};

// The sample of process p of seg: stage p, or member p - n_stages (which
// holds work while a request to it is open). Reads the segment only.
HangSample sample_process(Segment& seg, int p);

// utime + stime of a whole process (all its threads) in clock ticks, -1 if
// unreadable: the "still computing" signal.
int64_t process_cpu_ticks(pid_t pid);

// Why a look found a process hung.
struct Hang {
  double held_s = 0;   // since it last moved work on
  double idle_s = 0;   // of that, without CPU progress
  double limit_s = 0;  // max(k × p99, floor)
  double p99_s = 0;
  // "NAME held a batch for 12.01 s, 12.00 s without CPU progress (limit
  // ...): hung, killed" — what the owner logs and reports.
  std::string text(const std::string& name, const HangLimits& l) const;
};

// One process's watchdog state: its batch-time history and when it last
// made progress or used CPU. One look per tick, on one thread.
class HangWatch {
 public:
  explicit HangWatch(size_t history = 256) : history_(std::max<size_t>(history, 1), 0) {}

  // A hang, or nothing. cpu_ticks is called only while the process is held
  // (a /proc read for a real one: process_cpu_ticks).
  template <class CpuTicks>
  std::optional<Hang> look(const HangLimits& l, const HangSample& s, int64_t now_ns,
                           CpuTicks&& cpu_ticks) {
    if (!held(s, now_ns) || l.floor_s <= 0) return std::nullopt;
    return judge(l, cpu_ticks(), now_ns);
  }
  // Progress as of now (a restarted process starts its watch afresh).
  void reset(int64_t now_ns);

  // The p99 of the remembered batch times, seconds (0 with none).
  double p99_s() const;

 private:
  bool held(const HangSample& s, int64_t now_ns);
  std::optional<Hang> judge(const HangLimits& l, int64_t ticks, int64_t now_ns);

  std::vector<uint64_t> history_;  // recent batch times, ns (a ring; 0: empty)
  size_t next_ = 0;
  uint64_t last_batches_ = 0;
  uint32_t last_passed_ = 0;
  int64_t since_ns_ = 0;      // when it last made progress or had nothing to do (0: not looked at)
  int64_t cpu_ticks_ = -1;    // its utime + stime when last sampled
  int64_t cpu_since_ns_ = 0;  // when that CPU time last advanced
};

}  // namespace kvasir::ipc
