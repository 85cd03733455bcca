// ModelConfig: validation, GGUF metadata, HF config.json.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/gguf.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

using nlohmann::json;
using test::GgufWriter;

ModelConfig good() {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 2;
  c.hidden = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn = 96;
  c.vocab = 272;
  c.context_length = 512;
  return c;
}

TEST(ConfigValidate, AcceptsAGoodConfig) {
  EXPECT_NO_THROW(good().validate("src"));
}

TEST(ConfigValidate, NamesTheBadField) {
  auto bad = [](auto mutate, std::initializer_list<std::string> parts) {
    ModelConfig c = good();
    mutate(c);
    std::vector<std::string> all(parts);
    all.push_back("src:");
    test::expect_error([&] { c.validate("src"); }, {all[0], all.back()});
  };
  bad([](ModelConfig& c) { c.arch = "gpt2"; }, {"gpt2"});
  bad([](ModelConfig& c) { c.n_layers = 0; }, {"n_layers"});
  bad([](ModelConfig& c) { c.hidden = -1; }, {"hidden"});
  bad([](ModelConfig& c) { c.n_heads = 0; }, {"n_heads"});
  bad([](ModelConfig& c) { c.n_kv_heads = 3; }, {"n_kv_heads 3 does not divide"});
  bad([](ModelConfig& c) { c.n_kv_heads = 8; }, {"n_kv_heads"});
  bad([](ModelConfig& c) { c.head_dim = 15; }, {"head_dim 15 must be even"});
  bad([](ModelConfig& c) { c.head_dim = 0; }, {"head_dim"});
  bad([](ModelConfig& c) { c.ffn = 0; }, {"ffn"});
  bad([](ModelConfig& c) { c.vocab = 0; }, {"vocab"});
  bad([](ModelConfig& c) { c.context_length = 0; }, {"context_length"});
  bad([](ModelConfig& c) { c.rope_theta = NAN; }, {"rope_theta"});
  bad([](ModelConfig& c) { c.rms_eps = 0; }, {"rms_eps"});
  bad([](ModelConfig& c) { c.rms_eps = 2; }, {"rms_eps"});
  bad([](ModelConfig& c) { c.rope_linear_factor = -1; }, {"rope_linear_factor"});
  bad([](ModelConfig& c) { c.rope_llama3_factor = INFINITY; }, {"rope_llama3_factor"});
  bad(
      [](ModelConfig& c) {
        c.rope_llama3_factor = 8;
        c.rope_llama3_high_freq_factor = 0.5f;
      },
      {"rope_llama3_high_freq_factor"});
}

// ---------------------------------------------------------------- GGUF

GgufWriter llama_meta(const std::string& arch = "llama") {
  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", "m");
  w.add_u32(arch + ".block_count", 2);
  w.add_u32(arch + ".embedding_length", 64);
  w.add_u32(arch + ".feed_forward_length", 96);
  w.add_u32(arch + ".attention.head_count", 4);
  w.add_u32(arch + ".attention.head_count_kv", 2);
  w.add_u32(arch + ".context_length", 512);
  w.add_f32(arch + ".rope.freq_base", 500000.f);
  w.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_u32(arch + ".vocab_size", 300);
  return w;
}

class GgufConfig : public ::testing::Test {
 protected:
  ModelConfig load(const GgufWriter& w) {
    w.write(path_);
    return config_from_gguf(*GgufFile::open(path_));
  }
  void expect_bad(const GgufWriter& w, std::initializer_list<std::string> parts) {
    w.write(path_);
    const auto f = GgufFile::open(path_);
    test::expect_error([&] { config_from_gguf(*f); }, parts);
    test::expect_error([&] { config_from_gguf(*f); }, {path_});
  }
  test::TempDir dir_;
  std::string path_ = dir_.file("c.gguf");
};

TEST_F(GgufConfig, Llama) {
  const ModelConfig c = load(llama_meta());
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.name, "m");
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.ffn, 96);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(c.context_length, 512);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_EQ(c.rope_layout, RopeLayout::kAdjacent);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_TRUE(c.tied_embeddings);  // no output.weight
  EXPECT_EQ(c.rope_linear_factor, 1.f);
  EXPECT_EQ(c.rope_llama3_factor, 0.f);
}

