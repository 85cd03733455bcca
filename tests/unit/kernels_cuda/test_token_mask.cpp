// The token-mask kernel (kernels/cuda/token_mask.h) against the CPU
// sampler's (stages/sampler.h, apply_token_mask): the same logits left,
// the same -inf, for random masks, an all-ones row, an all-zero row, a mask
// shorter than the vocabulary, odd vocabulary widths. Then the device
// sampler on masked logits never picks a masked token. The argument checks
// run everywhere; the rest skips without a GPU, saying so.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/cuda/sampling.h"
#include "kernels/cuda/token_mask.h"
#include "stages/sampler.h"
#include "tests/unit/kernels_cuda/cuda_test.h"

namespace kvasir::cuda {
namespace {

using test::DeviceBuffer;

TEST(CudaTokenMaskArgs, RejectBadArgumentsWithoutTouchingTheDevice) {
  TokenMaskArgs a;
  a.n_rows = 1;
  a.vocab = 10;
  a.words = 0;
  EXPECT_EQ(cudaErrorInvalidValue, launch_apply_token_mask(a, nullptr));
  a.words = 1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_apply_token_mask(a, nullptr));  // null pointers
  a.n_rows = 0;
  EXPECT_EQ(cudaSuccess, launch_apply_token_mask(a, nullptr));
}

TEST(CudaTokenMask, SameAsTheCpuMask) {
  KV_REQUIRE_CUDA();
  std::mt19937_64 rng(7);
  for (int32_t vocab : {1, 31, 32, 33, 1000, 49152, 151936}) {
    const int32_t words = (vocab + 31) / 32;
    const int32_t n_rows = 5;
    std::vector<float> logits(size_t(n_rows) * size_t(vocab));
    for (float& x : logits) x = float(int64_t(rng() % 2001) - 1000) / 100.f;
    std::vector<uint32_t> masks(size_t(n_rows) * size_t(words));
    for (int32_t w = 0; w < words; ++w) {
      masks[size_t(w)] = uint32_t(rng());                                // random
      masks[size_t(words + w)] = 0xffffffffu;                            // everything
      masks[size_t(2 * words + w)] = 0;                                  // nothing
      masks[size_t(3 * words + w)] = uint32_t(rng()) & uint32_t(rng());  // sparse
      masks[size_t(4 * words + w)] = w < words / 2 ? 0xffffffffu : 0;    // short mask
    }
    DeviceBuffer<float> d_logits(logits);
    DeviceBuffer<uint32_t> d_masks(masks);
    TokenMaskArgs a{d_logits.get(), d_masks.get(), n_rows, vocab, words};
    KV_CUDA_OK(launch_apply_token_mask(a, nullptr));
    KV_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got = d_logits.read();
    for (int32_t r = 0; r < n_rows; ++r) {
      std::vector<float> want(logits.begin() + int64_t(r) * vocab,
                              logits.begin() + int64_t(r + 1) * vocab);
      const int32_t used = r == 4 ? words / 2 : words;  // row 4: a mask shorter than the row
      apply_token_mask(want.data(), vocab,
                       std::span<const uint32_t>(masks.data() + int64_t(r) * words, size_t(used)));
      for (int32_t i = 0; i < vocab; ++i)
        ASSERT_EQ(got[size_t(int64_t(r) * vocab + i)], want[size_t(i)])
            << "vocab " << vocab << " row " << r << " id " << i;
    }
  }
}

TEST(CudaTokenMask, DeviceSamplerNeverPicksAMaskedToken) {
  KV_REQUIRE_CUDA();
  const int32_t vocab = 4096, words = vocab / 32, n_rows = 64;
  std::mt19937_64 rng(11);
  std::vector<float> logits(size_t(n_rows) * vocab);
  for (float& x : logits) x = float(rng() % 1000) / 100.f;
  std::vector<uint32_t> masks(size_t(n_rows) * words, 0);
  std::vector<GpuSamplingRow> rows(static_cast<size_t>(n_rows));
  for (int32_t r = 0; r < n_rows; ++r) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t id = uint32_t(rng() % vocab);
      masks[size_t(r) * words + id / 32] |= 1u << (id % 32);
    }
    rows[size_t(r)] = GpuSamplingRow{r % 2 ? 1.3f : 0.f, 1.f, 0.f, 0, rng(), uint64_t(r)};
  }
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<uint32_t> d_masks(masks);
  DeviceBuffer<GpuSamplingRow> d_rows(rows);
  DeviceBuffer<int32_t> d_tok(static_cast<size_t>(n_rows)), d_flags(static_cast<size_t>(n_rows));
  KV_CUDA_OK(
      launch_apply_token_mask({d_logits.get(), d_masks.get(), n_rows, vocab, words}, nullptr));
  SampleArgs sa;
  sa.logits = d_logits.get();
  sa.rows = d_rows.get();
  sa.n_rows = n_rows;
  sa.vocab = vocab;
  sa.tokens = d_tok.get();
  sa.flags = d_flags.get();
  KV_CUDA_OK(launch_sample(sa, nullptr));
  KV_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<int32_t> tok = d_tok.read();
  for (int32_t r = 0; r < n_rows; ++r) {
    const int32_t t = tok[size_t(r)];
    ASSERT_TRUE(t >= 0 && t < vocab);
    EXPECT_TRUE(masks[size_t(r) * words + size_t(t) / 32] >> (t % 32) & 1u) << "row " << r;
  }
}

}  // namespace
}  // namespace kvasir::cuda
