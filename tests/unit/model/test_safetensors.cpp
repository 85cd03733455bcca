// Safetensors reader: good files, the HF → GGUF name map, malformed headers.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/half.h"
#include "model/safetensors.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

using nlohmann::json;

class Safetensors : public ::testing::Test {
 protected:
  std::string write(const json& header, const std::vector<uint8_t>& data) {
    const std::string text = header.dump();
    test::write_safetensors_raw(path_, text.size(), text, data);
    return path_;
  }
  void expect_bad(const json& header, const std::vector<uint8_t>& data,
                  std::initializer_list<std::string> parts) {
    write(header, data);
    test::expect_error([&] { SafetensorsFile::open(path_); }, parts);
    test::expect_error([&] { SafetensorsFile::open(path_); }, {path_});
  }
  test::TempDir dir_;
  std::string path_ = dir_.file("m.safetensors");
};

TEST_F(Safetensors, ReadsTensorsInGgufOrientation) {
  std::vector<uint8_t> data(2 * 3 * 4 + 4 * 2 + 5 * 2);
  const float f[6] = {0, 1, 2, 3, 4, 5};
  std::memcpy(data.data(), f, sizeof f);
  const uint16_t h = f32_to_fp16(1.5f), b = f32_to_bf16(-2.f);
  std::memcpy(data.data() + 24, &h, 2);
  std::memcpy(data.data() + 32, &b, 2);
  write({{"__metadata__", {{"format", "pt"}}},
         {"w", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
         {"h", {{"dtype", "F16"}, {"shape", {4}}, {"data_offsets", {24, 32}}}},
         {"b", {{"dtype", "BF16"}, {"shape", {5}}, {"data_offsets", {32, 42}}}},
         {"e", {{"dtype", "F32"}, {"shape", {0, 7}}, {"data_offsets", {42, 42}}}}},
        data);
  const auto f2 = SafetensorsFile::open(path_);
  EXPECT_EQ(f2->tensors().size(), 4u);
  const SafeTensor* w = f2->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->view.type, DType::F32);
  EXPECT_EQ(w->view.n_dims, 2);
  EXPECT_EQ(w->view.ne[0], 3);  // innermost first: [out=2, in=3] → ne = {3, 2}
  EXPECT_EQ(w->view.ne[1], 2);
  EXPECT_EQ(w->view.nbytes, 24u);
  EXPECT_EQ(static_cast<const float*>(w->view.data)[5], 5.f);
  EXPECT_EQ(w->view.row_bytes(), 12u);
  uint16_t got;
  std::memcpy(&got, f2->find("h")->view.data, 2);
  EXPECT_EQ(fp16_to_f32(got), 1.5f);
  EXPECT_EQ(f2->find("h")->view.type, DType::F16);
  std::memcpy(&got, f2->find("b")->view.data, 2);
  EXPECT_EQ(bf16_to_f32(got), -2.f);
  EXPECT_EQ(f2->find("b")->view.type, DType::BF16);
  EXPECT_EQ(f2->find("e")->view.nbytes, 0u);
  EXPECT_EQ(f2->find("__metadata__"), nullptr);
}

TEST(SafetensorsNames, MapsHuggingFaceNamesToGguf) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
      {"model.layers.12.self_attn.q_proj.weight", "blk.12.attn_q.weight"},
      {"model.layers.3.self_attn.k_proj.weight", "blk.3.attn_k.weight"},
      {"model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight"},
      {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight"},
      {"model.layers.3.self_attn.q_proj.bias", "blk.3.attn_q.bias"},
      {"model.layers.3.self_attn.k_proj.bias", "blk.3.attn_k.bias"},
      {"model.layers.3.self_attn.v_proj.bias", "blk.3.attn_v.bias"},
      {"model.layers.7.post_attention_layernorm.weight", "blk.7.ffn_norm.weight"},
      {"model.layers.7.mlp.gate_proj.weight", "blk.7.ffn_gate.weight"},
      {"model.layers.7.mlp.up_proj.weight", "blk.7.ffn_up.weight"},
      {"model.layers.7.mlp.down_proj.weight", "blk.7.ffn_down.weight"},
  };
  for (const auto& [hf, gg] : cases) EXPECT_EQ(hf_to_gguf_name(hf).value_or("-"), gg) << hf;
  for (const char* other :
       {"model.layers.0.self_attn.rotary_emb.inv_freq", "model.layers..mlp.up_proj.weight",
        "model.layers.x.mlp.up_proj.weight", "model.layers.01.mlp.up_proj.weight", "model.layers.1",
        "model.layers.1.", "model.embed_tokens", "", "blk.0.attn_q.weight"})
    EXPECT_FALSE(hf_to_gguf_name(other)) << other;
}

