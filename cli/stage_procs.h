// cli/stage_procs.h — the daemon's stage processes as this host's kernel
// sees them: how long each waited for a CPU (`kvasir diagnose`'s
// "descheduled", cli/diagnose.h).
//
// The daemon's stats say what each stage did with the time it had; only
// the kernel knows the time a runnable stage waited on a run queue behind
// other work. The CLI reads it itself, on the daemon's host: the daemon
// behind a unix socket is its peer (SO_PEERCRED), its stages are the
// children it started with `--stage N` (stages/stage.h), and their figures
// are /proc/PID/task/*/schedstat (base/sched_stat.h). Over TCP, or where
// /proc does not show them, nothing is added and no finding is made.
#pragma once

#include <sys/types.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace kvasir::cli {

// The pid of the process listening on the unix socket `path`; 0 when
// there is none or it cannot be told.
pid_t socket_peer_pid(const std::string& path);

// `daemon`'s children started as `--stage N`, by N (the process index: the
// stages, then expert-group members; the stats' stages[].index).
std::map<int, pid_t> stage_pids(pid_t daemon);

// Adds to every entry of stats["stages"] whose index has a pid its
// scheduler figures, summed over the process's threads since it started:
// cpu_s (on a CPU), cpu_wait_s (runnable, on a run queue), preemptions.
void add_sched_figures(nlohmann::json& stats, const std::map<int, pid_t>& pids);

}  // namespace kvasir::cli
