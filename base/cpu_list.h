// base/cpu_list.h — CPU lists ("0-15,32,34-35", as taskset -c and cpuset
// write them): parsing, checking against the CPUs this process may use,
// and pinning the calling process to one.
//
// Used for a stage's `cpus` in the plan ([[stages]] cpus, docs/config.md):
// the daemon checks the list when it reads the config, the stage process
// pins itself to it at start (stages/stage_main.cpp), before any of its
// threads exist, so its kernel threads inherit the set.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvasir {

// The CPUs a list names, ascending, each once. Comma-separated items, each
// a CPU number or an inclusive range "A-B" (A <= B), spaces around items
// allowed, numbers < kMaxCpuIndex. Refuses (kInvalidArgument, the message
// starting with `field`) an empty list or item, a reversed range, a number
// out of range, anything else.
constexpr int kMaxCpuIndex = 8192;
Status parse_cpu_list(std::string_view text, std::string_view field, std::vector<int>& out);

// The CPUs this process may run on (its affinity mask), ascending.
std::vector<int> allowed_cpus();

// parse_cpu_list, then every CPU must be one of `allowed` (the daemon's:
// allowed_cpus()); the refusal names the first that is not, and the set.
Status check_cpu_list(std::string_view text, std::string_view field, const std::vector<int>& allowed,
                      std::vector<int>& out);

// Pins the calling process's current thread — at start, the whole process
// to come — to `cpus` (sched_setaffinity). kInvalidArgument naming `field`
// when the kernel refuses (a CPU gone offline since the check).
Status pin_to_cpus(const std::vector<int>& cpus, std::string_view field);

// "0-3,8": the shortest list naming `cpus` (ascending).
std::string format_cpu_list(const std::vector<int>& cpus);

}  // namespace kvasir
