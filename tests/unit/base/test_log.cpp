// base/log.h: levels, the line format on a terminal and in the journal.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "base/log.h"

namespace kvasir::log {
namespace {

// Runs fn with stderr redirected to a file; returns what was written.
template <typename F>
std::string capture_stderr(F fn) {
  char path[] = "/tmp/kvasir-test-log-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(path);
  return ss.str();
}

TEST(Log, ParseLevel) {
  for (Level l :
       {Level::kTrace, Level::kDebug, Level::kInfo, Level::kWarn, Level::kError, Level::kOff})
    EXPECT_EQ(parse_level(level_name(l)), l);
  EXPECT_FALSE(parse_level("verbose").has_value());
  EXPECT_FALSE(parse_level("INFO").has_value());
  EXPECT_FALSE(parse_level("").has_value());
}

TEST(Log, TerminalLineHasTimeLevelProcessAndComponent) {
  std::string out = capture_stderr([] {
    init({"kvasird stage 1", Level::kInfo, 0});
    KV_LOG_INFO("engine", "recovered in {:.1f} s", 1.5);
    KV_LOG_DEBUG("engine", "not shown at info");
    KV_LOG_ERROR("agent", "refused");
  });
  EXPECT_NE(out.find(" I kvasird stage 1 engine: recovered in 1.5 s\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" E kvasird stage 1 agent: refused\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("not shown"), std::string::npos) << out;
  // "YYYY-MM-DD HH:MM:SS.mmm " first.
  ASSERT_GE(out.size(), 24u);
  EXPECT_EQ(out[4], '-');
  EXPECT_EQ(out[10], ' ');
  EXPECT_EQ(out[19], '.');
}

TEST(Log, JournalLineHasPriorityPrefixOnly) {
  std::string out = capture_stderr([] {
    init({"kvasird", Level::kDebug, 1});
    KV_LOG_WARN("supervisor", "stage 1 died");
    KV_LOG_DEBUG("bridge", "batch {}", 7);
    KV_LOG_ERROR("main", "x");
    KV_LOG_INFO("main", "y");
  });
  EXPECT_EQ(out, "<4>supervisor: stage 1 died\n<7>bridge: batch 7\n<3>main: x\n<6>main: y\n");
}

TEST(Log, LevelsFilterAndOffSilences) {
  init({"kvasird", Level::kWarn, 0});
  EXPECT_FALSE(enabled(Level::kInfo));
  EXPECT_TRUE(enabled(Level::kWarn));
  EXPECT_TRUE(enabled(Level::kError));
  set_level(Level::kOff);
  EXPECT_FALSE(enabled(Level::kError));
  EXPECT_EQ(capture_stderr([] { KV_LOG_ERROR("main", "silent"); }), "");
  set_level(Level::kInfo);
  EXPECT_EQ(level(), Level::kInfo);
}

TEST(Log, DetectsTheJournalByStderrsDeviceAndInode) {
  struct stat st {};
  ASSERT_EQ(fstat(2, &st), 0);
  unsetenv("JOURNAL_STREAM");
  EXPECT_FALSE(stderr_is_journal());
  std::string js = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  setenv("JOURNAL_STREAM", js.c_str(), 1);
  EXPECT_TRUE(stderr_is_journal());
  setenv("JOURNAL_STREAM", (js + "1").c_str(), 1);  // another inode
  EXPECT_FALSE(stderr_is_journal());
  setenv("JOURNAL_STREAM", "garbage", 1);
  EXPECT_FALSE(stderr_is_journal());
  unsetenv("JOURNAL_STREAM");
}

}  // namespace
}  // namespace kvasir::log
