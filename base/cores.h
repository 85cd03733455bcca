// base/cores.h — how many CPUs this process may run on.
#pragma once

#include <sched.h>

#include <thread>

namespace kvasir {

// The CPUs in this process's affinity mask (what `taskset` or a cgroup's
// cpuset leaves it), at least 1; the hardware's count where the mask
// cannot be read.
inline int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? int(hw) : 1;
}

}  // namespace kvasir
