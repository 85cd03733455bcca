// ModelConfig for Qwen3 and the mixture-of-experts families (Qwen3-MoE,
// Qwen2-MoE, Mixtral) from GGUF metadata and from HF config.json, and the
// refusals that name the key when the expert counts or widths disagree.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/gguf.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/test_files.h"

namespace kvasir {
namespace {

using nlohmann::json;
using test::GgufWriter;

GgufWriter meta(const std::string& arch) {
  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", "m");
  w.add_u32(arch + ".block_count", 2);
  w.add_u32(arch + ".embedding_length", 64);
  w.add_u32(arch + ".feed_forward_length", 96);
  w.add_u32(arch + ".attention.head_count", 4);
  w.add_u32(arch + ".attention.head_count_kv", 2);
  w.add_u32(arch + ".context_length", 512);
  w.add_f32(arch + ".rope.freq_base", 1000000.f);
  w.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_u32(arch + ".vocab_size", 300);
  return w;
}

GgufWriter moe_meta(const std::string& arch, uint32_t n, uint32_t used) {
  GgufWriter w = meta(arch);
  w.add_u32(arch + ".expert_count", n);
  w.add_u32(arch + ".expert_used_count", used);
  return w;
}

class GgufMoeConfig : public ::testing::Test {
 protected:
  ModelConfig load(const GgufWriter& w) {
    w.write(path_);
    return config_from_gguf(*GgufFile::open(path_));
  }
  void expect_bad(const GgufWriter& w, std::initializer_list<std::string> parts) {
    w.write(path_);
    const auto f = GgufFile::open(path_);
    test::expect_error([&] { config_from_gguf(*f); }, parts);
    try {
      config_from_gguf(*f);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kModelFormat) << e.message();
      EXPECT_NE(e.message().find(path_), std::string::npos) << e.message();
    }
  }
  test::TempDir dir_;
  std::string path_ = dir_.file("c.gguf");
};

TEST_F(GgufMoeConfig, Qwen3HasQkNormsAndNeoXOrder) {
  GgufWriter w = meta("qwen3");
  w.add_u32("qwen3.attention.key_length", 128);
  w.add_u32("qwen3.attention.value_length", 128);
  const ModelConfig c = load(w);
  EXPECT_EQ(c.arch, "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalf);
  EXPECT_FALSE(c.moe());
  EXPECT_FALSE(load(meta("qwen2")).qk_norm);
}

TEST_F(GgufMoeConfig, Qwen3Moe) {
  GgufWriter w = moe_meta("qwen3moe", 128, 8);
  w.add_u32("qwen3moe.expert_feed_forward_length", 768);
  const ModelConfig c = load(w);
  EXPECT_TRUE(c.moe());
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.n_experts, 128);
  EXPECT_EQ(c.n_experts_used, 8);
  EXPECT_EQ(c.expert_ffn, 768);
  EXPECT_TRUE(c.expert_norm_topk);
  EXPECT_EQ(c.shared_expert_ffn, 0);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalf);
  // Without expert_feed_forward_length: feed_forward_length / used (llama.cpp's rule).
  EXPECT_EQ(load(moe_meta("qwen3moe", 16, 4)).expert_ffn, 96 / 4);
}

TEST_F(GgufMoeConfig, Qwen2MoeHasASharedExpertAndKeepsTheSoftmaxWeights) {
  GgufWriter w = moe_meta("qwen2moe", 60, 4);
  w.add_u32("qwen2moe.expert_feed_forward_length", 1408);
  w.add_u32("qwen2moe.expert_shared_feed_forward_length", 5632);
  const ModelConfig c = load(w);
  EXPECT_EQ(c.n_experts, 60);
  EXPECT_EQ(c.expert_ffn, 1408);
  EXPECT_EQ(c.shared_expert_ffn, 5632);
  EXPECT_FALSE(c.expert_norm_topk);
  EXPECT_FALSE(c.qk_norm);
  // The shared expert's width defaults to feed_forward_length.
  EXPECT_EQ(load(moe_meta("qwen2moe", 8, 2)).shared_expert_ffn, 96);
}

TEST_F(GgufMoeConfig, MixtralIsLlamaWithExperts) {
  const ModelConfig c = load(moe_meta("llama", 8, 2));
  EXPECT_EQ(c.arch, "llama");
  EXPECT_TRUE(c.moe());
  EXPECT_EQ(c.expert_ffn, 96);  // each expert is feed_forward_length wide
  EXPECT_TRUE(c.expert_norm_topk);
  EXPECT_EQ(c.rope_layout, RopeLayout::kAdjacent);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(load(meta("llama")).moe());
}

