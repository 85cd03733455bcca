// base/sched_stat.h — how much CPU a process got, and how long it waited
// for one, from the kernel's scheduler statistics (/proc/PID/task/*/
// schedstat and status).
//
// What `kvasir diagnose` tells a descheduled stage by: a stage that is
// runnable but waits on a run queue behind other work loses its hand-offs'
// time, and the ring its in-flight gain (docs/ring.md, "Waits").
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace kvasir {

struct SchedStat {
  bool ok = false;         // false: no such process, or no schedstat (kernel built without it)
  int64_t run_ns = 0;      // on a CPU
  int64_t wait_ns = 0;     // runnable, waiting on a run queue
  uint64_t nonvoluntary = 0;  // context switches the process did not ask for (preempted)
  int threads = 0;
};

// Sums over every thread of `pid` (its /proc/PID/task/*). Threads that end
// between listing and reading are skipped; a thread's figures leave with it.
SchedStat read_sched_stat(pid_t pid);

}  // namespace kvasir
