// ModelFile: GGUF and safetensors folders give the same model; tensors the
// config implies are checked for presence, shape and finite norms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/fp8.h"
#include "base/half.h"
#include "model/gguf.h"
#include "model/model_file.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quant.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;

void expect_same_config(ModelConfig a, ModelConfig b) {
  EXPECT_EQ(a.rope_layout, RopeLayout::kAdjacent);
  EXPECT_EQ(b.rope_layout, RopeLayout::kHalf);
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.ffn, b.ffn);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.context_length, b.context_length);
  EXPECT_FLOAT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_FLOAT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.rope_llama3_factor, b.rope_llama3_factor);
  EXPECT_EQ(a.rope_linear_factor, b.rope_linear_factor);
}

// Largest error of each type's quantiser on weights of at most ~0.4 in size.
float tolerance(DType t) {
  switch (t) {
    case DType::F32:
      return 0.f;
    case DType::F16:
      return 1e-3f;
    case DType::BF16:
      return 4e-3f;
    case DType::Q8_0:
      return 2e-3f;
    default:
      return 0.05f;  // 4-bit
  }
}

class TinyPair : public ::testing::TestWithParam<DType> {};

TEST_P(TinyPair, GgufAndSafetensorsHoldTheSameModel) {
  test::TempDir dir;
  test::TinySpec spec;
  spec.matrix_type = GetParam();
  test::write_tiny_gguf(dir.file("tiny.gguf"), spec);
  test::write_tiny_safetensors(dir.file("tiny"), spec);
  const auto g = ModelFile::open(dir.file("tiny.gguf"));
  const auto s = ModelFile::open(dir.file("tiny"));
  expect_same_config(g->config(), s->config());
  EXPECT_EQ(s->config().name, "tiny");
  EXPECT_NE(g->gguf(), nullptr);
  EXPECT_EQ(s->gguf(), nullptr);

  const int64_t hd = spec.hidden / spec.heads;
  for (const test::TinyTensor& t : test::make_tiny_weights(spec)) {
    SCOPED_TRACE(t.gguf_name);
    const TensorView& gv = g->get(t.gguf_name);
    const TensorView& sv = s->get(t.gguf_name);
    EXPECT_EQ(sv.type, DType::F32);
    EXPECT_EQ(gv.type, t.is_norm ? DType::F32 : spec.matrix_type);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(gv.ne[i], sv.ne[i]);
    EXPECT_EQ(sv.ne[0], t.shape.back());
    std::vector<float> gf = test::dequantize(gv);
    const std::vector<float> sf = test::dequantize(sv);
    EXPECT_EQ(sf, t.data);
    // GGUF q/k rows are in adjacent-pair order; undo it to compare.
    if (t.gguf_name.ends_with("attn_q.weight")) {
      EXPECT_NE(gf, sf);
      gf = test::unpermute_qk(gf, spec.heads, hd, spec.hidden);
    }
    if (t.gguf_name.ends_with("attn_k.weight"))
      gf = test::unpermute_qk(gf, spec.kv_heads, hd, spec.hidden);
    ASSERT_EQ(gf.size(), sf.size());
    float worst = 0;
    for (size_t i = 0; i < gf.size(); ++i) worst = std::max(worst, std::fabs(gf[i] - sf[i]));
    EXPECT_LE(worst, tolerance(t.is_norm ? DType::F32 : spec.matrix_type));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, TinyPair,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                           DType::Q4_0, DType::Q4_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(ModelFile, Qwen2PairHasBiasesAndKeepsNeoXOrder) {
  test::TempDir dir;
  test::TinySpec spec;
  spec.arch = "qwen2";
  test::write_tiny_gguf(dir.file("q.gguf"), spec);
  test::write_tiny_safetensors(dir.file("q"), spec);
  const auto g = ModelFile::open(dir.file("q.gguf"));
  const auto s = ModelFile::open(dir.file("q"));
  for (const auto* m : {g.get(), s.get()}) {
    EXPECT_EQ(m->config().arch, "qwen2");
    EXPECT_TRUE(m->config().qkv_bias);
    EXPECT_EQ(m->config().rope_layout, RopeLayout::kHalf);
  }
  for (const test::TinyTensor& t : test::make_tiny_weights(spec)) {
    SCOPED_TRACE(t.gguf_name);
    EXPECT_EQ(test::dequantize(g->get(t.gguf_name)), t.data);  // no permutation for qwen2
    EXPECT_EQ(test::dequantize(s->get(t.gguf_name)), t.data);
  }
  EXPECT_EQ(g->get("blk.1.attn_k.bias").ne[0], 32);

  // A missing bias is an error naming it.
  fs::remove_all(dir.file("q"));
  spec.arch = "llama";
  test::write_tiny_safetensors(dir.file("q"), spec);
  const std::string cfg = dir.file("q/config.json");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cfg));
  j["architectures"] = {"Qwen2ForCausalLM"};
  std::ofstream(cfg) << j.dump();
  test::expect_error([&] { ModelFile::open(dir.file("q")); }, {"'blk.0.attn_q.bias' is missing"});
}

