// The stage's side of the CUDA backend (stages/cuda_plugin.h): device names,
// and every way a cuda:N plan can fail to find or load the plugin, each with
// the message an operator sees. These run on any machine: the no-driver path
// is real on a machine without an NVIDIA driver (CI, this project's build
// hosts), and on a GPU machine the plugin is checked to load and probe.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/check.h"
#include "stages/cuda_plugin.h"

namespace kvasir {
namespace {

struct EnvPlugin {
  explicit EnvPlugin(const std::string& path) { setenv("KVASIR_CUDA_PLUGIN", path.c_str(), 1); }
  ~EnvPlugin() { unsetenv("KVASIR_CUDA_PLUGIN"); }
};

std::string load_error(int device, ErrorCode* code = nullptr) {
  try {
    CudaPlugin::load(device);
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.message();
  }
  return "(loaded)";
}

[[maybe_unused]] bool driver_present() {
  std::error_code ec;
  return std::filesystem::exists("/dev/nvidiactl", ec) ||
         std::filesystem::exists("/proc/driver/nvidia", ec);
}

TEST(CudaPlugin, Ordinals) {
  EXPECT_EQ(cuda_ordinal("cuda:0"), 0);
  EXPECT_EQ(cuda_ordinal("cuda:7"), 7);
  EXPECT_EQ(cuda_ordinal("cuda:1234"), 1234);
  for (const char* bad : {"cpu", "cuda:", "cuda:12345", "cuda:-1", "cuda:1x", "CUDA:0", "", "cuda"})
    EXPECT_EQ(cuda_ordinal(bad), -1) << bad;
  EXPECT_EQ(cuda_ordinal(nullptr), -1);
}

TEST(CudaPlugin, ExplicitPathIsTheOnlyOneTried) {
  EnvPlugin env("/nonexistent/libkvasir_cuda.so");
  auto paths = CudaPlugin::search_paths();
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_EQ(paths[0], "/nonexistent/libkvasir_cuda.so");
  auto m = load_error(0);
  EXPECT_NE(m.find("plan asks for cuda:0 but this build has no CUDA plugin"), std::string::npos)
      << m;
  EXPECT_NE(m.find("/nonexistent/libkvasir_cuda.so"), std::string::npos) << m;
}

TEST(CudaPlugin, DefaultSearchLooksNextToTheExecutable) {
  unsetenv("KVASIR_CUDA_PLUGIN");
  auto paths = CudaPlugin::search_paths();
  ASSERT_EQ(paths.size(), 2u);
  auto exe = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  EXPECT_EQ(paths[0], (exe / "libkvasir_cuda.so").string());
  EXPECT_NE(paths[1].find("lib/kvasir/libkvasir_cuda.so"), std::string::npos);
}

TEST(CudaPlugin, NotALibraryIsRefused) {
  auto path = std::filesystem::temp_directory_path() /
              ("cudas-not-a-plugin-" + std::to_string(getpid()) + ".so");
  std::ofstream(path) << "not an ELF file\n";
  EnvPlugin env(path.string());
  auto m = load_error(3);
  EXPECT_NE(m.find("plan asks for cuda:3 but the CUDA plugin"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot be loaded"), std::string::npos) << m;
  std::filesystem::remove(path);
}

TEST(CudaPlugin, ALibraryWithoutTheEntryIsRefused) {
  // Any shared library that is not the plugin: the C library itself.
  std::string libc;
  for (const char* p : {"/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6",
                        "/lib64/libc.so.6", "/usr/lib/libc.so.6"})
    if (std::filesystem::exists(p)) libc = p;
  if (libc.empty()) GTEST_SKIP() << "no libc.so.6 at a known path";
  EnvPlugin env(libc);
  auto m = load_error(0);
  EXPECT_NE(m.find("has no kvasir_cuda_plugin_v1 entry point"), std::string::npos) << m;
}

#ifdef KVASIR_TEST_CUDA_PLUGIN  // the plugin of this build (stages/cuda), where nvcc exists
TEST(CudaPlugin, BuiltPluginLoadsAndProbesTheDriver) {
  EnvPlugin env(KVASIR_TEST_CUDA_PLUGIN);
  ErrorCode code = ErrorCode::kOk;
  auto m = load_error(0, &code);
  if (!driver_present()) {
    // The real path on a machine without an NVIDIA driver: the plugin and
    // libcudart load, cudaGetDeviceCount fails, the stage says so, with the
    // plugin's code (plugin_abi.h: kDevice).
    EXPECT_NE(m.find("plan asks for cuda:0 but this machine has no usable NVIDIA driver"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("cudaGetDeviceCount"), std::string::npos) << m;
    EXPECT_EQ(code, ErrorCode::kDevice);
    return;
  }
  EXPECT_EQ(m, "(loaded)");
  m = load_error(9999, &code);
  EXPECT_NE(m.find("plan asks for cuda:9999 but only"), std::string::npos) << m;
  EXPECT_NE(m.find("visible"), std::string::npos) << m;
  EXPECT_EQ(code, ErrorCode::kNotFound);
}
#endif

}  // namespace
}  // namespace kvasir
