// The forward on a tiny random model written by the tests themselves, in
// GGUF form (q/k permuted, adjacent-pair RoPE) and in safetensors form (HF
// layout, rotate-half RoPE): both readers must give the same logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "base/check.h"
#include "stages/forward.h"
#include "tests/support/tiny_model.h"

using namespace kvasir;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("kvasir-fwd-" + tag + "-" + std::to_string(::getpid()));
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

// A checkpoint as it is stored: every tensor in BF16 (or F16), its norms
// and biases too, which the reader widens to F32. The same values written
// as F32 give the same logits (qwen2: q/k/v biases).
TEST(ForwardTiny, HalfPrecisionFolderReadsLikeItsValuesInF32) {
  const fs::path d = temp_dir("half");
  for (DType t : {DType::BF16, DType::F16}) {
    test::TinySpec spec;
    spec.arch = "qwen2";
    spec.st_type = t;
    test::write_tiny_safetensors((d / "half").string(), spec);
    spec.st_round_only = true;
    test::write_tiny_safetensors((d / "f32").string(), spec);
    auto h = ModelFile::open((d / "half").string());
    auto f = ModelFile::open((d / "f32").string());
    EXPECT_EQ(h->get("blk.0.attn_norm.weight").type, DType::F32) << dtype_name(t);
    EXPECT_EQ(h->get("blk.0.attn_q.bias").type, DType::F32) << dtype_name(t);
    EXPECT_EQ(h->get("blk.0.attn_q.weight").type, t);
    const auto ids = some_ids(23, spec.vocab);
    EXPECT_LT(max_abs_diff(logits_of(*h, ids, 8), logits_of(*f, ids, 8)), 1e-4) << dtype_name(t);
    fs::remove_all(d / "half");
    fs::remove_all(d / "f32");
  }
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
  EXPECT_LT(max_abs_diff(whole, logits_of(*g, ids, 1)), 1e-4);               // token by token
  EXPECT_LT(max_abs_diff(whole, logits_of(*g, ids, 7)), 1e-4);               // odd chunks
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

// K-quant matrices (and embeddings) against a F32 model holding exactly the
// dequantised weights: what remains is the 8-bit activation rounding of the
// integer dots. Hidden 256 and ffn 512: K-quant rows are multiples of 256.
TEST(ForwardTiny, KQuantModelsMatchTheirDequantisedWeights) {
  const fs::path d = temp_dir("kquant");
  test::TinySpec spec;
  spec.hidden = 256;
  spec.ffn = 512;
  const auto ids = some_ids(20, spec.vocab);
  test::write_tiny_gguf((d / "f32.gguf").string(), spec);
  const auto plain = logits_of(*ModelFile::open((d / "f32.gguf").string()), ids, 20);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    test::TinySpec q = spec, deq = spec;
    q.matrix_type = t;
    deq.prequantize = t;
    const std::string pq = (d / (std::string(dtype_name(t)) + ".gguf")).string();
    const std::string pd = (d / (std::string(dtype_name(t)) + "-f32.gguf")).string();
    test::write_tiny_gguf(pq, q);
    test::write_tiny_gguf(pd, deq);
    auto mq = ModelFile::open(pq);
    auto md = ModelFile::open(pd);
    const auto lq = logits_of(*mq, ids, 20), ld = logits_of(*md, ids, 20);
    double scale = 0;
    for (float v : ld) scale = std::max(scale, double(std::abs(v)));
    const double err = max_abs_diff(lq, ld);
    std::printf("%s: max |logit - dequantised-f32 logit| = %.5f (max |logit| %.3f)\n",
                dtype_name(t), err, scale);
    EXPECT_LT(err, 0.03 * scale) << dtype_name(t);
    // And the quantiser itself is sane: close to the unquantised model.
    EXPECT_LT(max_abs_diff(ld, plain), (t == DType::Q6_K ? 0.1 : 0.5) * scale) << dtype_name(t);
  }
  fs::remove_all(d);
}

// A GGUF Llama-3 file carries its RoPE scaling as rope_freqs.weight; the
// same model as a Hugging Face folder carries rope_scaling {llama3}. Both
// must give the same logits, and different ones from the unscaled model.
TEST(ForwardTiny, RopeFreqsTensorEqualsLlama3Scaling) {
  const fs::path d = temp_dir("ropefreqs");
  test::TinySpec spec;
  spec.llama3_factor = 8.f;
  spec.llama3_original_context = 32;  // head_dim 16: pairs 0 kept, 1 smoothed, 2-7 scaled
  test::write_tiny_gguf((d / "l3.gguf").string(), spec);
  test::write_tiny_safetensors((d / "hf").string(), spec);
  test::TinySpec plain_spec = spec;
  plain_spec.llama3_factor = 0.f;
  test::write_tiny_gguf((d / "plain.gguf").string(), plain_spec);
  auto g = ModelFile::open((d / "l3.gguf").string());
  auto s = ModelFile::open((d / "hf").string());
  auto p = ModelFile::open((d / "plain.gguf").string());
  ASSERT_TRUE(g->config().rope_freqs_tensor);
  ASSERT_FALSE(s->config().rope_freqs_tensor);
  const auto ids = some_ids(37, spec.vocab);
  const auto lg = logits_of(*g, ids, 8), ls = logits_of(*s, ids, 8), lp = logits_of(*p, ids, 8);
  EXPECT_LT(max_abs_diff(lg, ls), 1e-4);
  EXPECT_GT(max_abs_diff(lg, lp), 1e-2);
  fs::remove_all(d);
}

// The CPU backend does not read FP8 weights: refused by name, with the
// model-format code, before anything is mapped (docs/model-formats.md).
TEST(ForwardTiny, Fp8CheckpointIsRefusedByName) {
  const fs::path d = temp_dir("fp8");
  test::TinySpec spec;
  spec.st_fp8 = test::TinySpec::kFp8PerChannel;
  test::write_tiny_safetensors((d / "fp8").string(), spec);
  auto m = ModelFile::open((d / "fp8").string());
  KvSpec kv;
  kv.n_blocks = 4;
  try {
    SliceExecutor ex(*m, SliceSpec{0, spec.layers - 1, true, true}, kv, 1, 8);
    ADD_FAILURE() << "the CPU executor accepted FP8 weights";
  } catch (const kvasir::Error& e) {
    EXPECT_EQ(e.code(), kvasir::ErrorCode::kModelFormat);
    EXPECT_NE(e.message().find("FP8"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("cuda:N"), std::string::npos) << e.message();
  }
  fs::remove_all(d);
}