TEST_F(GgufConfig, Qwen2AndMistral) {
  const ModelConfig q = load(llama_meta("qwen2"));
  EXPECT_EQ(q.rope_layout, RopeLayout::kHalf);
  EXPECT_TRUE(q.qkv_bias);
  const ModelConfig m = load(llama_meta("mistral"));
  EXPECT_EQ(m.rope_layout, RopeLayout::kAdjacent);
  EXPECT_FALSE(m.qkv_bias);
}

TEST_F(GgufConfig, HeadDimFromKeyLength) {
  GgufWriter w = llama_meta();
  w.add_u32("llama.attention.key_length", 32);
  w.add_u32("llama.rope.dimension_count", 32);
  EXPECT_EQ(load(w).head_dim, 32);
  w.add_u32("llama.attention.value_length", 16);
  expect_bad(w, {"llama.attention.value_length", "16"});
}

TEST_F(GgufConfig, PartialRotaryRefused) {
  GgufWriter w = llama_meta();
  w.add_u32("llama.rope.dimension_count", 8);
  w.add_u32("llama.attention.key_length", 16);
  expect_bad(w, {"llama.rope.dimension_count", "partial rotary"});
}

TEST_F(GgufConfig, VocabFromTokensOrEmbedding) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  for (auto [k, v] : {std::pair{"block_count", 1},
                      {"embedding_length", 32},
                      {"feed_forward_length", 32},
                      {"attention.head_count", 2},
                      {"context_length", 64}})
    w.add_u32(std::string("llama.") + k, uint32_t(v));
  GgufWriter with_tokens = w;
  with_tokens.add_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  const ModelConfig c = load(with_tokens);
  EXPECT_EQ(c.vocab, 3);
  EXPECT_EQ(c.n_kv_heads, 2);  // defaults to head_count
  EXPECT_EQ(c.name, "c");      // file stem when general.name is absent
  GgufWriter with_embd = w;
  with_embd.add_tensor("token_embd.weight", DType::F32, {32, 5}, test::Bytes(32 * 5 * 4, 0));
  EXPECT_EQ(load(with_embd).vocab, 5);
  expect_bad(w, {"no vocabulary size"});
}

TEST_F(GgufConfig, RopeScaling) {
  GgufWriter lin = llama_meta();
  lin.add_string("llama.rope.scaling.type", "linear");
  lin.add_f32("llama.rope.scaling.factor", 4.f);
  EXPECT_EQ(load(lin).rope_linear_factor, 4.f);

  GgufWriter l3 = llama_meta();
  l3.add_string("llama.rope.scaling.type", "llama3");
  l3.add_f32("llama.rope.scaling.factor", 8.f);
  l3.add_u32("llama.rope.scaling.original_context_length", 8192);
  const ModelConfig c = load(l3);
  EXPECT_EQ(c.rope_llama3_factor, 8.f);
  EXPECT_EQ(c.rope_llama3_original_context, 8192);

  GgufWriter freqs = llama_meta();
  freqs.add_tensor("rope_freqs.weight", DType::F32, {8}, test::Bytes(32, 0));
  EXPECT_TRUE(load(freqs).rope_freqs_tensor);

  GgufWriter yarn = llama_meta();  // YaRN needs its factor (and original context)
  yarn.add_string("llama.rope.scaling.type", "yarn");
  expect_bad(yarn, {"'yarn'", "llama.rope.scaling.factor"});
  GgufWriter longrope = llama_meta();
  longrope.add_string("llama.rope.scaling.type", "longrope");
  expect_bad(longrope, {"llama.rope.scaling.type", "longrope"});
  GgufWriter nofactor = llama_meta();
  nofactor.add_string("llama.rope.scaling.type", "linear");
  expect_bad(nofactor, {"llama.rope.scaling.factor"});
}

