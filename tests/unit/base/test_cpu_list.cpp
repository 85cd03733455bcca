// CPU lists (base/cpu_list.h): the parser's rules, the check against the
// CPUs this process may use, and a real pin of a thread.
#include "base/cpu_list.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace kvasir {
namespace {

std::vector<int> parsed(const std::string& text) {
  std::vector<int> out;
  const Status st = parse_cpu_list(text, "stages[0].cpus", out);
  EXPECT_TRUE(st.ok()) << text << ": " << st.message();
  return out;
}

std::string refusal(const std::string& text) {
  std::vector<int> out;
  const Status st = parse_cpu_list(text, "stages[1].cpus", out);
  return st.ok() ? "(accepted)" : st.message();
}

TEST(CpuList, ParsesNumbersRangesAndMixes) {
  EXPECT_EQ(parsed("0"), (std::vector<int>{0}));
  EXPECT_EQ(parsed("0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parsed(" 8, 0-2 ,5-5"), (std::vector<int>{0, 1, 2, 5, 8}));
  EXPECT_EQ(parsed("3,1-3,2"), (std::vector<int>{1, 2, 3}));  // sorted, each once
  EXPECT_EQ(parsed("8191").size(), 1u);
}

TEST(CpuList, RefusesMalformedListsNamingTheKey) {
  for (const char* bad : {"", " ", "0-", "-3", "a", "1,,2", "1,", "3-1", "0-15x", "1.5", "8192",
                          "-1", "0-99999999999", "1 2"}) {
    const std::string m = refusal(bad);
    EXPECT_EQ(m.rfind("stages[1].cpus: ", 0), 0u) << "'" << bad << "' -> " << m;
  }
  EXPECT_NE(refusal("3-1").find("backwards"), std::string::npos);
  EXPECT_NE(refusal("9000").find("0 to 8191"), std::string::npos);
}

TEST(CpuList, FormatsTheShortestList) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({5}), "5");
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list(parsed("7,0-2,3")), "0-3,7");
}

TEST(CpuList, CheckRefusesCpusOutsideTheAllowedSet) {
  std::vector<int> out;
  EXPECT_TRUE(check_cpu_list("0-1", "f", {0, 1, 2}, out).ok());
  EXPECT_EQ(out, (std::vector<int>{0, 1}));
  const Status st = check_cpu_list("1-4", "stages[0].cpus", {0, 1, 2}, out);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("stages[0].cpus: CPU 3 ", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("(0-2)"), std::string::npos) << st.message();
  EXPECT_FALSE(check_cpu_list("x", "f", {0}, out).ok());  // the parser's refusals first
}

TEST(CpuList, AllowedCpusIsThisProcessesMask) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(int(cpus.size()), CPU_COUNT(&set));
  for (int c : cpus) EXPECT_TRUE(CPU_ISSET(c, &set)) << c;
}

TEST(CpuList, PinMovesTheCallingThreadOnly) {
  const std::vector<int> all = allowed_cpus();
  const int last = all.back();
  std::vector<int> seen;
  int ran_on = -1;
  std::thread t([&] {
    ASSERT_TRUE(pin_to_cpus({last}, "stages[0].cpus").ok());
    seen = allowed_cpus();
    ran_on = sched_getcpu();
  });
  t.join();
  EXPECT_EQ(seen, std::vector<int>{last});
  EXPECT_EQ(ran_on, last);
  EXPECT_EQ(allowed_cpus(), all);  // this thread's mask is untouched
  const Status st = pin_to_cpus({}, "stages[2].cpus");
  EXPECT_EQ(st.message().rfind("stages[2].cpus: ", 0), 0u) << st.message();
}

}  // namespace
}  // namespace kvasir