TEST_F(Safetensors, TooSmallForTheHeaderLength) {
  test::GgufWriter::write_file(path_, {1, 2, 3});
  test::expect_error([&] { SafetensorsFile::open(path_); }, {"truncated"});
}

TEST_F(Safetensors, HeaderLengthPastEnd) {
  test::write_safetensors_raw(path_, 1000, "{}", {});
  test::expect_error([&] { SafetensorsFile::open(path_); }, {"header length 1000", "past the end"});
  test::write_safetensors_raw(path_, ~uint64_t(0), "{}", {});
  test::expect_error([&] { SafetensorsFile::open(path_); }, {"header length", "allowed"});
}

TEST_F(Safetensors, BadJson) {
  test::write_safetensors_raw(path_, 9, "{\"a\": [1,", {});
  test::expect_error([&] { SafetensorsFile::open(path_); }, {"not valid JSON"});
  expect_bad(json::array({1, 2}), {}, {"JSON object"});
  expect_bad({{"t", 5}}, {}, {"'t'", "object"});
  expect_bad({{"t", {{"shape", {1}}, {"data_offsets", {0, 4}}}}}, {}, {"'t'", "'dtype'"});
  expect_bad({{"t", {{"dtype", "F32"}, {"shape", "1"}, {"data_offsets", {0, 4}}}}}, {},
             {"'t'", "'shape'"});
  expect_bad({{"t", {{"dtype", "F32"}, {"shape", {-1}}, {"data_offsets", {0, 4}}}}}, {},
             {"'t'", "'shape'", "non-negative"});
  expect_bad({{"t", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0}}}}}, {},
             {"'t'", "'data_offsets'"});
  expect_bad({{"t", {{"dtype", "F32"}, {"shape", {1, 1, 1, 1, 1}}, {"data_offsets", {0, 4}}}}},
             std::vector<uint8_t>(4), {"'t'", "5 dimensions"});
}

TEST_F(Safetensors, DuplicateTensorName) {
  const std::string h =
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  test::write_safetensors_raw(path_, h.size(), h, std::vector<uint8_t>(4));
  test::expect_error([&] { SafetensorsFile::open(path_); }, {"twice"});
}

TEST_F(Safetensors, OffsetsPastEnd) {
  expect_bad({{"t", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}},
             std::vector<uint8_t>(8), {"'t'", "past the 8-byte data area"});
  expect_bad({{"t", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 4}}}}},
             std::vector<uint8_t>(8), {"'t'", "reversed"});
}

TEST_F(Safetensors, SizeMismatch) {
  expect_bad({{"t", {{"dtype", "F16"}, {"shape", {2, 3}}, {"data_offsets", {0, 8}}}}},
             std::vector<uint8_t>(16), {"'t'", "span 8 bytes", "needs 12"});
  const uint64_t big = uint64_t(1) << 62;
  expect_bad({{"t", {{"dtype", "F32"}, {"shape", {big, 16}}, {"data_offsets", {0, 8}}}}},
             std::vector<uint8_t>(8), {"'t'", "overflows"});
  expect_bad({{"t", {{"dtype", "F32"}, {"shape", {big}}, {"data_offsets", {0, 8}}}}},
             std::vector<uint8_t>(8), {"'t'", "byte size", "overflows"});
  // A zero dimension empties the tensor but not its row count: the fuzzer's
  // [2^32, 4292699467, 0] passed the element count and overflowed rows().
  for (const auto& shape : {std::vector<uint64_t>{uint64_t(1) << 32, 4292699467u, 0},
                            std::vector<uint64_t>{0, uint64_t(1) << 40, uint64_t(1) << 40, 5}})
    expect_bad({{"t", {{"dtype", "F16"}, {"shape", shape}, {"data_offsets", {0, 0}}}}},
               std::vector<uint8_t>(8), {"'t'", "element count", "overflows int64"});
}