TEST_F(GgufConfig, Refusals) {
  GgufWriter arch = llama_meta("gpt2");
  expect_bad(arch, {"general.architecture", "gpt2"});
  GgufWriter none;
  none.add_u32("x", 1);
  expect_bad(none, {"general.architecture", "missing"});
  GgufWriter missing;
  missing.add_string("general.architecture", "llama");
  expect_bad(missing, {"llama.block_count", "missing"});
  GgufWriter huge = llama_meta();
  huge.add_u64("llama.attention.key_length", uint64_t(1) << 40);
  expect_bad(huge, {"llama.attention.key_length", "too large"});
  GgufWriter neg;
  neg.add_string("general.architecture", "llama");
  neg.add_i32("llama.block_count", -2);
  expect_bad(neg, {"llama.block_count", "non-negative"});
  GgufWriter str;
  str.add_string("general.architecture", "llama");
  str.add_string("llama.block_count", "2");
  expect_bad(str, {"llama.block_count", "string"});
}

TEST_F(GgufConfig, TinyModel) {
  test::TinySpec spec;
  test::write_tiny_gguf(path_, spec);
  const ModelConfig c = config_from_gguf(*GgufFile::open(path_));
  EXPECT_EQ(c.name, "tiny-random");
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.vocab, 272);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FALSE(c.tied_embeddings);
}

// ---------------------------------------------------------------- HF config.json

json llama_json() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 2048},
          {"intermediate_size", 8192},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 8},
          {"num_hidden_layers", 16},
          {"vocab_size", 128256},
          {"max_position_embeddings", 131072},
          {"rope_theta", 500000.0},
          {"rms_norm_eps", 1e-5},
          {"tie_word_embeddings", true},
          {"hidden_act", "silu"},
          {"rope_scaling",
           {{"rope_type", "llama3"},
            {"factor", 32.0},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192}}}};
}

TEST(HfConfig, Llama32WithLlama3Scaling) {
  const ModelConfig c = config_from_hf_json(llama_json(), "cfg.json", "Llama-3.2-1B");
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.name, "Llama-3.2-1B");
  EXPECT_EQ(c.n_layers, 16);
  EXPECT_EQ(c.hidden, 2048);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn, 8192);
  EXPECT_EQ(c.vocab, 128256);
  EXPECT_EQ(c.context_length, 131072);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalf);
  EXPECT_EQ(c.rope_llama3_factor, 32.f);
  EXPECT_EQ(c.rope_llama3_low_freq_factor, 1.f);
  EXPECT_EQ(c.rope_llama3_high_freq_factor, 4.f);
  EXPECT_EQ(c.rope_llama3_original_context, 8192);
}

TEST(HfConfig, LinearScalingQwen2AndMistral) {
  json j = llama_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(config_from_hf_json(j, "s", "n").rope_linear_factor, 2.f);
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(config_from_hf_json(j, "s", "n").rope_llama3_factor, 0.f);
  j.erase("num_key_value_heads");
  EXPECT_EQ(config_from_hf_json(j, "s", "n").n_kv_heads, 32);

  json q = llama_json();
  q["architectures"] = {"Qwen2ForCausalLM"};
  q.erase("rope_scaling");
  const ModelConfig qc = config_from_hf_json(q, "s", "n");
  EXPECT_EQ(qc.arch, "qwen2");
  EXPECT_TRUE(qc.qkv_bias);
  EXPECT_EQ(qc.rope_layout, RopeLayout::kHalf);

  json m = llama_json();
  m["architectures"] = {"MistralForCausalLM"};
  m.erase("rope_scaling");
  m["sliding_window"] = 4096;
  m["max_position_embeddings"] = 32768;
  const ModelConfig mc = config_from_hf_json(m, "s", "n");
  EXPECT_EQ(mc.arch, "mistral");
  EXPECT_EQ(mc.context_length, 4096);  // the window caps the context
  m["head_dim"] = 128;
  EXPECT_EQ(config_from_hf_json(m, "s", "n").head_dim, 128);
}