GgufWriter gpt_oss_meta() {
  GgufWriter w = moe_meta("gpt-oss", 32, 4);
  w.add_u32("gpt-oss.expert_feed_forward_length", 2880);
  w.add_u32("gpt-oss.attention.sliding_window", 128);
  w.add_u32("gpt-oss.attention.key_length", 64);
  w.add_u32("gpt-oss.attention.value_length", 64);
  w.add_string("gpt-oss.rope.scaling.type", "yarn");
  w.add_f32("gpt-oss.rope.scaling.factor", 32.f);
  w.add_u32("gpt-oss.rope.scaling.original_context_length", 4096);
  return w;
}

TEST_F(GgufMoeConfig, GptOssAsLlamaCppReadsIt) {
  const ModelConfig c = load(gpt_oss_meta());
  EXPECT_TRUE(c.gpt_oss);
  EXPECT_TRUE(c.moe());
  EXPECT_EQ(c.n_experts, 32);
  EXPECT_EQ(c.expert_ffn, 2880);
  EXPECT_TRUE(c.expert_norm_topk);  // softmax over the chosen experts' logits
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalf);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_TRUE(c.layer_slides(0));  // even layers slide, odd ones are global
  EXPECT_FALSE(c.layer_slides(1));
  EXPECT_TRUE(c.layer_slides(22));
  EXPECT_EQ(c.rope_theta_local, c.rope_theta);
  EXPECT_EQ(c.rope_yarn_factor, 32.f);
  EXPECT_EQ(c.rope_yarn_original_context, 4096);
  EXPECT_EQ(c.rope_yarn_beta_fast, 32.f);
  EXPECT_EQ(c.rope_yarn_beta_slow, 1.f);
  // YaRN's magnitude factor (1 + 0.1 ln 32) on q and k: its square on q·k.
  const float m = 1.f + 0.1f * std::log(32.f);
  EXPECT_FLOAT_EQ(c.attention_scale(), m * m / 8.f);
}

TEST_F(GgufMoeConfig, GptOssRefusesWhatItCannotRunByKey) {
  GgufWriter no_window = moe_meta("gpt-oss", 32, 4);
  expect_bad(no_window, {"'gpt-oss.attention.sliding_window'", "missing"});
  GgufWriter pattern = gpt_oss_meta();
  pattern.add_u32("gpt-oss.attention.sliding_window_pattern", 4);
  expect_bad(pattern, {"'gpt-oss.attention.sliding_window_pattern'"});
  GgufWriter log_mul = gpt_oss_meta();
  log_mul.add_f32("gpt-oss.rope.scaling.yarn_log_multiplier", 0.1f);
  expect_bad(log_mul, {"'gpt-oss.rope.scaling.yarn_log_multiplier'"});
  GgufWriter no_orig = moe_meta("gpt-oss", 32, 4);
  no_orig.add_u32("gpt-oss.attention.sliding_window", 128);
  no_orig.add_string("gpt-oss.rope.scaling.type", "yarn");
  no_orig.add_f32("gpt-oss.rope.scaling.factor", 32.f);
  expect_bad(no_orig, {"'gpt-oss.rope.scaling.original_context_length'"});
  expect_bad(meta("gpt-oss"), {"'gpt-oss.expert_count'"});
}

TEST_F(GgufMoeConfig, InconsistentExpertsAreRefusedByKey) {
  expect_bad(moe_meta("qwen3moe", 8, 9), {"'qwen3moe.expert_used_count' is 9", "8"});
  expect_bad(moe_meta("qwen3moe", 8, 0), {"'qwen3moe.expert_used_count' is 0"});
  expect_bad(moe_meta("llama", 8, 9), {"'llama.expert_used_count' is 9"});
  expect_bad(moe_meta("qwen2moe", 4096, 2), {"'qwen2moe.expert_count' is 4096"});
  expect_bad(meta("qwen3moe"), {"'qwen3moe.expert_count'", "needs experts"});
  expect_bad(moe_meta("qwen3moe", 0, 0), {"'qwen3moe.expert_count'", "needs experts"});
  GgufWriter no_used = meta("qwen3moe");
  no_used.add_u32("qwen3moe.expert_count", 8);
  expect_bad(no_used, {"'qwen3moe.expert_used_count' is missing"});
  expect_bad(moe_meta("qwen2", 8, 2), {"'qwen2.expert_count' is 8", "qwen2"});
  expect_bad(moe_meta("mistral", 8, 2), {"'mistral.expert_count'"});
  GgufWriter groups = moe_meta("qwen3moe", 8, 2);
  groups.add_u32("qwen3moe.expert_group_count", 4);
  expect_bad(groups, {"'qwen3moe.expert_group_count' is 4", "grouped"});
}

// ---------------------------------------------------------------- HF config.json

