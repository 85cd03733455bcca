// The forward on a tiny random model written by the tests themselves, in
// GGUF form (q/k permuted, adjacent-pair RoPE) and in safetensors form (HF
// layout, rotate-half RoPE): both readers must give the same logits.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "stages/forward.h"
#include "tests/support/tiny_model.h"

using namespace kvasir;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() /
               ("kvasir-fwd-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Logits of every token of ids, in prefill chunks of `chunk`.
std::vector<float> logits_of(const ModelFile& m, const std::vector<int32_t>& ids, int chunk,
                             DType kv_type = DType::F32) {
  const ModelConfig& c = m.config();
  KvSpec kv;
  kv.block_size = 4;
  kv.type = kv_type;
  kv.n_blocks = int32_t(ids.size() / 4 + 2);
  std::vector<int32_t> table(size_t(kv.n_blocks));
  for (int32_t i = 0; i < kv.n_blocks; ++i) table[size_t(i)] = kv.n_blocks - 1 - i;  // reversed
  SliceExecutor ex(m, SliceSpec{0, c.n_layers - 1, true, true}, kv, 2, chunk);
  std::vector<float> out(ids.size() * size_t(c.vocab));
  for (size_t p = 0; p < ids.size(); p += size_t(chunk)) {
    const int32_t n = int32_t(std::min(ids.size() - p, size_t(chunk)));
    ForwardRow row{int32_t(p), n, table.data(), kv.n_blocks, false};
    ex.forward(ForwardBatch{&row, 1, ids.data() + p, n, true}, nullptr, nullptr,
               out.data() + p * size_t(c.vocab));
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i]));
    m = std::max(m, double(std::abs(a[i] - b[i])));
  }
  return m;
}

std::vector<int32_t> some_ids(int n, int vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 37 + 11) % vocab));
  return ids;
}

}  // namespace

TEST(ForwardTiny, GgufAndSafetensorsGiveTheSameLogits) {
  const fs::path d = temp_dir("formats");
  test::TinySpec spec;
  test::write_tiny_gguf((d / "tiny.gguf").string(), spec);
  test::write_tiny_safetensors((d / "hf").string(), spec);
  auto g = ModelFile::open((d / "tiny.gguf").string());
  auto s = ModelFile::open((d / "hf").string());
  EXPECT_EQ(g->config().rope_layout, RopeLayout::kAdjacent);
  EXPECT_EQ(s->config().rope_layout, RopeLayout::kHalf);
  const auto ids = some_ids(37, spec.vocab);
  const auto lg = logits_of(*g, ids, 8), ls = logits_of(*s, ids, 8);
  EXPECT_LT(max_abs_diff(lg, ls), 1e-4);
  fs::remove_all(d);
}

TEST(ForwardTiny, ChunkingAndKvTypeDoNotChangeTheResult) {
  const fs::path d = temp_dir("chunks");
  test::TinySpec spec;
  spec.layers = 3;
  spec.tied = true;
  test::write_tiny_gguf((d / "tiny.gguf").string(), spec);
  auto g = ModelFile::open((d / "tiny.gguf").string());
  const auto ids = some_ids(50, spec.vocab);
  const auto whole = logits_of(*g, ids, 64);
  EXPECT_LT(max_abs_diff(whole, logits_of(*g, ids, 1)), 1e-4);   // token by token
  EXPECT_LT(max_abs_diff(whole, logits_of(*g, ids, 7)), 1e-4);   // odd chunks
  EXPECT_LT(max_abs_diff(whole, logits_of(*g, ids, 64, DType::F16)), 2e-2);  // f16 KV
  fs::remove_all(d);
}

TEST(ForwardTiny, QuantisedWeightsStayCloseToF32) {
  const fs::path d = temp_dir("quant");
  test::TinySpec spec;
  test::write_tiny_gguf((d / "f32.gguf").string(), spec);
  auto f32 = ModelFile::open((d / "f32.gguf").string());
  const auto ids = some_ids(20, spec.vocab);
  const auto ref = logits_of(*f32, ids, 20);
  double ref_scale = 0;
  for (float v : ref) ref_scale = std::max(ref_scale, double(std::abs(v)));
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
    spec.matrix_type = t;
    const std::string p = (d / (std::string(dtype_name(t)) + ".gguf")).string();
    test::write_tiny_gguf(p, spec);
    auto m = ModelFile::open(p);
    const double err = max_abs_diff(ref, logits_of(*m, ids, 20));
    // Loose: a 64-wide random model amplifies 4-bit rounding; the real check
    // of the quantised paths is the parity test against llama.cpp.
    const double tol = (t == DType::Q4_0 || t == DType::Q4_1) ? 0.5 : 0.05;
    EXPECT_LT(err, tol * ref_scale) << dtype_name(t);
  }
  fs::remove_all(d);
}

// Two batches' rows of different sequences in one pass equal each alone.
TEST(ForwardTiny, RowsOfABatchAreIndependent) {
  const fs::path d = temp_dir("rows");
  test::TinySpec spec;
  test::write_tiny_gguf((d / "tiny.gguf").string(), spec);
  auto m = ModelFile::open((d / "tiny.gguf").string());
  const ModelConfig& c = m->config();
  const auto a = some_ids(9, spec.vocab), b = some_ids(5, spec.vocab - 3);
  const auto la = logits_of(*m, a, 9), lb = logits_of(*m, b, 5);

  KvSpec kv;
  kv.block_size = 4;
  kv.type = DType::F32;
  kv.n_blocks = 8;
  std::vector<int32_t> ta = {5, 1, 7}, tb = {0, 3};
  std::vector<int32_t> ids(a);
  ids.insert(ids.end(), b.begin(), b.end());
  SliceExecutor ex(*m, SliceSpec{0, c.n_layers - 1, true, true}, kv, 2, 32);
  ForwardRow rows[2] = {{0, 9, ta.data(), 3, true}, {0, 5, tb.data(), 2, true}};
  std::vector<float> out(2 * size_t(c.vocab));
  ex.forward(ForwardBatch{rows, 2, ids.data(), 14}, nullptr, nullptr, out.data());
  for (int v = 0; v < c.vocab; ++v) {
    EXPECT_NEAR(out[size_t(v)], la[8 * size_t(c.vocab) + size_t(v)], 1e-4);
    EXPECT_NEAR(out[size_t(c.vocab + v)], lb[4 * size_t(c.vocab) + size_t(v)], 1e-4);
  }
  fs::remove_all(d);
}