TEST(HfConfig, NamesTheBadField) {
  auto bad = [](auto mutate, std::initializer_list<std::string> parts) {
    json j = llama_json();
    mutate(j);
    test::expect_error([&] { config_from_hf_json(j, "dir/config.json", "n"); }, parts);
  };
  bad([](json& j) { j["architectures"] = {"GPT2LMHeadModel"}; }, {"GPT2LMHeadModel"});
  bad([](json& j) { j["architectures"] = "Llama"; }, {"'architectures'"});
  bad([](json& j) { j.erase("hidden_size"); }, {"'hidden_size' is missing", "dir/config.json"});
  bad([](json& j) { j["hidden_size"] = "big"; }, {"'hidden_size'", "integer"});
  bad([](json& j) { j["hidden_size"] = 1.5; }, {"'hidden_size'", "integer"});
  bad([](json& j) { j["num_hidden_layers"] = -1; }, {"'num_hidden_layers'"});
  bad([](json& j) { j["vocab_size"] = 1ull << 40; }, {"'vocab_size'", "too large"});
  bad([](json& j) { j["rope_theta"] = "x"; }, {"'rope_theta'", "number"});
  bad([](json& j) { j["tie_word_embeddings"] = 1; }, {"'tie_word_embeddings'"});
  bad([](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}}; }, {"yarn"});
  bad([](json& j) { j["rope_scaling"] = {{"rope_type", "llama3"}}; }, {"rope_scaling.factor"});
  bad([](json& j) { j["rope_scaling"] = 3; }, {"'rope_scaling'"});
  bad([](json& j) { j["attention_bias"] = true; }, {"'attention_bias'"});
  bad([](json& j) { j["hidden_act"] = "gelu"; }, {"'hidden_act'", "gelu"});
  bad([](json& j) { j["num_key_value_heads"] = 5; }, {"n_kv_heads 5"});
  bad([](json& j) { j["num_attention_heads"] = 30; }, {"'hidden_size' 2048", "30"});
  bad(
      [](json& j) {
        j.erase("architectures");
        j["model_type"] = "gemma";
      },
      {"model_type"});
  test::expect_error([] { config_from_hf_json(json::array(), "s", "n"); }, {"JSON object"});
}

json ct_fp8(const std::string& strategy, int bits = 8, const std::string& type = "float") {
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", {{"num_bits", bits}, {"type", type}, {"strategy", strategy}}}}}}}};
}

TEST(HfConfig, Fp8QuantizationConfigs) {
  json j = llama_json();
  EXPECT_FALSE(config_from_hf_json(j, "s", "n").fp8_weights);
  for (const json& q :
       {json{{"quant_method", "fp8"}, {"activation_scheme", "static"}},
        json{{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"fmt", "e4m3"}},
        json{{"quant_method", "fp8"}, {"weight_block_size", nullptr}},
        json{{"quant_method", "fbgemm_fp8"}, {"activation_scale_ub", 1200.0}}, ct_fp8("channel"),
        ct_fp8("tensor")}) {
    j["quantization_config"] = q;
    EXPECT_TRUE(config_from_hf_json(j, "s", "n").fp8_weights) << q.dump();
  }
}

TEST(HfConfig, QuantizationConfigsKvasirCannotReadAreRefusedByName) {
  auto bad = [](const json& q, std::initializer_list<std::string> parts) {
    json j = llama_json();
    j["quantization_config"] = q;
    test::expect_error([&] { config_from_hf_json(j, "dir/config.json", "n"); }, parts);
  };
  bad({{"quant_method", "awq"}, {"bits", 4}}, {"quant_method", "'awq'", "FP8"});
  bad({{"quant_method", "gptq"}}, {"'gptq'"});
  bad({{"bits", 4}}, {"quant_method", "(missing)"});
  bad({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}},
      {"weight_block_size", "block-wise"});
  bad({{"quant_method", "fp8"}, {"activation_scheme", "weird"}}, {"activation_scheme", "weird"});
  bad({{"quant_method", "fp8"}, {"fmt", "e5m2"}}, {"fmt", "e5m2"});
  bad(ct_fp8("group"), {"config_groups.group_0.weights.strategy", "'group'"});
  bad(ct_fp8("block"), {"'block'"});
  bad(ct_fp8("channel", 4, "int"), {"4-bit int", "8-bit float"});
  json packed = ct_fp8("channel");
  packed["format"] = "pack-quantized";
  bad(packed, {"quantization_config.format", "pack-quantized"});
  json empty = ct_fp8("channel");
  empty["config_groups"] = json::object();
  bad(empty, {"config_groups"});
  bad(json::array(), {"'quantization_config' must be an object"});
}