TEST(ModelFile, PermutationIsTheConvertersAndInvertible) {
  // 1 head of dim 4, 1 column: HF rows [a0 a1 | b0 b1] → GGUF [a0 b0 a1 b1].
  const std::vector<float> w = {0, 1, 2, 3};
  EXPECT_EQ(test::permute_qk(w, 1, 4, 1), (std::vector<float>{0, 2, 1, 3}));
  // 2 heads of dim 6: each head [a0 a1 a2 | b0 b1 b2] → [a0 b0 a1 b1 a2 b2].
  const std::vector<float> w2 = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  EXPECT_EQ(test::permute_qk(w2, 2, 6, 1),
            (std::vector<float>{0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11}));
  EXPECT_EQ(test::unpermute_qk(test::permute_qk(w2, 2, 6, 1), 2, 6, 1), w2);
}

TEST(ModelFile, TiedAndSharded) {
  test::TempDir dir;
  test::TinySpec spec;
  spec.tied = true;
  spec.st_shards = 3;
  test::write_tiny_gguf(dir.file("t.gguf"), spec);
  test::write_tiny_safetensors(dir.file("t"), spec);
  ASSERT_TRUE(fs::exists(dir.file("t/model.safetensors.index.json")));
  const auto g = ModelFile::open(dir.file("t.gguf"));
  const auto s = ModelFile::open(dir.file("t") + "/");
  EXPECT_TRUE(g->config().tied_embeddings);
  EXPECT_TRUE(s->config().tied_embeddings);
  EXPECT_EQ(s->config().name, "t");
  EXPECT_EQ(g->find("output.weight"), nullptr);
  EXPECT_EQ(s->find("output.weight"), nullptr);
  EXPECT_NE(s->find("blk.1.ffn_down.weight"), nullptr);

  // An index that points a tensor at the wrong shard is refused.
  const std::string idx = dir.file("t/model.safetensors.index.json");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(idx));
  j["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";
  j["weight_map"]["model.layers.0.input_layernorm.weight"] = "model-00003-of-00003.safetensors";
  std::ofstream(idx) << j.dump();
  test::expect_error([&] { ModelFile::open(dir.file("t")); }, {"the index puts tensor"});
  j["weight_map"]["model.norm.weight"] = "../x.safetensors";
  std::ofstream(idx) << j.dump();
  test::expect_error([&] { ModelFile::open(dir.file("t")); }, {"'../x.safetensors'"});
}

TEST(ModelFile, TouchedRecordsLookups) {
  test::TempDir dir;
  test::write_tiny_gguf(dir.file("t.gguf"), {});
  const auto m = ModelFile::open(dir.file("t.gguf"));
  EXPECT_TRUE(m->touched().empty());
  m->get("blk.0.attn_q.weight");
  m->find("output_norm.weight");
  m->find("no.such.tensor");
  test::expect_error([&] { m->get("blk.9.attn_q.weight"); }, {"'blk.9.attn_q.weight'", "missing"});
  EXPECT_EQ(m->touched(), (std::set<std::string>{"blk.0.attn_q.weight", "output_norm.weight"}));
}

