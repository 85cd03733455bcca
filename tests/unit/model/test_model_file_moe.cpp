// ModelFile for the mixture-of-experts families: a GGUF file's 3-D expert
// stacks and a folder's per-expert matrices give the same experts, and every
// count or shape that disagrees with the config is refused naming the
// tensor or the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model_file.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quant.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

test::TinySpec moe_spec(const std::string& arch) {
  test::TinySpec s;
  s.arch = arch;
  s.experts = 5;
  s.experts_used = 2;
  s.expert_ffn = 40;
  s.shared_ffn = arch == "qwen2moe" ? 48 : 0;
  s.norm_topk = arch != "qwen2moe";
  return s;
}

// Overwrites the u32 value of a GGUF metadata key in place.
void patch_u32_key(const std::string& path, const std::string& key, uint32_t v) {
  std::vector<uint8_t> b = test::read_bytes(path);
  auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
  ASSERT_NE(it, b.end());
  std::memcpy(&b[size_t(it - b.begin()) + key.size() + 4], &v, 4);  // after the u32 type
  test::GgufWriter::write_file(path, b);
}

nlohmann::json read_json(const std::string& p) { return nlohmann::json::parse(std::ifstream(p)); }

class MoePair : public ::testing::TestWithParam<const char*> {};

TEST_P(MoePair, GgufStacksAndFolderExpertsAreTheSameExperts) {
  test::TempDir dir;
  const test::TinySpec spec = moe_spec(GetParam());
  test::write_tiny_gguf(dir.file("m.gguf"), spec);
  test::write_tiny_safetensors(dir.file("st"), spec);
  const auto g = ModelFile::open(dir.file("m.gguf"));
  const auto s = ModelFile::open(dir.file("st"));
  for (const ModelFile* m : {g.get(), s.get()}) {
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.n_experts, 5);
    EXPECT_EQ(c.n_experts_used, 2);
    EXPECT_EQ(c.expert_ffn, spec.arch == "llama" ? spec.ffn : 40);
    EXPECT_EQ(c.shared_expert_ffn, spec.shared_ffn);
    EXPECT_EQ(c.expert_norm_topk, spec.arch != "qwen2moe");
    EXPECT_EQ(c.qk_norm, spec.arch == "qwen3moe");
    EXPECT_EQ(m->find("blk.0.ffn_gate.weight"), nullptr);
  }
  for (int l = 0; l < spec.layers; ++l)
    for (const char* stack : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      const std::string name = "blk." + std::to_string(l) + "." + stack + ".weight";
      const auto& a = g->get_experts(name);
      const auto& b = s->get_experts(name);
      ASSERT_EQ(a.size(), 5u);
      ASSERT_EQ(b.size(), 5u);
      for (size_t e = 0; e < 5; ++e) {
        EXPECT_EQ(a[e].n_dims, 2);
        EXPECT_EQ(a[e].ne[0], b[e].ne[0]) << name;
        EXPECT_EQ(a[e].ne[1], b[e].ne[1]) << name;
        EXPECT_EQ(test::dequantize(a[e]), test::dequantize(b[e])) << name << " expert " << e;
        if (e > 0) {
          EXPECT_NE(a[e].data, a[e - 1].data);
        }
      }
      EXPECT_TRUE(g->touched().count(name));
    }
  EXPECT_EQ(g->find_experts("blk.0.ffn_gate.weight"), nullptr);
  test::expect_error([&] { g->get_experts("blk.9.ffn_up_exps.weight"); },
                     {"'blk.9.ffn_up_exps.weight' is missing"});
}

INSTANTIATE_TEST_SUITE_P(Families, MoePair, ::testing::Values("qwen3moe", "qwen2moe", "llama"));

