// A stage's kernels text in its StageShared slot (ipc/segment.h,
// write_stage_simd / read_stage_simd): a reader never sees a torn text, long
// texts are cut, and bytes another process left there are bounded and
// printable.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "ipc/segment.h"

namespace kvasir::ipc {
namespace {

TEST(StageSimd, EmptyUntilWritten) {
  auto st = std::make_unique<StageShared>();
  EXPECT_EQ(read_stage_simd(*st), "");
  write_stage_simd(*st, "cpu:avx2 amx:no q4_1/decode:avx2");
  EXPECT_EQ(read_stage_simd(*st), "cpu:avx2 amx:no q4_1/decode:avx2");
  write_stage_simd(*st, "cuda:0");
  EXPECT_EQ(read_stage_simd(*st), "cuda:0");  // a shorter text leaves nothing of the longer
}

TEST(StageSimd, LongTextIsCut) {
  auto st = std::make_unique<StageShared>();
  const std::string long_text(2 * kStageSimdBytes, 'x');
  write_stage_simd(*st, long_text);
  EXPECT_EQ(read_stage_simd(*st), std::string(kStageSimdBytes - 1, 'x'));
}

TEST(StageSimd, NonPrintableBytesAreReplaced) {
  auto st = std::make_unique<StageShared>();
  write_stage_simd(*st, std::string("cpu:\x1b[31mavx2\x7f\xff\n", 16));
  EXPECT_EQ(read_stage_simd(*st), "cpu:?[31mavx2???");
  // Up to the first NUL only.
  write_stage_simd(*st, std::string("avx2\0hidden", 11));
  EXPECT_EQ(read_stage_simd(*st), "avx2");
}

// Words another process wrote without any NUL: the copy stays within the
// buffer, every byte printable.
TEST(StageSimd, GarbageWithoutNulIsBounded) {
  auto st = std::make_unique<StageShared>();
  for (auto& w : st->simd_text) w.store(~uint64_t(0));
  const std::string got = read_stage_simd(*st);
  EXPECT_EQ(got, std::string(kStageSimdBytes - 1, '?'));
}

// A writer that died inside its write (odd counter): readers get "" rather
// than its half; the next write (the supervisor's clear) closes it.
TEST(StageSimd, DeadWriterIsClosedByTheNextWrite) {
  auto st = std::make_unique<StageShared>();
  write_stage_simd(*st, "cpu:avx2 amx:no");
  st->simd_seq.fetch_add(1);  // odd: a write begun, never finished
  EXPECT_EQ(read_stage_simd(*st), "");
  write_stage_simd(*st, "");
  EXPECT_EQ(st->simd_seq.load() % 2, 0u);
  EXPECT_EQ(read_stage_simd(*st), "");
  write_stage_simd(*st, "cpu:scalar amx:no");
  EXPECT_EQ(read_stage_simd(*st), "cpu:scalar amx:no");
}

// One writer flipping between two texts of different letters and lengths:
// every copy a reader gets is one of them whole (or "" when it got none).
TEST(StageSimd, ReaderNeverSeesATornText) {
  auto st = std::make_unique<StageShared>();
  const std::string a(kStageSimdBytes - 1, 'a'), b(200, 'b');
  write_stage_simd(*st, a);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i)
      write_stage_simd(*st, i % 2 ? a : b);
  });
  int whole = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string got = read_stage_simd(*st);
    if (got.empty()) continue;
    ASSERT_TRUE(got == a || got == b) << "torn: " << got.size() << " bytes";
    ++whole;
  }
  stop = true;
  writer.join();
  EXPECT_GT(whole, 0);
}

}  // namespace
}  // namespace kvasir::ipc