// release_pages drops only the file's pages: a tensor reads the same after
// it (faulted back in from the file), and bytes that are not the file's
// (a copy on the heap, which MADV_DONTNEED would zero) are left alone.
TEST(ModelFile, ReleasePagesKeepsTheBytes) {
  test::TempDir dir;
  test::TinySpec spec;
  spec.vocab = 4096;  // token_embd: 4096 x 64 F32, 1 MiB
  test::write_tiny_gguf(dir.file("t.gguf"), spec);
  const auto m = ModelFile::open(dir.file("t.gguf"));
  const TensorView& t = m->get("token_embd.weight");
  ASSERT_GE(t.nbytes, uint64_t(1) << 20);
  const auto* b = static_cast<const uint8_t*>(t.data);
  std::vector<uint8_t> copy(b, b + t.nbytes);
  m->release_pages(t);
  EXPECT_EQ(std::memcmp(t.data, copy.data(), copy.size()), 0);
  TensorView heap = t;
  heap.data = copy.data();
  const std::vector<uint8_t> before = copy;
  m->release_pages(heap);
  EXPECT_EQ(copy, before);
}

// Overwrites `n` bytes at the data of a tensor in a GGUF file.
void patch_tensor(const std::string& path, const std::string& name, const void* bytes, size_t n) {
  uint64_t at;
  {
    const auto f = GgufFile::open(path);
    at = f->data_start() + f->find_tensor(name)->offset;
  }
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(std::streamoff(at));
  io.write(static_cast<const char*>(bytes), std::streamsize(n));
}

// Sets a u32 metadata value in place (the key must be unique in the file).
void patch_u32_key(const std::string& path, const std::string& key, uint32_t v) {
  std::vector<uint8_t> b = test::read_bytes(path);
  const std::string needle = key;
  auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  ASSERT_NE(it, b.end());
  const size_t at = size_t(it - b.begin()) + key.size() + 4;  // skip the u32 type
  std::memcpy(&b[at], &v, 4);
  test::GgufWriter::write_file(path, b);
}

TEST(ModelFile, NaNInANormIsRefused) {
  test::TempDir dir;
  const std::string p = dir.file("t.gguf");
  test::write_tiny_gguf(p, {});
  const float bad[3] = {1.f, 1.f, NAN};
  patch_tensor(p, "blk.1.ffn_norm.weight", bad, sizeof bad);
  test::expect_error([&] { ModelFile::open(p); }, {"'blk.1.ffn_norm.weight'", "element 2", p});
  const float inf = INFINITY;
  test::write_tiny_gguf(p, {});
  patch_tensor(p, "output_norm.weight", &inf, 4);
  test::expect_error([&] { ModelFile::open(p); }, {"'output_norm.weight'", "inf"});
}

TEST(ModelFile, ShapeThatDoesNotMatchTheConfig) {
  test::TempDir dir;
  const std::string p = dir.file("t.gguf");
  test::write_tiny_gguf(p, {});
  patch_u32_key(p, "llama.attention.head_count_kv", 4);
  test::expect_error([&] { ModelFile::open(p); },
                     {"'blk.0.attn_k.weight'", "shape [64, 32]", "implies [64, 64]"});
  test::write_tiny_gguf(p, {});
  patch_u32_key(p, "llama.feed_forward_length", 128);
  test::expect_error([&] { ModelFile::open(p); }, {"'blk.0.ffn_gate.weight'", "[64, 128]"});
  test::write_tiny_gguf(p, {});
  patch_u32_key(p, "llama.block_count", 3);
  test::expect_error([&] { ModelFile::open(p); }, {"'blk.2.attn_norm.weight' is missing"});
  test::write_tiny_gguf(p, {});
  patch_u32_key(p, "llama.vocab_size", 300);
  test::expect_error([&] { ModelFile::open(p); }, {"'token_embd.weight'", "[64, 272]"});

  // Same from a safetensors folder, through config.json.
  test::write_tiny_safetensors(dir.file("st"), {});
  const std::string cfg = dir.file("st/config.json");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cfg));
  j["intermediate_size"] = 64;
  std::ofstream(cfg) << j.dump();
  test::expect_error([&] { ModelFile::open(dir.file("st")); },
                     {"'blk.0.ffn_gate.weight'", "[64, 96]", "[64, 64]", dir.file("st")});
  j["intermediate_size"] = 96;
  j["tie_word_embeddings"] = true;  // lm_head present but unused: fine
  std::ofstream(cfg) << j.dump();
  EXPECT_TRUE(ModelFile::open(dir.file("st"))->config().tied_embeddings);
}

