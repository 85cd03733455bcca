// The CPU forward against llama.cpp and against the exact math, on the default model.
//
// tests/data/parity/smollm2.json was written by tests/reference/parity/make_refs.py
// (llama-cpp-python, same model file): for each of 22 prompts, llama.cpp's
// greedy 64-token continuation and its top-8 log-probabilities at each
// predicting position. smollm2-f64.json (make_f64_refs.py) holds the same for
// a float64 NumPy forward of the same file on the same ids. We feed the same
// ids (teacher forcing) and compare. Figures and analysis: docs/parity.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rows16.h"
#include "stages/forward.h"
#include "tests/unit/stages/two_slices.h"

using namespace kvasir;
namespace fs = std::filesystem;

namespace {

fs::path source_dir() { return fs::path(KVASIR_SOURCE_DIR); }
fs::path default_model() { return source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"; }

std::vector<double> log_softmax(const float* x, int n) {
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, double(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  const double lse = m + std::log(s);
  std::vector<double> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
  return out;
}

// Teacher-forced logits of every token of `ids`, computed in prefill chunks of
// `chunk` tokens (so the paged attention sees chunks that start mid-block).
std::vector<float> all_logits(const ModelFile& m, const std::vector<int32_t>& ids, int chunk,
                              int threads) {
  const ModelConfig& c = m.config();
  KvSpec kv;
  kv.block_size = 16;
  kv.n_blocks = int32_t((ids.size() + 15) / 16) + 1;
  // A shuffled block table: physical order must not matter.
  std::vector<int32_t> table(size_t(kv.n_blocks));
  for (int32_t i = 0; i < kv.n_blocks; ++i) table[size_t(i)] = kv.n_blocks - 1 - i;
  SliceExecutor ex(m, SliceSpec{0, c.n_layers - 1, true, true}, kv, threads, chunk);
  std::vector<float> logits(ids.size() * size_t(c.vocab));
  for (size_t pos = 0; pos < ids.size(); pos += size_t(chunk)) {
    const int32_t n = int32_t(std::min(ids.size() - pos, size_t(chunk)));
    ForwardRow row{int32_t(pos), n, table.data(), kv.n_blocks, false};
    ForwardBatch b{&row, 1, ids.data() + pos, n, true};
    ex.forward(b, nullptr, nullptr, logits.data() + pos * size_t(c.vocab));
  }
  return logits;
}

struct Agreement {
  int agree = 0, total = 0;
  double max_diff = 0, sum_diff = 0;
  double rate() const { return double(agree) / total; }
};

// Teacher-forces every case of a reference file and compares top-1 and the
// log-probability of the reference's chosen token at each position.
Agreement compare(const ModelFile& model, const std::string& file) {
  std::ifstream f(source_dir() / "tests" / "data" / "parity" / file);
  EXPECT_TRUE(f) << "missing tests/data/parity/" << file;
  if (!f) return {};
  const auto ref = nlohmann::json::parse(f);
  const int vocab = model.config().vocab;
  Agreement a;
  for (const auto& cs : ref["cases"]) {
    std::vector<int32_t> ids = cs["prompt"].get<std::vector<int32_t>>();
    const auto cont = cs["continuation"].get<std::vector<int32_t>>();
    const size_t n_prompt = ids.size();
    ids.insert(ids.end(), cont.begin(), cont.end() - 1);
    const auto logits = all_logits(model, ids, 48, 2);
    int case_agree = 0;
    for (size_t i = 0; i < cs["top"].size(); ++i) {
      const float* row = logits.data() + (n_prompt - 1 + i) * size_t(vocab);
      const auto lp = log_softmax(row, vocab);
      const int32_t ours = int32_t(std::max_element(row, row + vocab) - row);
      const int32_t theirs = cs["top"][i][0][0].get<int32_t>();
      const double diff = std::abs(lp[size_t(theirs)] - cs["top"][i][0][1].get<double>());
      a.max_diff = std::max(a.max_diff, diff);
      a.sum_diff += diff;
      case_agree += ours == theirs;
      ++a.total;
      if (ours != theirs && std::getenv("KVASIR_PARITY_VERBOSE"))
        std::printf("    %s pos %zu: reference %d (%.4f), ours %d (%.4f; reference's %.4f)\n",
                    cs["kind"].get<std::string>().c_str(), i, theirs,
                    cs["top"][i][0][1].get<double>(), ours, lp[size_t(ours)], lp[size_t(theirs)]);
    }
    a.agree += case_agree;
  }
  std::printf("%s: top-1 agreement %d/%d = %.2f%%; |dlogprob| of the reference's token: max %.4f, mean %.4f\n",
              file.c_str(), a.agree, a.total, 100 * a.rate(), a.max_diff, a.sum_diff / a.total);
  return a;
}

}  // namespace

// Against the exact math of the file: a float64 NumPy forward (make_f64_refs.py).
// Kvasir's 8-bit activations (as llama.cpp's) flip top-1 at near-ties: 97.2%
// measured, next to llama.cpp's own 97.5% against the same reference.
TEST(ForwardParity, MatchesFloat64Reference) {
  if (!fs::exists(default_model())) GTEST_SKIP() << "default model absent: run scripts/fetch-model";
  auto model = ModelFile::open(default_model().string());
  const Agreement a = compare(*model, "smollm2-f64.json");
  EXPECT_GE(a.total, 20 * 64);
  EXPECT_GE(a.rate(), 0.965);
  EXPECT_LT(a.sum_diff / a.total, 0.05);
}

// Against llama.cpp on the same file. Both engines quantise activations to 8
// bits, and llama.cpp also rounds Q and the softmax to f16 in attention; the
// model amplifies any such rounding, so top-1 flips at near-ties. llama.cpp
// itself agrees with the float64 reference at 97.5% of these positions (see
// docs/parity.md): that is the floor for any faithful 8-bit engine here.
TEST(ForwardParity, MatchesLlamaCpp) {
  if (!fs::exists(default_model())) GTEST_SKIP() << "default model absent: run scripts/fetch-model";
  auto model = ModelFile::open(default_model().string());
  const Agreement a = compare(*model, "smollm2.json");
  EXPECT_GE(a.total, 20 * 64);
  EXPECT_GE(a.rate(), 0.97);
  EXPECT_LT(a.sum_diff / a.total, 0.05);
  EXPECT_LT(a.max_diff, 1.0);
}

// Slices compose: head [0, k] then tail [k+1, L-1] gives the logits of the whole.
TEST(ForwardParity, TwoSlicesEqualTheWhole) {
  if (!fs::exists(default_model())) GTEST_SKIP() << "default model absent: run scripts/fetch-model";
  auto model = ModelFile::open(default_model().string());
  const std::vector<int32_t> ids = {504, 3458, 282, 4649, 314, 1345, 28, 411, 253, 1115, 30, 216};
  const auto whole = all_logits(*model, ids, 5, 1);

  // The same pieces of 5 as the whole: what is tested is the split.
  const double max_err = test::two_slices_max_error(*model, ids, 11, whole);
  EXPECT_LT(max_err, 2e-3) << "a split changed the logits";
}

// The executor keeps every matrix rows16 takes repacked (kernels/cpu/
// matmul.h keep_rows16) while it lives, and its lookups of the tied
// embedding read the copy with the original's bits; the destructor drops
// them. Two executors over one model share the copies.
TEST(ForwardParity, KeepsItsMatricesRepacked) {
  if (!fs::exists(default_model())) GTEST_SKIP() << "default model absent: run scripts/fetch-model";
  if (!cpu::rows16_enabled()) GTEST_SKIP() << "KVASIR_ROWS16=0";
  auto model = ModelFile::open(default_model().string());
  const TensorView& q = model->get("blk.0.attn_q.weight");
  const TensorView& down = model->get("blk.29.ffn_down.weight");
  const TensorView& embd = model->get("token_embd.weight");  // tied: the head
  std::vector<float> want(size_t(embd.cols())), got(want.size());
  cpu::dequantize_row(embd, 4649, want.data());
  EXPECT_EQ(cpu::detail::rows16_find(q), nullptr);
  KvSpec kv;
  kv.n_blocks = 2;
  {
    SliceExecutor ex(*model, SliceSpec{0, model->config().n_layers - 1, true, true}, kv, 1, 8);
    SliceExecutor head(*model, SliceSpec{0, 1, true, false}, kv, 1, 8);
    for (const TensorView* w : {&q, &down, &embd})
      EXPECT_NE(cpu::detail::rows16_find(*w), nullptr) << "not kept";
    cpu::dequantize_row(embd, 4649, got.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
  }
  for (const TensorView* w : {&q, &down, &embd})
    EXPECT_EQ(cpu::detail::rows16_find(*w), nullptr) << "not dropped";
}

// A malformed batch is refused with a clear error, never a crash.
TEST(ForwardParity, RefusesBadBatches) {
  if (!fs::exists(default_model())) GTEST_SKIP() << "default model absent: run scripts/fetch-model";
  auto model = ModelFile::open(default_model().string());
  KvSpec kv;
  kv.n_blocks = 2;
  std::vector<int32_t> table = {0, 1};
  SliceExecutor ex(*model, SliceSpec{0, 1, true, false}, kv, 1, 8);
  std::vector<float> out(8 * 576);
  int32_t bad_id = 49152;
  ForwardRow row{0, 1, table.data(), 2, false};
  EXPECT_THROW(ex.forward(ForwardBatch{&row, 1, &bad_id, 1}, nullptr, out.data(), nullptr), Error);
  int32_t ok_id = 1;
  ForwardRow far{40, 1, table.data(), 2, false};  // position 40 is past 2 blocks of 16
  EXPECT_THROW(ex.forward(ForwardBatch{&far, 1, &ok_id, 1}, nullptr, out.data(), nullptr), Error);
  std::vector<int32_t> bad_table = {0, 7};
  ForwardRow badblk{0, 1, bad_table.data(), 2, false};
  EXPECT_THROW(ex.forward(ForwardBatch{&badblk, 1, &ok_id, 1}, nullptr, out.data(), nullptr), Error);
  std::vector<int32_t> many(9, 1);
  ForwardRow big{0, 9, table.data(), 2, false};
  EXPECT_THROW(ex.forward(ForwardBatch{&big, 1, many.data(), 9}, nullptr, out.data(), nullptr), Error);
}
