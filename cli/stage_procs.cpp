// cli/stage_procs.cpp — see stage_procs.h.
#include "cli/stage_procs.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "base/sched_stat.h"

namespace kvasir::cli {
namespace {

// The parent pid from /proc/PID/stat ("pid (comm) state ppid ..."; comm
// may hold spaces and parentheses, so read after the last ')').
pid_t parent_of(const std::string& pid) {
  std::ifstream f("/proc/" + pid + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  char state = 0;
  int ppid = 0;
  if (std::sscanf(s.c_str() + close + 1, " %c %d", &state, &ppid) != 2) return 0;
  return pid_t(ppid);
}

// N of a command line with "--stage N", or -1.
int stage_arg(const std::string& pid) {
  std::ifstream f("/proc/" + pid + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t i = 0; i < s.size();) {
    const size_t end = std::min(s.find('\0', i), s.size());
    args.push_back(s.substr(i, end - i));
    i = end + 1;
  }
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--stage") {
      char* end = nullptr;
      const long n = std::strtol(args[i + 1].c_str(), &end, 10);
      if (end && *end == 0 && n >= 0 && n < 1024) return int(n);
    }
  return -1;
}

}  // namespace

pid_t socket_peer_pid(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path) return 0;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  pid_t pid = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) pid = cred.pid;
  }
  close(fd);
  return pid;
}

std::map<int, pid_t> stage_pids(pid_t daemon) {
  std::map<int, pid_t> out;
  if (daemon <= 0) return out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    const std::string pid = e->d_name;
    if (parent_of(pid) != daemon) continue;
    const int n = stage_arg(pid);
    if (n >= 0) out[n] = pid_t(std::atoi(pid.c_str()));
  }
  closedir(d);
  return out;
}

void add_sched_figures(nlohmann::json& stats, const std::map<int, pid_t>& pids) {
  auto it = stats.find("stages");
  if (it == stats.end() || !it->is_array()) return;
  for (nlohmann::json& s : *it) {
    if (!s.is_object() || !s.contains("index") || !s["index"].is_number_integer()) continue;
    const auto p = pids.find(s["index"].get<int>());
    if (p == pids.end()) continue;
    const SchedStat st = read_sched_stat(p->second);
    if (!st.ok) continue;
    s["cpu_s"] = double(st.run_ns) / 1e9;
    s["cpu_wait_s"] = double(st.wait_ns) / 1e9;
    s["preemptions"] = st.nonvoluntary;
  }
}

}  // namespace kvasir::cli
