// gpt-oss on the CPU forward against llama.cpp: the tiny random model of
// tests/support/tiny_model.h (tiny_family("gpt-oss"): MXFP4 experts with
// biases and the clamped SwiGLU, BF16 attention with q/k/v/o biases and
// sinks, a window of 5 on the even layers, YaRN) — every family trait at
// once, so a wrong one shows in the logits.
//
// tests/data/gptoss/llama_cpp_tiny.json was written by
// tests/reference/gptoss/make_refs.py from the same file (checked by hash
// first: a changed generator means re-running the script): llama-server's
// log-probabilities of the whole vocabulary after every prefix of a fixed
// sequence (teacher forcing) and its greedy continuation. Both sides keep
// an f32 KV cache. The two engines round differently (activations quantised
// to 8 bits for the MXFP4 products on both, but BF16 products in other
// orders): log-probabilities agree to ~1e-3 (measured, printed), far inside
// the 0.05 allowed, while a wrong trait moves them by 0.1 to several units.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "stages/forward.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"
#include "tests/unit/stages/peer_logits.h"

using namespace kvasir;
namespace fs = std::filesystem;
using test::fnv1a64;
using test::logits_of;

namespace {

std::vector<double> log_softmax(const float* x, int64_t n) {
  double mx = x[0], sum = 0;
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, double(x[i]));
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - mx - std::log(sum);
  return out;
}

int64_t argmax(const float* x, int64_t n) {
  int64_t a = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[a]) a = i;
  return a;
}

struct Peer {
  nlohmann::json j;
  std::string path;
  std::unique_ptr<ModelFile> model;
};

Peer load(test::TempDir& dir) {
  Peer p;
  p.j = nlohmann::json::parse(
      std::ifstream(fs::path(KVASIR_SOURCE_DIR) / "tests/data/gptoss/llama_cpp_tiny.json"));
  p.path = dir.file("gpt-oss.gguf");
  test::write_tiny_gguf(p.path, test::tiny_family("gpt-oss"));
  EXPECT_EQ(fnv1a64(test::read_bytes(p.path)), p.j.at("fnv1a64").get<std::string>())
      << "the tiny model generator changed: re-run tests/reference/gptoss/make_refs.py";
  p.model = ModelFile::open(p.path);
  return p;
}

}  // namespace

TEST(ForwardGptOss, TeacherForcedLogProbsMatchLlamaCpp) {
  test::TempDir dir;
  const Peer p = load(dir);
  const ModelConfig& c = p.model->config();
  ASSERT_TRUE(c.gpt_oss && c.moe() && c.sliding_window == 5 && c.rope_yarn_factor == 32.f);
  const auto ids = p.j.at("ids").get<std::vector<int32_t>>();
  const auto& want = p.j.at("logprobs");
  ASSERT_EQ(want.size(), ids.size());
  const int64_t V = c.vocab;
  const auto got = logits_of(*p.model, ids);
  double err = 0;
  int top1 = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    const auto row = want[t].get<std::vector<double>>();
    ASSERT_EQ(int64_t(row.size()), V);
    const auto lp = log_softmax(got.data() + t * size_t(V), V);
    int64_t b = 0;
    for (int64_t v = 0; v < V; ++v) {
      err = std::max(err, std::abs(lp[size_t(v)] - row[size_t(v)]));
      if (row[size_t(v)] > row[size_t(b)]) b = v;
    }
    top1 += argmax(got.data() + t * size_t(V), V) == b;
  }
  std::printf("gpt-oss tiny: max |logprob - llama.cpp| %.2e, teacher-forced top-1 %d/%zu\n", err,
              top1, ids.size());
  EXPECT_LT(err, 0.05);
  EXPECT_EQ(top1, int(ids.size()));
}