TEST_F(Safetensors, UnknownDtype) {
  expect_bad({{"t", {{"dtype", "Q9"}, {"shape", {1}}, {"data_offsets", {0, 1}}}}},
             std::vector<uint8_t>(1), {"'t'", "unknown dtype 'Q9'"});
  expect_bad({{"t", {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {0, 8}}}}},
             std::vector<uint8_t>(8), {"'t'", "I64", "not supported"});
  expect_bad({{"t", {{"dtype", "F8_E5M2"}, {"shape", {1}}, {"data_offsets", {0, 1}}}}},
             std::vector<uint8_t>(1), {"'t'", "F8_E5M2", "not supported", "F8_E4M3"});
}

TEST_F(Safetensors, ReadsFp8E4M3OneBytePerElement) {
  std::vector<uint8_t> data = {0x38, 0xB8, 0x7E, 0x01, 0x00, 0x08, 0, 0, 0, 0};
  const float scale = 0.5f;
  std::memcpy(data.data() + 6, &scale, 4);
  write({{"w", {{"dtype", "F8_E4M3"}, {"shape", {2, 3}}, {"data_offsets", {0, 6}}}},
         {"w_scale", {{"dtype", "F32"}, {"shape", json::array()}, {"data_offsets", {6, 10}}}}},
        data);
  const auto f = SafetensorsFile::open(path_);
  const SafeTensor* w = f->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->view.type, DType::F8_E4M3);
  EXPECT_EQ(w->view.ne[0], 3);
  EXPECT_EQ(w->view.ne[1], 2);
  EXPECT_EQ(w->view.nbytes, 6u);
  EXPECT_EQ(w->view.row_bytes(), 3u);
  EXPECT_EQ(static_cast<const uint8_t*>(w->view.data)[2], 0x7E);
  const SafeTensor* s = f->find("w_scale");  // shape []: one element
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->view.ne[0] * s->view.ne[1], 1);
  EXPECT_EQ(s->view.nbytes, 4u);
  // The byte count follows the element size of F8_E4M3: 1.
  expect_bad({{"t", {{"dtype", "F8_E4M3"}, {"shape", {2, 3}}, {"data_offsets", {0, 12}}}}},
             std::vector<uint8_t>(12), {"'t'", "span 12 bytes", "needs 6"});
}

TEST(SafetensorsNames, Fp8ScalesFollowTheirWeightAndActivationScalesAreIgnored) {
  EXPECT_EQ(hf_to_gguf_name("model.layers.3.self_attn.q_proj.weight_scale"),
            "blk.3.attn_q.weight_scale");
  EXPECT_EQ(hf_to_gguf_name("model.layers.0.mlp.down_proj.weight_scale"),
            "blk.0.ffn_down.weight_scale");
  EXPECT_EQ(hf_to_gguf_name("lm_head.weight_scale"), "output.weight_scale");
  EXPECT_EQ(hf_to_gguf_name("model.layers.0.mlp.down_proj.input_scale"), std::nullopt);
  EXPECT_EQ(hf_to_gguf_name("model.layers.0.self_attn.k_scale"), std::nullopt);
  EXPECT_EQ(hf_to_gguf_name("model.layers.0.self_attn.q_proj.weight_scale_inv"), std::nullopt);
  EXPECT_EQ(hf_to_gguf_name("model.layers.0.self_attn.rotary_emb.weight_scale"), std::nullopt);
  EXPECT_EQ(hf_to_gguf_name("_scale"), std::nullopt);
  EXPECT_EQ(hf_to_gguf_name(".weight_scale"), std::nullopt);
}

TEST_F(Safetensors, TruncatedTinyFileNeverCrashes) {
  test::TinySpec spec;
  spec.layers = 1;
  test::write_tiny_safetensors(dir_.file("tiny"), spec);
  const auto full = test::read_bytes(dir_.file("tiny/model.safetensors"));
  for (size_t cut = 0; cut < full.size(); cut += 1 + cut / 8) {
    test::GgufWriter::write_file(path_,
                                 std::vector<uint8_t>(full.begin(), full.begin() + long(cut)));
    SCOPED_TRACE("cut at " + std::to_string(cut));
    test::expect_error([&] { SafetensorsFile::open(path_); }, {path_});
  }
}

}  // namespace
}  // namespace kvasir
