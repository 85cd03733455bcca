// The CPU executor with a sliding group (KvSpec::n_blocks_swa): Gemma 3
// 270M's sliding layers hold a pool of their own and read each row's
// sliding table, whose entries before the window are unmapped (-1) and
// whose blocks are handed out again at once, most recently freed first
// (as the engine's pool does). Greedy output over a prompt and generation
// longer than the window, prefilled in chunks that cross the window's edge,
// must equal the masking executor's (every layer's full KV kept). Skips
// without models/gemma-3-270m-q4_k_m.gguf (scripts/fetch-gemma3).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <vector>

#include "stages/forward.h"

namespace kvasir {
namespace {

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(ForwardSliding, FreedWindowEqualsTheMaskingExecutor) {
  const std::string path = std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no Gemma 3 file (scripts/fetch-gemma3)";
  auto model = ModelFile::open(path);
  const ModelConfig& c = model->config();
  const int32_t bs = 16, n_full = 64, n_swa = 40, chunk = 40;
  const SliceSpec all{0, c.n_layers - 1, true, true};
  SliceExecutor ref(*model, all, KvSpec{n_full, bs, DType::F16}, 2, 1024);
  SliceExecutor slid(*model, all, KvSpec{n_full, bs, DType::F16, n_swa}, 2, 1024);
  std::mt19937_64 rng(7);
  std::vector<int32_t> toks;
  for (int i = 0; i < 700; ++i) toks.push_back(int32_t(rng() % uint64_t(c.vocab)));
  std::vector<int32_t> table(static_cast<size_t>(n_full)), swa;
  for (int32_t i = 0; i < n_full; ++i) table[size_t(i)] = i;
  std::vector<int32_t> free_swa;  // a stack: the most recently freed on top
  for (int32_t i = n_swa - 1; i >= 0; --i) free_swa.push_back(i);
  std::vector<float> la(size_t(c.vocab)), lb(size_t(c.vocab));
  int32_t pos = 0;
  for (int step = 0; step < 40; ++step) {
    const int32_t n = pos < 700 ? std::min<int32_t>(chunk, 700 - pos) : 1;
    // The window of pos: entries before it go back; then grow to pos + n.
    const int32_t first = std::max(0, pos - c.sliding_window + 1) / bs;
    for (int32_t i = 0; i < first && i < int32_t(swa.size()); ++i)
      if (swa[size_t(i)] >= 0) {
        free_swa.push_back(swa[size_t(i)]);
        swa[size_t(i)] = -1;
      }
    while (int32_t(swa.size()) * bs < pos + n) {
      ASSERT_FALSE(free_swa.empty());
      swa.push_back(free_swa.back());
      free_swa.pop_back();
    }
    const int32_t n_table = int32_t(swa.size());
    ForwardRow ra{pos, n, table.data(), n_table, pos + n >= 700};
    ForwardRow rb = ra;
    rb.block_table_swa = swa.data();
    ForwardBatch b;
    b.n_rows = 1;
    b.tokens = toks.data() + pos;
    b.n_tokens = n;
    b.rows = &ra;
    ref.forward(b, nullptr, nullptr, la.data());
    b.rows = &rb;
    slid.forward(b, nullptr, nullptr, lb.data());
    pos += n;
    if (pos < 700) continue;
    ASSERT_EQ(argmax(la), argmax(lb)) << "position " << pos;
    ASSERT_EQ(la, lb) << "position " << pos;
    toks.push_back(argmax(la));
  }
  EXPECT_GT(pos, 720);
  EXPECT_LE(std::count_if(swa.begin(), swa.end(), [](int32_t x) { return x >= 0; }), 34);
}

}  // namespace
}  // namespace kvasir
