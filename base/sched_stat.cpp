// base/sched_stat.cpp — see sched_stat.h.
#include "base/sched_stat.h"

#include <dirent.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace kvasir {
namespace {

// "run_ns wait_ns timeslices" of one thread.
bool read_schedstat(const std::string& dir, int64_t& run, int64_t& wait) {
  FILE* f = std::fopen((dir + "/schedstat").c_str(), "r");
  if (!f) return false;
  long long r = 0, w = 0;
  const bool ok = std::fscanf(f, "%lld %lld", &r, &w) == 2;
  std::fclose(f);
  if (ok) run = r, wait = w;
  return ok;
}

uint64_t read_nonvoluntary(const std::string& dir) {
  FILE* f = std::fopen((dir + "/status").c_str(), "r");
  if (!f) return 0;
  char line[256];
  unsigned long long n = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "nonvoluntary_ctxt_switches: %llu", &n) == 1) break;
  std::fclose(f);
  return n;
}

}  // namespace

SchedStat read_sched_stat(pid_t pid) {
  SchedStat s;
  if (pid <= 0) return s;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(tasks.c_str());
  if (!d) return s;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string dir = tasks + "/" + e->d_name;
    int64_t run = 0, wait = 0;
    if (!read_schedstat(dir, run, wait)) continue;
    s.run_ns += run;
    s.wait_ns += wait;
    s.nonvoluntary += read_nonvoluntary(dir);
    s.threads++;
  }
  closedir(d);
  s.ok = s.threads > 0;
  return s;
}

}  // namespace kvasir
