// GGUF reader: metadata round trip of every type, tensor infos, the real
// default model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "model/config.h"
#include "model/gguf.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quant.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

using test::GgufWriter;

std::string default_model() {
  const char* env = std::getenv("KVASIR_SOURCE_DIR");
  const std::string root = env && *env ? env : KVASIR_SOURCE_DIR;
  return root + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(Gguf, RoundTripsEveryMetadataType) {
  test::TempDir dir;
  GgufWriter w;
  w.add_u8("u8", 200);
  w.add_i8("i8", -100);
  w.add_u16("u16", 60000);
  w.add_i16("i16", -30000);
  w.add_u32("u32", 4000000000u);
  w.add_i32("i32", -2000000000);
  w.add_u64("u64", 18000000000000000000ull);
  w.add_i64("i64", -9000000000000000000ll);
  w.add_f32("f32", 1.5f);
  w.add_f64("f64", -2.25);
  w.add_bool("bool", true);
  w.add_string("str", "héllo");
  w.add_string("empty", "");
  w.add_array("a_u8", GgufType::U8, std::vector<uint8_t>{1, 2, 255});
  w.add_array("a_i16", GgufType::I16, std::vector<int16_t>{-1, 7});
  w.add_array("a_u32", GgufType::U32, std::vector<uint32_t>{3, 4000000000u});
  w.add_array("a_i32", GgufType::I32, std::vector<int32_t>{-5, 6});
  w.add_array("a_u64", GgufType::U64, std::vector<uint64_t>{1ull << 40});
  w.add_array("a_i64", GgufType::I64, std::vector<int64_t>{-(1ll << 40)});
  w.add_array("a_f32", GgufType::F32, std::vector<float>{0.5f, -1.f});
  w.add_array("a_f64", GgufType::F64, std::vector<double>{3.25});
  w.add_array("a_bool", GgufType::BOOL, std::vector<uint8_t>{0, 1, 1});
  w.add_array("a_empty", GgufType::I32, std::vector<int32_t>{});
  w.add_string_array("a_str", {"a", "", "xyz"});
  // An array of two arrays: [[1, 2], ["s"]].
  test::Bytes inner = GgufWriter::encode_array(GgufType::U16, 2, {1, 0, 2, 0});
  const test::Bytes s =
      GgufWriter::encode_array(GgufType::STRING, 1, GgufWriter::encode_string("s"));
  inner.insert(inner.end(), s.begin(), s.end());
  w.add_raw("nested", GgufType::ARRAY, GgufWriter::encode_array(GgufType::ARRAY, 2, inner));
  w.add_u32("after_nested", 42);  // parsing resumes correctly after the nested array
  w.write(dir.file("m.gguf"));

  const auto f = GgufFile::open(dir.file("m.gguf"));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->metadata().size(), 26u);
  EXPECT_EQ(f->get("u8").as_uint("u8"), 200u);
  EXPECT_EQ(f->get("i8").as_int("i8"), -100);
  EXPECT_EQ(f->get("u16").as_uint("u16"), 60000u);
  EXPECT_EQ(f->get("i16").as_int("i16"), -30000);
  EXPECT_EQ(f->get("u32").as_uint("u32"), 4000000000u);
  EXPECT_EQ(f->get("i32").as_int("i32"), -2000000000);
  EXPECT_EQ(f->get("u64").as_uint("u64"), 18000000000000000000ull);
  EXPECT_EQ(f->get("i64").as_int("i64"), -9000000000000000000ll);
  EXPECT_EQ(f->get("f32").as_float("f32"), 1.5);
  EXPECT_EQ(f->get("f64").as_float("f64"), -2.25);
  EXPECT_EQ(f->get("u32").as_float("u32"), 4e9);  // ints read as floats too
  EXPECT_TRUE(f->get("bool").as_bool("bool"));
  EXPECT_EQ(f->get("str").as_string("str"), "héllo");
  EXPECT_EQ(f->get("empty").as_string("empty"), "");
  EXPECT_EQ(f->get("u8").type, GgufType::U8);
  EXPECT_EQ(f->get("f64").type, GgufType::F64);

  const GgufArray& a8 = f->get("a_u8").as_array("a_u8");
  EXPECT_EQ(a8.elem, GgufType::U8);
  ASSERT_EQ(a8.count, 3u);
  EXPECT_EQ(a8.int_at(2, "a_u8"), 255);
  EXPECT_EQ(f->get("a_i16").as_array("").int_at(0, ""), -1);
  EXPECT_EQ(f->get("a_u32").as_array("").int_at(1, ""), 4000000000ll);
  EXPECT_EQ(f->get("a_i32").as_array("").int_at(0, ""), -5);
  EXPECT_EQ(f->get("a_u64").as_array("").int_at(0, ""), 1ll << 40);
  EXPECT_EQ(f->get("a_i64").as_array("").int_at(0, ""), -(1ll << 40));
  EXPECT_EQ(f->get("a_f32").as_array("").float_at(1, ""), -1.0);
  EXPECT_EQ(f->get("a_f64").as_array("").float_at(0, ""), 3.25);
  EXPECT_EQ(f->get("a_bool").as_array("").int_at(1, ""), 1);
  EXPECT_EQ(f->get("a_empty").as_array("").count, 0u);
  const GgufArray& as = f->get("a_str").as_array("a_str");
  ASSERT_EQ(as.strings.size(), 3u);
  EXPECT_EQ(as.strings[0], "a");
  EXPECT_EQ(as.strings[1], "");
  EXPECT_EQ(as.strings[2], "xyz");
  const GgufArray& nested = f->get("nested").as_array("nested");
  EXPECT_EQ(nested.elem, GgufType::ARRAY);
  EXPECT_EQ(nested.count, 2u);
  EXPECT_EQ(nested.nbytes, inner.size());
  EXPECT_EQ(f->get("after_nested").as_uint("after_nested"), 42u);
  EXPECT_EQ(f->find("absent"), nullptr);
}