json qwen3_json() {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", "qwen3"},
          {"hidden_size", 1024},
          {"intermediate_size", 3072},
          {"num_attention_heads", 16},
          {"num_key_value_heads", 8},
          {"head_dim", 128},
          {"num_hidden_layers", 28},
          {"vocab_size", 151936},
          {"max_position_embeddings", 40960},
          {"rope_theta", 1000000.0},
          {"rms_norm_eps", 1e-6},
          {"tie_word_embeddings", true},
          {"attention_bias", false},
          {"hidden_act", "silu"}};
}

json qwen3_moe_json() {
  json j = qwen3_json();
  j["architectures"] = {"Qwen3MoeForCausalLM"};
  j["model_type"] = "qwen3_moe";
  j["num_experts"] = 128;
  j["num_experts_per_tok"] = 8;
  j["moe_intermediate_size"] = 768;
  j["norm_topk_prob"] = true;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = json::array();
  return j;
}

json qwen2_moe_json() {
  json j = qwen3_json();
  j.erase("head_dim");
  j["architectures"] = {"Qwen2MoeForCausalLM"};
  j["model_type"] = "qwen2_moe";
  j["num_experts"] = 60;
  j["num_experts_per_tok"] = 4;
  j["moe_intermediate_size"] = 1408;
  j["shared_expert_intermediate_size"] = 5632;
  return j;
}

json mixtral_json() {
  json j = qwen3_json();
  j.erase("head_dim");
  j["architectures"] = {"MixtralForCausalLM"};
  j["model_type"] = "mixtral";
  j["intermediate_size"] = 14336;
  j["num_local_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["sliding_window"] = 4096;
  return j;
}

TEST(HfMoeConfig, Qwen3) {
  const ModelConfig c = config_from_hf_json(qwen3_json(), "cfg.json", "Qwen3-0.6B");
  EXPECT_EQ(c.arch, "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.moe());
  json biased = qwen3_json();
  biased["attention_bias"] = true;
  test::expect_error([&] { config_from_hf_json(biased, "cfg.json", "m"); },
                     {"cfg.json", "'attention_bias'"});
}

TEST(HfMoeConfig, EachFamily) {
  const ModelConfig q3 = config_from_hf_json(qwen3_moe_json(), "cfg.json", "m");
  EXPECT_EQ(q3.arch, "qwen3moe");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.n_experts, 128);
  EXPECT_EQ(q3.n_experts_used, 8);
  EXPECT_EQ(q3.expert_ffn, 768);
  EXPECT_TRUE(q3.expert_norm_topk);
  json q3_plain = qwen3_moe_json();
  q3_plain.erase("norm_topk_prob");  // transformers' default: false
  EXPECT_FALSE(config_from_hf_json(q3_plain, "cfg.json", "m").expert_norm_topk);

  const ModelConfig q2 = config_from_hf_json(qwen2_moe_json(), "cfg.json", "m");
  EXPECT_EQ(q2.arch, "qwen2moe");
  EXPECT_EQ(q2.shared_expert_ffn, 5632);
  EXPECT_EQ(q2.expert_ffn, 1408);
  EXPECT_FALSE(q2.expert_norm_topk);
  EXPECT_TRUE(q2.qkv_bias);  // Qwen2-MoE's qkv_bias defaults to true
  EXPECT_FALSE(q2.qk_norm);

  const ModelConfig mx = config_from_hf_json(mixtral_json(), "cfg.json", "m");
  EXPECT_EQ(mx.arch, "llama");
  EXPECT_EQ(mx.n_experts, 8);
  EXPECT_EQ(mx.n_experts_used, 2);
  EXPECT_EQ(mx.expert_ffn, 14336);
  EXPECT_TRUE(mx.expert_norm_topk);
  EXPECT_EQ(mx.context_length, 4096);  // the sliding window caps the context
  EXPECT_EQ(mx.rope_layout, RopeLayout::kHalf);
}

TEST(HfMoeConfig, InconsistentExpertsAreRefusedByKey) {
  auto bad = [](json j, std::initializer_list<std::string> parts) {
    test::expect_error([&] { config_from_hf_json(j, "cfg.json", "m"); }, parts);
    try {
      config_from_hf_json(j, "cfg.json", "m");
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("cfg.json"), std::string::npos) << e.message();
    }
  };
  json j = qwen3_moe_json();
  j["num_experts_per_tok"] = 129;
  bad(j, {"'num_experts_per_tok' is 129", "'num_experts' = 128"});
  j["num_experts_per_tok"] = 0;
  bad(j, {"'num_experts_per_tok' is 0"});
  j = qwen3_moe_json();
  j["num_experts"] = 0;
  bad(j, {"'num_experts' is 0"});
  j = qwen3_moe_json();
  j.erase("moe_intermediate_size");
  bad(j, {"'moe_intermediate_size' is missing"});
  j = qwen3_moe_json();
  j["decoder_sparse_step"] = 2;
  bad(j, {"'decoder_sparse_step' is 2"});
  j = qwen3_moe_json();
  j["mlp_only_layers"] = {0, 3};
  bad(j, {"'mlp_only_layers'"});
  j = qwen2_moe_json();
  j.erase("shared_expert_intermediate_size");
  bad(j, {"'shared_expert_intermediate_size' is missing"});
  j = mixtral_json();
  j["num_experts_per_tok"] = 9;
  bad(j, {"'num_experts_per_tok' is 9", "'num_local_experts' = 8"});
  j = mixtral_json();
  j.erase("num_local_experts");
  bad(j, {"'num_local_experts' is missing"});
}