TEST(ModelFileMoe, GgufCountsAndWidthsThatDisagreeWithTheStacks) {
  test::TempDir dir;
  const std::string p = dir.file("m.gguf");
  test::write_tiny_gguf(p, moe_spec("qwen3moe"));
  patch_u32_key(p, "qwen3moe.expert_count", 6);
  test::expect_error([&] { ModelFile::open(p); },
                     {"'blk.0.ffn_gate_exps.weight'", "shape [64, 40, 5]", "implies [64, 40, 6]", p});
  test::write_tiny_gguf(p, moe_spec("qwen3moe"));
  patch_u32_key(p, "qwen3moe.expert_feed_forward_length", 32);
  test::expect_error([&] { ModelFile::open(p); },
                     {"'blk.0.ffn_gate_exps.weight'", "[64, 40, 5]", "[64, 32, 5]"});
  test::write_tiny_gguf(p, moe_spec("qwen3moe"));
  patch_u32_key(p, "qwen3moe.expert_used_count", 6);
  test::expect_error([&] { ModelFile::open(p); }, {"'qwen3moe.expert_used_count' is 6", p});
  test::write_tiny_gguf(p, moe_spec("qwen3moe"));
  patch_u32_key(p, "qwen3moe.expert_used_count", 0);
  test::expect_error([&] { ModelFile::open(p); }, {"'qwen3moe.expert_used_count' is 0"});
  test::write_tiny_gguf(p, moe_spec("qwen2moe"));
  patch_u32_key(p, "qwen2moe.expert_shared_feed_forward_length", 64);
  test::expect_error([&] { ModelFile::open(p); }, {"'blk.0.ffn_gate_shexp.weight'", "[64, 48]"});
  try {
    ModelFile::open(p);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kModelFormat);
  }
}

TEST(ModelFileMoe, FolderExpertsThatDisagreeWithConfigJson) {
  test::TempDir dir;
  const std::string st = dir.file("st"), cfg = dir.file("st/config.json");
  test::write_tiny_safetensors(st, moe_spec("qwen3moe"));
  nlohmann::json j = read_json(cfg);
  j["num_experts"] = 6;
  std::ofstream(cfg) << j.dump();
  test::expect_error([&] { ModelFile::open(st); },
                     {"expert 5 of 'blk.0.ffn_gate_exps.weight' is missing", "6 experts"});
  j["num_experts"] = 4;
  std::ofstream(cfg) << j.dump();
  test::expect_error([&] { ModelFile::open(st); },
                     {"'model.layers.0.mlp.experts.4.", "is expert 4", "4 experts"});
  j["num_experts"] = 5;
  j["moe_intermediate_size"] = 32;
  std::ofstream(cfg) << j.dump();
  test::expect_error([&] { ModelFile::open(st); },
                     {"'model.layers.0.mlp.experts.0.gate_proj.weight'", "[64, 40]", "[64, 32]"});
  j["moe_intermediate_size"] = 40;
  j["num_experts_per_tok"] = 6;
  std::ofstream(cfg) << j.dump();
  test::expect_error([&] { ModelFile::open(st); },
                     {"'num_experts_per_tok' is 6", "'num_experts' = 5", cfg});
}

// A dense folder or file that claims to be Qwen3 lacks the q/k norms.
TEST(ModelFileMoe, Qwen3WithoutQkNormsIsRefused) {
  test::TempDir dir;
  const std::string st = dir.file("st"), cfg = dir.file("st/config.json");
  test::write_tiny_safetensors(st, {});
  nlohmann::json j = read_json(cfg);
  j["architectures"] = {"Qwen3ForCausalLM"};
  std::ofstream(cfg) << j.dump();
  test::expect_error([&] { ModelFile::open(st); }, {"'blk.0.attn_q_norm.weight' is missing"});
  test::TinySpec q3;
  q3.arch = "qwen3";
  test::write_tiny_safetensors(dir.file("q3"), q3);
  EXPECT_TRUE(ModelFile::open(dir.file("q3"))->config().qk_norm);
}

}  // namespace
}  // namespace kvasir
