// The segment's grammar table (ipc/grammar_table.h): specs written by one
// process are read by another; every bad entry is refused with its reason,
// never read past its bounds.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "base/check.h"
#include "ipc/segment.h"

namespace kvasir::ipc {
namespace {

SegmentParams params(int32_t entries, uint32_t capacity) {
  SegmentParams p;
  p.n_stages = 2;
  p.dims = SlotDims{4, 16, 8, 32, 2};
  p.block_size = 4;
  p.stages[0] = StagePlan{0, 1, 1, "cpu"};
  p.stages[1] = StagePlan{2, 3, 1, "cpu"};
  std::strcpy(p.model_path, "/nonexistent");
  p.grammar_entries = entries;
  p.grammar_capacity = capacity;
  return p;
}

std::string unique_name(const char* tag) {
  return Segment::name_for(std::string(tag) + std::to_string(getpid()));
}

TEST(GrammarTable, WrittenByOneProcessReadByAnother) {
  const std::string name = unique_name("gtable");
  auto seg = Segment::create(name, params(8, 256));
  GrammarTable t = seg->grammar_table();
  ASSERT_EQ(t.entries(), 8);
  ASSERT_EQ(t.capacity(), 256u);
  const std::string spec("\x01\x01\x01 a spec with a \0 inside", 28);
  t.write(5, 42, spec);
  t.write(0, 7, "");  // an empty spec is a spec
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 1;
    try {
      auto other = Segment::open(name);
      std::string a, b;
      const bool ok =
          other->grammar_table().read(5, 42, &a).ok() && other->grammar_table().read(0, 7, &b).ok();
      rc = ok && a == spec && b.empty() ? 0 : 2;
    } catch (...) {
    }
    _exit(rc);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  Segment::remove(name);
}

TEST(GrammarTable, BadEntriesAreRefused) {
  std::vector<char> mem(GrammarTable::bytes_for(3, 64), 0);
  GrammarTable t(mem.data(), 3, 64);
  auto refused = [&](int32_t i, uint64_t id, const std::string& why) {
    std::string out;
    const Status st = t.read(i, id, &out);
    EXPECT_EQ(st.code(), ErrorCode::kBatchRefused) << why;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
  };
  refused(0, 1, "holds id 0");  // never written
  refused(-1, 1, "out of range");
  refused(3, 1, "out of range");
  t.write(1, 9, "abc");
  refused(1, 8, "holds id 9");
  refused(1, 0, "holds id 9");
  // A stray write in the bytes, the length, the version.
  char* entry = mem.data() + GrammarTable::entry_stride(64);
  entry[sizeof(GrammarEntryHeader)] = 'X';
  refused(1, 9, "checksum mismatch");
  t.write(1, 9, "abc");
  reinterpret_cast<GrammarEntryHeader*>(entry)->bytes = 65;
  refused(1, 9, "over the capacity");
  t.write(1, 9, "abc");
  reinterpret_cast<GrammarEntryHeader*>(entry)->version = 2;
  refused(1, 9, "version 2");
  t.write(1, 10, "abc");
  std::string out;
  EXPECT_TRUE(t.read(1, 10, &out).ok());
  EXPECT_EQ(out, "abc");
  // The writer's own mistakes are bugs.
  EXPECT_THROW(t.write(3, 1, "x"), Error);
  EXPECT_THROW(t.write(0, 0, "x"), Error);
  EXPECT_THROW(t.write(0, 1, std::string(65, 'x')), Error);
}

TEST(GrammarTable, PlanChecks) {
  EXPECT_EQ(Segment::check_params(params(0, 0)), "");
  EXPECT_EQ(Segment::check_params(params(64, 80 * 1024)), "");
  EXPECT_NE(Segment::check_params(params(-1, 10)), "");
  EXPECT_NE(Segment::check_params(params(4, 0)), "");
  EXPECT_NE(Segment::check_params(params(1 << 17, 10)), "");
  // The table lies inside the segment, after everything else.
  const Segment::Layout with = Segment::layout(params(8, 1000));
  const Segment::Layout without = Segment::layout(params(0, 0));
  EXPECT_GE(with.total, with.grammar + GrammarTable::bytes_for(8, 1000));
  EXPECT_EQ(without.total, without.grammar);
}

}  // namespace
}  // namespace kvasir::ipc