// gpt-oss-20b's config.json as published (transformers 4.55: rope_theta and
// rope_scaling at the top level), and the same as transformers 5 writes it
// (rope_parameters with rope_theta inside).
json gpt_oss_json() {
  json types = json::array();
  for (int i = 0; i < 24; ++i) types.push_back(i % 2 ? "full_attention" : "sliding_attention");
  return {{"architectures", {"GptOssForCausalLM"}},
          {"model_type", "gpt_oss"},
          {"hidden_size", 2880},
          {"intermediate_size", 2880},
          {"num_hidden_layers", 24},
          {"num_attention_heads", 64},
          {"num_key_value_heads", 8},
          {"head_dim", 64},
          {"vocab_size", 201088},
          {"max_position_embeddings", 131072},
          {"num_local_experts", 32},
          {"num_experts_per_tok", 4},
          {"sliding_window", 128},
          {"layer_types", types},
          {"attention_bias", true},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 150000},
          {"rope_scaling",
           {{"rope_type", "yarn"},
            {"factor", 32.0},
            {"beta_fast", 32.0},
            {"beta_slow", 1.0},
            {"truncate", false},
            {"original_max_position_embeddings", 4096}}},
          {"swiglu_limit", 7.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"quantization_config",
           {{"quant_method", "mxfp4"},
            {"modules_to_not_convert",
             {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
              "lm_head"}}}}};
}

TEST(HfMoeConfig, GptOssAsPublished) {
  for (bool v5 : {false, true}) {
    json j = gpt_oss_json();
    if (v5) {  // transformers 5's form
      json rp = j["rope_scaling"];
      rp["rope_theta"] = 150000;
      j.erase("rope_scaling");
      j.erase("rope_theta");
      j["rope_parameters"] = rp;
    }
    const ModelConfig c = config_from_hf_json(j, "cfg.json", "gpt-oss-20b");
    EXPECT_EQ(c.arch, "gpt-oss");
    EXPECT_TRUE(c.gpt_oss);
    EXPECT_EQ(c.n_experts, 32);
    EXPECT_EQ(c.n_experts_used, 4);
    EXPECT_EQ(c.expert_ffn, 2880);
    EXPECT_TRUE(c.expert_norm_topk);
    EXPECT_TRUE(c.qkv_bias);
    EXPECT_EQ(c.sliding_window, 128);
    EXPECT_TRUE(c.layer_slides(0));
    EXPECT_FALSE(c.layer_slides(1));
    EXPECT_EQ(c.rope_theta, 150000.f) << v5;
    EXPECT_EQ(c.rope_yarn_factor, 32.f) << v5;
    EXPECT_EQ(c.rope_yarn_original_context, 4096);
    EXPECT_FALSE(c.rope_yarn_truncate);
    EXPECT_EQ(c.rope_layout, RopeLayout::kHalf);
    EXPECT_EQ(c.context_length, 131072);  // the window does not cap it: half the layers are global
  }
}

TEST(HfMoeConfig, GptOssRefusesWhatItCannotRunByKey) {
  auto bad = [](json j, std::initializer_list<std::string> parts) {
    test::expect_error([&] { config_from_hf_json(j, "cfg.json", "m"); }, parts);
  };
  json j = gpt_oss_json();
  j["layer_types"][0] = "full_attention";
  bad(j, {"'layer_types'[0]", "sliding_attention"});
  j = gpt_oss_json();
  j["layer_types"].erase(0);
  bad(j, {"'layer_types' must list the 24 layers"});
  j = gpt_oss_json();
  j.erase("sliding_window");
  bad(j, {"'sliding_window' is missing"});
  j = gpt_oss_json();
  j["swiglu_limit"] = 10.0;
  bad(j, {"'swiglu_limit' 10"});
  j = gpt_oss_json();
  j["rope_scaling"]["attention_factor"] = 2.0;
  bad(j, {"'rope_scaling.attention_factor' is 2"});
  j = gpt_oss_json();
  j["rope_scaling"].erase("original_max_position_embeddings");
  bad(j, {"original_max_position_embeddings' is missing"});
  json q = qwen3_moe_json();
  q["quantization_config"] = {{"quant_method", "mxfp4"}};
  bad(q, {"mxfp4", "gpt-oss folders only"});
}

}  // namespace
}  // namespace kvasir
