// base/cores.h: the cgroup CPU quota read off cgroup folders laid out as
// the kernel mounts them (v2 pure and hybrid, v1 cpu and cpu,cpuacct), the
// smallest along the path up, rounded up; and, where this runs as root on
// a cgroup v1 cpu hierarchy, a real child process under a 1-CPU quota.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/cores.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("kvasir-cores-" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void put(const std::string& rel, const std::string& text) {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string mount() const { return root_.string(); }
  fs::path root_;
};

TEST_F(CgroupTree, V2QuotaIsTheSmallestAlongThePathRoundedUp) {
  const std::string self = "0::/kubepods/pod1/c1\n";
  EXPECT_EQ(cgroup_cpu_quota(self, mount()), 0);  // nothing to read
  put("kubepods/pod1/c1/cpu.max", "400000 100000\n");
  put("kubepods/pod1/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(self, mount()), 4);
  put("kubepods/pod1/c1/cpu.max", "150000 100000\n");  // 1.5 CPUs
  EXPECT_EQ(cgroup_cpu_quota(self, mount()), 2);
  put("kubepods/pod1/c1/cpu.max", "800000 100000\n");
  put("kubepods/pod1/cpu.max", "200000 100000\n");  // the pod's limit is lower
  EXPECT_EQ(cgroup_cpu_quota(self, mount()), 2);
  put("kubepods/pod1/c1/cpu.max", "max 100000\n");
  put("kubepods/pod1/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(self, mount()), 0);
  // In a cgroup namespace (a container) the path is "/": the mount's own.
  put("cpu.max", "300000 100000\n");
  EXPECT_EQ(cgroup_cpu_quota("0::/\n", mount()), 3);
}

TEST_F(CgroupTree, HybridAndV1Hierarchies) {
  put("unified/x/cpu.max", "50000 100000\n");  // half a CPU: 1
  EXPECT_EQ(cgroup_cpu_quota("0::/x\n", mount()), 1);
  const std::string v1 = "4:cpu,cpuacct:/docker/abc\n2:memory:/docker/abc\n";
  put("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
  put("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_quota(v1, mount()), 3);
  put("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");  // none
  EXPECT_EQ(cgroup_cpu_quota(v1, mount()), 0);
  put("cpu/docker/abc/cpu.cfs_quota_us", "200000\n");  // cpu/ mounted alone
  put("cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_quota("3:cpu:/docker/abc\n", mount()), 2);
  // Only the cpu controller's line counts; junk reads as no quota.
  EXPECT_EQ(cgroup_cpu_quota("2:memory:/docker/abc\n", mount()), 0);
  for (const char* junk : {"", "garbage", "0::relative", "::", "0::/x\n0::/x"})
    EXPECT_GE(cgroup_cpu_quota(junk, mount()), 0) << junk;
  put("bad/cpu.max", "lots 100000\n");
  EXPECT_EQ(cgroup_cpu_quota("0::/bad\n", mount()), 0);
}

TEST(Cores, AChildUnderAOneCpuQuotaSeesOneCore) {
  const fs::path cpu = "/sys/fs/cgroup/cpu";
  if (::geteuid() != 0 || !fs::exists(cpu / "cpu.cfs_quota_us"))
    GTEST_SKIP() << "needs root and a cgroup v1 cpu hierarchy at " << cpu;
  const fs::path g = cpu / ("kvasir-cores-test-" + std::to_string(::getpid()));
  std::error_code ec;
  if (!fs::create_directory(g, ec)) GTEST_SKIP() << "cannot make " << g << ": " << ec.message();
  std::ofstream(g / "cpu.cfs_period_us") << 100000;
  std::ofstream(g / "cpu.cfs_quota_us") << 100000;
  const pid_t child = ::fork();
  if (child == 0) {
    std::ofstream(g / "cgroup.procs") << ::getpid() << std::flush;
    ::_exit(available_cores());  // a fresh process: the quota is read now
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  fs::remove(g, ec);  // empty again once the child is gone
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  // And without the quota this process sees its affinity's count.
  EXPECT_GE(available_cores(), 1);
}

}  // namespace
}  // namespace kvasir
