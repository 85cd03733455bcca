#include "base/cores.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace kvasir {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// CPUs of one cgroup's quota (rounded up), 0 for none or unreadable.
int cpus_of(double quota, double period) {
  if (!(quota > 0) || !(period > 0)) return 0;
  return std::max(1, int(std::ceil(quota / period - 1e-9)));
}

int v2_quota(const std::string& dir) {
  std::istringstream in(read_text(dir + "/cpu.max"));
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max") return 0;
  try {
    return cpus_of(std::stod(quota), period);
  } catch (const std::exception&) {
    return 0;
  }
}

int v1_quota(const std::string& dir) {
  std::istringstream q(read_text(dir + "/cpu.cfs_quota_us")), p(read_text(dir + "/cpu.cfs_period_us"));
  double quota = -1, period = 0;
  if (!(q >> quota) || !(p >> period)) return 0;
  return cpus_of(quota, period);
}

// The smallest quota from `path` (a cgroup path, "/a/b") up to the root of
// the hierarchy mounted at `base`.
int smallest_up(const std::string& base, std::string path, int (*quota)(const std::string&)) {
  int best = 0;
  while (true) {
    const int q = quota(base + (path == "/" ? "" : path));
    if (q > 0) best = best > 0 ? std::min(best, q) : q;
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return best;
}

}  // namespace

int cgroup_cpu_quota(const std::string& proc_self_cgroup, const std::string& mount) {
  int best = 0;
  auto take = [&](int q) {
    if (q > 0) best = best > 0 ? std::min(best, q) : q;
  };
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // "ID:CONTROLLERS:PATH"; v2's unified hierarchy is "0::PATH".
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (path.empty() || path[0] != '/') continue;
    if (controllers.empty()) {  // v2: pure (the mount) or hybrid (its unified/)
      take(smallest_up(mount, path, v2_quota));
      take(smallest_up(mount + "/unified", path, v2_quota));
      continue;
    }
    std::vector<std::string> names;
    std::istringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');) names.push_back(c);
    if (std::find(names.begin(), names.end(), "cpu") == names.end()) continue;
    // v1: mounted as cpu/, or as the joint cpu,cpuacct/ (its name as listed).
    take(smallest_up(mount + "/cpu", path, v1_quota));
    take(smallest_up(mount + "/" + controllers, path, v1_quota));
  }
  return best;
}

int available_cores() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) {
    const unsigned hw = std::thread::hardware_concurrency();
    n = hw > 0 ? int(hw) : 1;
  }
  // Read once: a quota changed later is not followed (threads are sized at start).
  static const int quota = cgroup_cpu_quota(read_text("/proc/self/cgroup"));
  return quota > 0 ? std::min(n, quota) : n;
}

}  // namespace kvasir