TEST(ModelFile, MissingOutputWhenNotTied) {
  test::TempDir dir;
  test::TinySpec spec;
  spec.tied = true;
  test::write_tiny_safetensors(dir.file("st"), spec);
  const std::string cfg = dir.file("st/config.json");
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cfg));
  j["tie_word_embeddings"] = false;
  std::ofstream(cfg) << j.dump();
  test::expect_error([&] { ModelFile::open(dir.file("st")); }, {"'output.weight' is missing"});
}

TEST(ModelFile, OpenRefusesWhatItCannotRead) {
  test::TempDir dir;
  test::expect_error([&] { ModelFile::open(dir.file("absent")); }, {"no such file"});
  test::GgufWriter::write_file(dir.file("x.bin"), {'P', 'K', 3, 4, 5});
  test::expect_error([&] { ModelFile::open(dir.file("x.bin")); }, {"neither a GGUF"});
  test::GgufWriter::write_file(dir.file("m.safetensors"), {1, 0, 0, 0, 0, 0, 0, 0, '{'});
  test::expect_error([&] { ModelFile::open(dir.file("m.safetensors")); }, {"folder"});
  fs::create_directories(dir.file("empty"));
  test::expect_error([&] { ModelFile::open(dir.file("empty")); }, {"config.json"});
  test::write_tiny_safetensors(dir.file("st"), {});
  fs::remove(dir.file("st/model.safetensors"));
  test::expect_error([&] { ModelFile::open(dir.file("st")); }, {"no *.safetensors"});
  std::ofstream(dir.file("st/config.json")) << "{not json";
  test::expect_error([&] { ModelFile::open(dir.file("st")); }, {"config.json", "not valid JSON"});
}

// Rewrites the header of a one-shard folder's model.safetensors (the data
// stays as it is).
template <class F>
void edit_header(const std::string& dir, F&& edit) {
  const std::string path = dir + "/model.safetensors";
  const std::vector<uint8_t> b = test::read_bytes(path);
  uint64_t n;
  std::memcpy(&n, b.data(), 8);
  nlohmann::json h = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + long(n));
  std::vector<uint8_t> data(b.begin() + 8 + long(n), b.end());
  edit(h, data);
  const std::string text = h.dump();
  test::write_safetensors_raw(path, text.size(), text, data);
}

TEST(ModelFile, Fp8FoldersOpenWithTheirScales) {
  for (auto mode : {test::TinySpec::kFp8PerTensor, test::TinySpec::kFp8PerChannel}) {
    SCOPED_TRACE(int(mode));
    test::TempDir dir;
    test::TinySpec spec;
    spec.st_fp8 = mode;
    test::write_tiny_safetensors(dir.file("fp8"), spec);
    spec.fp8_dequantized = true;
    test::write_tiny_safetensors(dir.file("twin"), spec);
    const auto m = ModelFile::open(dir.file("fp8"));
    const auto twin = ModelFile::open(dir.file("twin"));
    EXPECT_TRUE(m->config().fp8_weights);
    EXPECT_FALSE(twin->config().fp8_weights);
    EXPECT_EQ(m->get("token_embd.weight").type, DType::F32);  // not quantised
    EXPECT_EQ(m->get("output.weight").type, DType::F32);
    EXPECT_EQ(m->get("blk.0.attn_norm.weight").type, DType::F32);
    for (const char* name :
         {"blk.0.attn_q.weight", "blk.1.attn_v.weight", "blk.1.ffn_down.weight"}) {
      const TensorView& w = m->get(name);
      const TensorView& f = twin->get(name);
      ASSERT_EQ(w.type, DType::F8_E4M3) << name;
      ASSERT_EQ(f.type, DType::F32) << name;
      const std::vector<float> sc = fp8_row_scales(*m, name);
      ASSERT_EQ(int64_t(sc.size()), w.rows());
      if (mode == test::TinySpec::kFp8PerTensor) {
        for (float v : sc) EXPECT_EQ(v, sc[0]);
      }
      const auto* codes = static_cast<const uint8_t*>(w.data);
      const auto* want = static_cast<const float*>(f.data);
      for (int64_t r = 0; r < w.rows(); ++r)
        for (int64_t c = 0; c < w.cols(); ++c)
          ASSERT_EQ(sc[size_t(r)] * fp8::e4m3_to_f32(codes[r * w.cols() + c]),
                    want[r * w.cols() + c])
              << name << " [" << r << ", " << c << "]";
    }
    test::expect_error([&] { fp8_row_scales(*m, "blk.0.attn_norm.weight"); },
                       {"'blk.0.attn_norm.weight'", "not F8_E4M3"});
  }
}