TEST(Gguf, TypedAccessorsNameTheKeyOnMismatch) {
  test::TempDir dir;
  GgufWriter w;
  w.add_i32("neg", -3);
  w.add_string("s", "x");
  w.add_array("arr", GgufType::F32, std::vector<float>{1.f});
  w.add_u64("big", ~0ull);
  w.write(dir.file("m.gguf"));
  const auto f = GgufFile::open(dir.file("m.gguf"));
  test::expect_error([&] { f->get("neg").as_uint("neg"); }, {"'neg'", "non-negative"});
  test::expect_error([&] { f->get("s").as_int("s"); }, {"'s'", "integer", "string"});
  test::expect_error([&] { f->get("s").as_bool("s"); }, {"'s'", "bool"});
  test::expect_error([&] { f->get("neg").as_string("neg"); }, {"'neg'", "string", "i32"});
  test::expect_error([&] { f->get("s").as_array("s"); }, {"'s'", "array"});
  test::expect_error([&] { f->get("big").as_int("big"); }, {"'big'", "signed"});
  test::expect_error([&] { f->get("arr").as_array("arr").int_at(0, "arr"); }, {"'arr'", "f32"});
  test::expect_error([&] { f->get("arr").as_array("arr").float_at(1, "arr"); }, {"'arr'", "range"});
  test::expect_error([&] { f->get("missing"); }, {"'missing'", "missing", dir.file("m.gguf")});
}

TEST(Gguf, TensorInfosAndData) {
  test::TempDir dir;
  test::TinySpec spec;
  spec.matrix_type = DType::Q4_1;
  test::write_tiny_gguf(dir.file("t.gguf"), spec);
  const auto f = GgufFile::open(dir.file("t.gguf"));
  EXPECT_EQ(f->tensors().size(), 3u + 9u * 2);  // embd, norm, output + 9 per layer
  const GgufTensor* q = f->find_tensor("blk.1.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->view.type, DType::Q4_1);
  EXPECT_EQ(q->view.n_dims, 2);
  EXPECT_EQ(q->view.ne[0], 64);
  EXPECT_EQ(q->view.ne[1], 64);
  EXPECT_EQ(q->view.nbytes, 64u * 64 / 32 * 20);
  EXPECT_EQ(q->view.row_bytes(), 40u);
  for (const GgufTensor& t : f->tensors()) {
    EXPECT_EQ(t.offset % f->alignment(), 0u) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.view.data) % 32, 0u) << t.name;
    EXPECT_LE(f->data_start() + t.offset + t.view.nbytes, f->file_size()) << t.name;
  }
  const GgufTensor* norm = f->find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->view.type, DType::F32);
  EXPECT_EQ(norm->view.n_dims, 1);
  // The stored norm equals the generated weights bit for bit.
  const auto weights = test::make_tiny_weights(spec);
  const auto& want = weights[weights.size() - 2];
  ASSERT_EQ(want.gguf_name, "output_norm.weight");
  EXPECT_EQ(test::dequantize(norm->view), want.data);
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
}

TEST(Gguf, AcceptsVersion2) {
  test::TempDir dir;
  GgufWriter w;
  w.version = 2;
  w.add_u32("k", 1);
  w.add_tensor("t", DType::F32, {4}, test::Bytes(16, 0));
  w.write(dir.file("v2.gguf"));
  const auto f = GgufFile::open(dir.file("v2.gguf"));
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->tensors().size(), 1u);
}

TEST(Gguf, HonoursDeclaredAlignment) {
  test::TempDir dir;
  GgufWriter w;
  w.alignment = 64;
  w.add_u32("general.alignment", 64);
  w.add_tensor("a", DType::F32, {3}, test::Bytes(12, 1));
  w.add_tensor("b", DType::F32, {5}, test::Bytes(20, 2));
  w.write(dir.file("a.gguf"));
  const auto f = GgufFile::open(dir.file("a.gguf"));
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_start() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, 64u);
  EXPECT_EQ(static_cast<const uint8_t*>(f->find_tensor("b")->view.data)[0], 2);
}

TEST(Gguf, ReadsTheDefaultModel) {
  const std::string path = default_model();
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "default model absent: " << path << " (run scripts/fetch-model)";
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f->get("general.architecture").as_string(""), "llama");
  EXPECT_EQ(f->get("tokenizer.ggml.tokens").as_array("").strings.size(), 49152u);
  EXPECT_EQ(f->get("tokenizer.ggml.model").as_string(""), "gpt2");
  int q41 = 0, f32 = 0, q80 = 0;
  for (const GgufTensor& t : f->tensors()) {
    q41 += t.view.type == DType::Q4_1;
    f32 += t.view.type == DType::F32;
    q80 += t.view.type == DType::Q8_0;
  }
  EXPECT_EQ(q41, 210);
  EXPECT_EQ(f32, 61);
  EXPECT_EQ(q80, 1);
  const GgufTensor* e = f->find_tensor("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->view.type, DType::Q8_0);
  EXPECT_EQ(e->view.ne[0], 576);
  EXPECT_EQ(e->view.ne[1], 49152);
  EXPECT_EQ(f->find_tensor("blk.0.attn_k.weight")->view.ne[1], 192);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);

  const ModelConfig c = config_from_gguf(*f);
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn, 1536);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.rope_freqs_tensor);
  EXPECT_EQ(c.rope_layout, RopeLayout::kAdjacent);
  EXPECT_EQ(c.rope_llama3_factor, 0.f);
}

}  // namespace
}  // namespace kvasir
