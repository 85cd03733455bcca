// The one-line summary of the SIMD choices (kernels/cpu/simd.h,
// format_simd_summary / simd_summary): capability first, then one
// "type/rows:level" per kernel chosen; never longer than asked.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/simd.h"

namespace kvasir::cpu {
namespace {

KernelChoice chosen(DType t, RowsClass rc, SimdLevel level, bool amx = false) {
  KernelChoice c;
  c.type = t;
  c.rows = rc;
  c.level = level;
  c.reason = ChoiceReason::kMeasured;
  c.amx = amx;
  return c;
}

TEST(SimdSummary, CapabilityThenEachKernel) {
  const std::vector<KernelChoice> choices = {
      chosen(DType::Q4_1, RowsClass::kDecode, SimdLevel::kAvx2),
      chosen(DType::Q4_1, RowsClass::kBatch, SimdLevel::kAvx512Vnni, true),
      chosen(DType::Q8_0, RowsClass::kDecode, SimdLevel::kAvxVnni)};
  EXPECT_EQ(format_simd_summary(SimdLevel::kAvx512Vnni, true, false, SimdLevel::kScalar, choices,
                                512),
            "cpu:avx512_vnni amx:yes q4_1/decode:avx2 q4_1/batch:avx512_vnni+amx "
            "q8_0/decode:avx_vnni");
}

// A batch kernel whose tiles run from N rows for weights kept packed.
TEST(SimdSummary, PackedRowsAfterTheLevel) {
  KernelChoice q8 = chosen(DType::Q8_0, RowsClass::kBatch, SimdLevel::kAvx512Vnni, true);
  q8.amx_packed_rows = 8;
  KernelChoice q4 = chosen(DType::Q4_1, RowsClass::kBatch, SimdLevel::kAvx512Vnni);
  q4.amx_packed_rows = 7;
  EXPECT_EQ(
      format_simd_summary(SimdLevel::kAvx512Vnni, true, false, SimdLevel::kScalar, {q8, q4}, 512),
      "cpu:avx512_vnni amx:yes q8_0/batch:avx512_vnni+amx+p8 q4_1/batch:avx512_vnni+p7");
}

// Types with weights kept repacked (rows16) first, at the level rows16 runs
// at; a restart adopts nothing from them (they are not a kernel choice).
TEST(SimdSummary, Rows16TypesFirst) {
  const std::vector<KernelChoice> choices = {
      chosen(DType::Q6_K, RowsClass::kDecode, SimdLevel::kAvx2)};
  EXPECT_EQ(format_simd_summary(SimdLevel::kAvx512Vnni, false, false, SimdLevel::kScalar, choices,
                                512, {DType::Q8_0, DType::Q4_1}, SimdLevel::kAvx512Vnni),
            "cpu:avx512_vnni amx:no q8_0/rows16:avx512_vnni q4_1/rows16:avx512_vnni "
            "q6_k/decode:avx2");
  EXPECT_EQ(format_simd_summary(SimdLevel::kAvx512, false, true, SimdLevel::kAvx2, choices, 512,
                                {DType::Q4_1}, SimdLevel::kAvx2),
            "cpu:avx512 amx:no forced:avx2");
  EXPECT_EQ(simd_adopt_choices("cpu:avx2 amx:no q4_1/rows16:avx2"), 0);
}

TEST(SimdSummary, NothingChosenYet) {
  KernelChoice pending;
  pending.type = DType::Q4_0;
  pending.reason = ChoiceReason::kPending;
  EXPECT_EQ(format_simd_summary(SimdLevel::kAvx2, false, false, SimdLevel::kAvx2, {pending}, 512),
            "cpu:avx2 amx:no");
}

TEST(SimdSummary, ForcedNamesTheLevelOnly) {
  const std::vector<KernelChoice> choices = {
      chosen(DType::Q4_1, RowsClass::kDecode, SimdLevel::kScalar)};
  EXPECT_EQ(
      format_simd_summary(SimdLevel::kAvx512, false, true, SimdLevel::kScalar, choices, 512),
      "cpu:avx512 amx:no forced:scalar");
}

// Too long: whole entries dropped from the end, " ..." appended, within max_len.
TEST(SimdSummary, TruncatesAtWholeEntries) {
  std::vector<KernelChoice> choices;
  for (int i = 0; i < 40; ++i)
    choices.push_back(chosen(DType::Q4_K, RowsClass(i % 2), SimdLevel::kAvx512Vnni));
  for (size_t max_len : {size_t(0), size_t(3), size_t(10), size_t(60), size_t(100), size_t(511)}) {
    const std::string s =
        format_simd_summary(SimdLevel::kAvx512Vnni, false, false, SimdLevel::kScalar, choices,
                            max_len);
    EXPECT_LE(s.size(), max_len) << s;
    if (max_len >= 60) {
      EXPECT_EQ(s.substr(s.size() - 4), " ...") << s;
      // Every entry before the marker is whole.
      std::istringstream in(s.substr(0, s.size() - 4));
      std::string word;
      int n = 0;
      while (in >> word) {
        if (n++ < 2) continue;
        EXPECT_TRUE(word == "q4_k/decode:avx512_vnni" || word == "q4_k/batch:avx512_vnni")
            << word;
      }
    }
  }
}

// This process: the summary names only levels that exist, and grows when a
// kernel is chosen.
TEST(SimdSummary, ThisProcess) {
  simd_reset_for_testing();
  const std::set<std::string> levels = {"scalar", "avx2", "avx_vnni", "avx512", "avx512_vnni"};
  const uint64_t g0 = simd_choices_generation();
  const std::string before = simd_summary(512);
  ASSERT_EQ(before.rfind("cpu:", 0), 0u) << before;
  (void)simd_kernel_choice(DType::Q8_0, RowsClass::kDecode, 576);
  if (!simd_level_forced()) {
    EXPECT_GT(simd_choices_generation(), g0);
  }
  const std::string after = simd_summary(512);
  EXPECT_LE(after.size(), 512u);
  std::istringstream in(after);
  std::string word;
  while (in >> word) {
    const size_t colon = word.rfind(':');
    ASSERT_NE(colon, std::string::npos) << word;
    std::string level = word.substr(colon + 1);
    if (word.rfind("amx:", 0) == 0) continue;
    if (const size_t p = level.find("+p"); p != std::string::npos) level.resize(p);
    if (level.size() > 4 && level.substr(level.size() - 4) == "+amx")
      level.resize(level.size() - 4);
    EXPECT_TRUE(levels.count(level)) << word << " in " << after;
  }
  if (!simd_level_forced()) {
    EXPECT_NE(after.find("q8_0/decode:"), std::string::npos) << after;
  }
  simd_reset_for_testing();
}

}  // namespace
}  // namespace kvasir::cpu
