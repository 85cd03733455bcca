// base/cores.h — how many CPUs this process may run on.
#pragma once

#include <string>

namespace kvasir {

// The CPUs in this process's affinity mask (what `taskset` or a cgroup's
// cpuset leaves it), capped by a cgroup CPU quota on its cgroup or an
// ancestor (cgroup_cpu_quota: a container's CPU limit, which Kubernetes
// sets as a quota and not as a cpuset), at least 1; the hardware's count
// where the mask cannot be read.
int available_cores();

// The CPUs a cgroup CPU quota allows this process, rounded up: cgroup v2's
// cpu.max ("QUOTA PERIOD"; "max": none), or v1's cpu.cfs_quota_us /
// cpu.cfs_period_us (-1: none), the smallest along the path from the
// process's cgroup up to the root. 0: no quota, or none that can be read.
// `proc_self_cgroup` is /proc/self/cgroup's text; `mount` where the
// cgroup filesystems are (tests pass a folder of their own).
int cgroup_cpu_quota(const std::string& proc_self_cgroup,
                     const std::string& mount = "/sys/fs/cgroup");

}  // namespace kvasir