TEST(ModelFile, Fp8WeightsWithoutAUsableScaleAreRefused) {
  test::TempDir dir;
  test::TinySpec spec;
  spec.st_fp8 = test::TinySpec::kFp8PerChannel;
  const std::string st = dir.file("st");
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  auto fresh = [&] { test::write_tiny_safetensors(st, spec); };
  auto refused = [&](std::initializer_list<std::string> parts) {
    test::expect_error([&] { ModelFile::open(st); }, parts);
  };
  fresh();
  edit_header(st, [&](nlohmann::json& h, auto&) { h.erase(q + "_scale"); });
  refused({"'blk.1.attn_q.weight' is F8_E4M3", "'blk.1.attn_q.weight_scale' is missing"});
  fresh();  // 64 rows: [32, 2] is neither per tensor nor per row
  edit_header(st, [&](nlohmann::json& h, auto&) { h[q + "_scale"]["shape"] = {32, 2}; });
  refused({"'blk.1.attn_q.weight_scale'", "[2, 32]", "block-wise"});
  fresh();
  edit_header(st, [&](nlohmann::json& h, std::vector<uint8_t>& d) {
    const uint64_t at = h[q + "_scale"]["data_offsets"][0].get<uint64_t>() + 2 * 5;
    const uint16_t neg = f32_to_bf16(-1.f);
    std::memcpy(&d[at], &neg, 2);
  });
  refused({"'blk.1.attn_q.weight_scale'", "element 5", "-1"});
  fresh();
  edit_header(st, [&](nlohmann::json& h, auto&) {
    h[q + "_scale"]["dtype"] = "F16";  // same bytes, read as F16: fine
  });
  EXPECT_NO_THROW(ModelFile::open(st));
  fresh();
  edit_header(st, [&](nlohmann::json& h, auto&) {
    h[q + "_scale"]["dtype"] = "F8_E4M3";
    h[q + "_scale"]["shape"] = {64, 2};
  });
  refused({"'blk.1.attn_q.weight_scale' is F8_E4M3", "F32, F16 or BF16"});
  fresh();  // FP8 codes but nothing in config.json says so
  const std::string cfg = st + "/config.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cfg));
  j.erase("quantization_config");
  std::ofstream(cfg) << j.dump();
  refused({"'blk.0.attn_q.weight' is F8_E4M3", "no FP8 quantization_config"});
  // A scale beside a weight that is not FP8.
  spec.st_fp8 = test::TinySpec::kFp8None;
  fresh();
  edit_header(st, [&](nlohmann::json& h, std::vector<uint8_t>& d) {
    const float one = 1.f;
    const uint64_t at = d.size();
    d.insert(d.end(), reinterpret_cast<const uint8_t*>(&one),
             reinterpret_cast<const uint8_t*>(&one) + 4);
    h["lm_head.weight_scale"] = {
        {"dtype", "F32"}, {"shape", nlohmann::json::array()}, {"data_offsets", {at, at + 4}}};
  });
  refused({"'output.weight_scale' is given", "'output.weight' is F32"});
}

TEST(ModelFile, OpensTheDefaultModel) {
  const char* env = std::getenv("KVASIR_SOURCE_DIR");
  const std::string path = std::string(env && *env ? env : KVASIR_SOURCE_DIR) +
                           "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path))
    GTEST_SKIP() << "default model absent: " << path << " (run scripts/fetch-model)";
  const auto m = ModelFile::open(path);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(m->get("token_embd.weight").type, DType::Q8_0);
  EXPECT_EQ(m->get("blk.29.ffn_down.weight").type, DType::Q4_1);
  EXPECT_EQ(m->get("blk.29.ffn_down.weight").ne[0], 1536);
  EXPECT_EQ(m->get("output_norm.weight").type, DType::F32);
  EXPECT_EQ(m->find("output.weight"), nullptr);
  EXPECT_NE(m->gguf(), nullptr);
  EXPECT_EQ(m->touched().size(), 3u);
}

}  // namespace
}  // namespace kvasir
