// dequantize_row on K-quant and Q5_0 blocks against the `gguf` package from PyPI
// (gguf.quants.dequantize): tests/data/kquants/kquants.bin was written by
// tests/reference/kquants/make_kquants.py — random blocks (every scale, min
// and quant bit pattern) and the weights gguf computes for them. The matmul
// kernels are checked against reference.h, whose K-quant decoding this file
// ties to an implementation that is not ours.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kernels/cpu/matmul.h"
#include "reference.h"

namespace kvasir::cpu {
namespace {

std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing " << p;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

uint32_t u32_at(const std::vector<uint8_t>& b, size_t& off) {
  uint32_t v = 0;
  if (off + 4 <= b.size()) std::memcpy(&v, b.data() + off, 4);
  off += 4;
  return v;
}

TEST(KQuantReference, DequantizeRowMatchesGgufPackage) {
  const auto data =
      read_all(std::filesystem::path(KVASIR_SOURCE_DIR) / "tests/data/kquants/kquants.bin");
  ASSERT_GE(data.size(), 12u);
  ASSERT_EQ(std::memcmp(data.data(), "KVKQ", 4), 0);
  size_t off = 4;
  ASSERT_EQ(u32_at(data, off), 1u);  // version
  const uint32_t n_types = u32_at(data, off);
  ASSERT_EQ(n_types, 4u);
  int seen = 0;
  for (uint32_t k = 0; k < n_types; ++k) {
    const uint32_t raw = u32_at(data, off), n_blocks = u32_at(data, off);
    const DTypeInfo* info = dtype_info(raw);
    ASSERT_NE(info, nullptr);
    const size_t per = size_t(info->block);  // 256 (K-quants) or 32 (Q5_0)
    ASSERT_TRUE(per == 256 || info->type == DType::Q5_0) << info->name;
    const size_t wbytes = size_t(n_blocks) * size_t(info->bytes);
    const size_t fbytes = size_t(n_blocks) * per * 4;
    ASSERT_LE(off + wbytes + fbytes, data.size());
    std::vector<uint8_t> blocks(data.begin() + long(off), data.begin() + long(off + wbytes));
    std::vector<float> want(size_t(n_blocks) * per);
    std::memcpy(want.data(), data.data() + off + wbytes, fbytes);
    off += wbytes + fbytes;

    // All blocks as one row, then as rows of one block each.
    TensorView w;
    w.type = info->type;
    w.n_dims = 2;
    w.ne[0] = int64_t(n_blocks) * int64_t(per);
    w.ne[1] = 1;
    w.data = blocks.data();
    w.nbytes = blocks.size();
    std::vector<float> got(want.size());
    dequantize_row(w, 0, got.data());
    // gguf computes in f32 with the same operation order as ggml; allow
    // one rounding of difference (numpy may fuse nothing, a compiler may).
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-12f)
          << info->name << " block " << i / per << " weight " << i % per;
    // reference.h's independent decoding agrees with gguf too.
    const auto ref_row = ref::dequant_row(w, 0);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(ref_row[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-12f)
          << info->name << " (reference.h) weight " << i;
    ++seen;
  }
  EXPECT_EQ(seen, 4);
  EXPECT_EQ(off, data.size());
}

}  // namespace
}  // namespace kvasir::cpu