TEST(ForwardGptOss, GreedyTokensMatchLlamaCpp) {
  test::TempDir dir;
  const Peer p = load(dir);
  std::vector<int32_t> ids = p.j.at("ids").get<std::vector<int32_t>>();
  const auto want = p.j.at("greedy").get<std::vector<int32_t>>();
  ASSERT_FALSE(want.empty());
  const int64_t V = p.model->config().vocab;
  std::vector<int32_t> greedy;
  for (size_t i = 0; i < want.size(); ++i) {  // one whole forward per token: simple, tiny
    const auto got = logits_of(*p.model, ids);
    greedy.push_back(int32_t(argmax(got.data() + (ids.size() - 1) * size_t(V), V)));
    ids.push_back(greedy.back());
  }
  EXPECT_EQ(greedy, want);
}

// The same model as a Hugging Face folder (GptOssForCausalLM: MXFP4 experts
// as U8 blocks and scales, gate and up interleaved, BF16 matrices, YaRN in
// rope_scaling): the reader repacks the experts into the GGUF file's bytes,
// so every logit is bit for bit the GGUF file's, and so llama.cpp's too.
TEST(ForwardGptOss, FolderGivesTheGgufFilesLogits) {
  test::TempDir dir;
  const Peer p = load(dir);
  const std::string folder = dir.file("gpt-oss-hf");
  test::write_tiny_safetensors(folder, test::tiny_family("gpt-oss"));
  const auto hf = ModelFile::open(folder);
  const ModelConfig& c = hf->config();
  const ModelConfig& g = p.model->config();
  EXPECT_TRUE(c.gpt_oss && c.moe());
  EXPECT_EQ(c.sliding_window, g.sliding_window);
  EXPECT_EQ(c.sliding_pattern, g.sliding_pattern);
  EXPECT_EQ(c.rope_yarn_factor, g.rope_yarn_factor);
  EXPECT_EQ(c.rope_yarn_original_context, g.rope_yarn_original_context);
  EXPECT_EQ(c.expert_ffn, g.expert_ffn);
  EXPECT_EQ(c.rope_layout, g.rope_layout);
  const auto& ge = p.model->get_experts("blk.1.ffn_up_exps.weight");
  const auto& he = hf->get_experts("blk.1.ffn_up_exps.weight");
  ASSERT_EQ(ge.size(), he.size());
  for (size_t e = 0; e < ge.size(); ++e) {
    ASSERT_EQ(ge[e].nbytes, he[e].nbytes);
    EXPECT_EQ(0, std::memcmp(ge[e].data, he[e].data, ge[e].nbytes)) << "expert " << e;
  }
  const auto ids = p.j.at("ids").get<std::vector<int32_t>>();
  const auto a = logits_of(*p.model, ids), b = logits_of(*hf, ids);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// What the folder reader refuses, naming the tensor: an expert stack cut
// short, and experts stored dequantised.
TEST(ForwardGptOss, FolderWithBrokenExpertsIsRefused) {
  test::TempDir dir;
  const std::string folder = dir.file("gpt-oss-hf");
  test::write_tiny_safetensors(folder, test::tiny_family("gpt-oss"));
  const std::string st = folder + "/model.safetensors";
  const std::vector<uint8_t> raw = test::read_bytes(st);
  const std::string bytes(raw.begin(), raw.end());
  const auto patch = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    const size_t at = b.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    b.replace(at, from.size(), to);  // same length: the header stays valid
    std::ofstream(st, std::ios::binary | std::ios::trunc) << b;
  };
  patch("layers.1.mlp.experts.down_proj_scales", "layers.1.mlp.experts.down_proj_scaleX");
  try {
    ModelFile::open(folder);
    ADD_FAILURE() << "a folder without down_proj_scales was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("down_proj_scales' is missing"), std::string::npos)
        << e.what();
  }
  // The key renamed with the blanks JSON allows before its colon.
  patch("layers.1.mlp.experts.down_proj_blocks\"", "layers.1.mlp.experts.down_proj\"       ");
  try {
    ModelFile::open(folder);
    ADD_FAILURE() << "dequantised experts were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not dequantised"), std::string::npos) << e.what();
  }
}
