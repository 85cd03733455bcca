// cli/stage_procs.h with real processes: a unix socket's peer, children
// started with `--stage N`, and their scheduler figures added to stats.
#include "cli/stage_procs.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace kvasir::cli {
namespace {

// A child that stays a shell whose command line ends in "--stage N" (the
// compound command keeps sh from exec'ing sleep in its place). In a process
// group of its own, so that end() kills its sleep too: an orphaned sleep
// would hold the test's output pipe, and ctest would wait the 30 s out.
pid_t spawn_stage(int n) {
  const std::string idx = std::to_string(n);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", "sleep 30; :", "--stage", idx.c_str(), (char*)nullptr);
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);  // both sides: whichever runs first
  return pid;
}

void end(pid_t pid) {
  kill(-pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

TEST(StageProcs, TheSocketsPeerIsTheListener) {
  const std::string path = "/tmp/kvasir-test-peer-" + std::to_string(getpid()) + ".sock";
  unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  EXPECT_EQ(socket_peer_pid(path), getpid());
  close(fd);
  unlink(path.c_str());
  EXPECT_EQ(socket_peer_pid(path), 0);  // nobody listens
  EXPECT_EQ(socket_peer_pid(""), 0);
}

TEST(StageProcs, ChildrenStartedAsStagesAreFoundByIndex) {
  const pid_t a = spawn_stage(0), b = spawn_stage(3);
  usleep(300 * 1000);  // the shells have started
  const std::map<int, pid_t> got = stage_pids(getpid());
  EXPECT_EQ(got.size(), 2u);
  EXPECT_EQ(got.count(0) ? got.at(0) : 0, a);
  EXPECT_EQ(got.count(3) ? got.at(3) : 0, b);
  EXPECT_TRUE(stage_pids(0).empty());
  nlohmann::json stats = {{"stages", {{{"index", 0}}, {{"index", 1}}, {{"index", 3}}}}};
  add_sched_figures(stats, got);
  for (int i : {0, 2}) {
    const nlohmann::json& s = stats["stages"][i];
    ASSERT_TRUE(s.contains("cpu_wait_s")) << s.dump();
    EXPECT_GE(s["cpu_wait_s"].get<double>(), 0);
    EXPECT_GT(s["cpu_s"].get<double>(), 0);  // it ran to start the shell
    EXPECT_TRUE(s.contains("preemptions"));
  }
  EXPECT_FALSE(stats["stages"][1].contains("cpu_wait_s"));  // no such stage
  end(a);
  end(b);
  EXPECT_TRUE(stage_pids(getpid()).empty());  // reaped: gone
}

}  // namespace
}  // namespace kvasir::cli