// Gemma 3's config.json as transformers 5 writes it (the 270M's values).
json gemma3_json() {
  json types = json::array();
  for (int il = 0; il < 18; ++il)
    types.push_back(il % 6 == 5 ? "full_attention" : "sliding_attention");
  return {{"architectures", {"Gemma3ForCausalLM"}},
          {"model_type", "gemma3_text"},
          {"hidden_size", 640},
          {"intermediate_size", 2048},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 1},
          {"head_dim", 256},
          {"num_hidden_layers", 18},
          {"vocab_size", 262144},
          {"max_position_embeddings", 32768},
          {"rms_norm_eps", 1e-6},
          {"hidden_activation", "gelu_pytorch_tanh"},
          {"attn_logit_softcapping", nullptr},
          {"final_logit_softcapping", nullptr},
          {"query_pre_attn_scalar", 256},
          {"sliding_window", 512},
          {"layer_types", types},
          {"rope_parameters",
           {{"full_attention", {{"rope_theta", 1e6}, {"rope_type", "default"}}},
            {"sliding_attention", {{"rope_theta", 1e4}, {"rope_type", "default"}}}}},
          {"tie_word_embeddings", true}};
}

TEST(HfConfig, Gemma3AsTransformersWritesIt) {
  const ModelConfig c = config_from_hf_json(gemma3_json(), "cfg.json", "g");
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.sliding_pattern, 6);
  for (int il = 0; il < 18; ++il) EXPECT_EQ(c.layer_slides(il), il % 6 != 5) << il;
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_theta_local, 1e4f);
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.f / 16.f);
  EXPECT_FLOAT_EQ(c.embed_scale, std::sqrt(640.f));
  EXPECT_TRUE(c.qk_norm && c.post_norms && c.gelu_ffn && c.tied_embeddings);
  EXPECT_FALSE(c.rope_scaling_local);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalf);

  // The 4B and larger: a linear factor on the global layers only.
  json big = gemma3_json();
  big["rope_parameters"]["full_attention"] = {
      {"rope_theta", 1e6}, {"rope_type", "linear"}, {"factor", 8.0}};
  EXPECT_EQ(config_from_hf_json(big, "cfg.json", "g").rope_linear_factor, 8.f);

  // transformers 4's form: rope_theta, rope_scaling, rope_local_base_freq.
  json old = gemma3_json();
  old.erase("rope_parameters");
  old.erase("layer_types");
  old["rope_theta"] = 1e6;
  old["rope_local_base_freq"] = 1e4;
  old["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  old["sliding_window_pattern"] = 6;
  const ModelConfig o = config_from_hf_json(old, "cfg.json", "g");
  EXPECT_EQ(o.rope_theta, 1e6f);
  EXPECT_EQ(o.rope_theta_local, 1e4f);
  EXPECT_EQ(o.rope_linear_factor, 8.f);
  EXPECT_EQ(o.sliding_pattern, 6);
}

TEST(HfConfig, Gemma3WhatItCannotRunIsRefusedByName) {
  auto bad = [](auto mutate, std::initializer_list<std::string> parts) {
    json j = gemma3_json();
    mutate(j);
    test::expect_error([&] { config_from_hf_json(j, "dir/config.json", "n"); }, parts);
  };
  bad([](json& j) { j["layer_types"][1] = "full_attention"; },
      {"'layer_types'[3]", "one global layer in every 2"});
  bad([](json& j) { j["layer_types"].erase(0); }, {"'layer_types' must list the 18 layers"});
  bad([](json& j) { j["hidden_activation"] = "gelu"; }, {"'hidden_activation'", "gelu"});
  bad([](json& j) { j["attn_logit_softcapping"] = 50.0; }, {"'attn_logit_softcapping'"});
  bad([](json& j) { j["use_bidirectional_attention"] = true; }, {"bidirectional"});
  bad([](json& j) { j["rope_parameters"]["sliding_attention"]["rope_type"] = "linear"; },
      {"rope_parameters.sliding_attention.rope_type", "not scaled"});
  bad([](json& j) { j["rope_parameters"].erase("sliding_attention"); },
      {"rope_parameters.sliding_attention"});
  bad([](json& j) { j["query_pre_attn_scalar"] = 0; }, {"'query_pre_attn_scalar'"});
}

}  // namespace
}  // namespace kvasir
