// The CPU forward against llama.cpp on the tiny random model of each family
// (tests/support/tiny_model.h, tiny_family): Llama, Qwen3 and the
// mixture-of-experts families Qwen3-MoE, Qwen2-MoE and Mixtral.
//
// tests/data/moe/llama_cpp_tiny.json was written by
// tests/reference/moe/make_refs.py (llama-cpp-python 0.3.36, the pinned
// peer of scripts/install-peer) from GGUF files written by this project's
// generator: the logits at every position of a fixed token sequence. The
// test writes the same files again (checked by hash first: a changed
// generator means re-running the script) and compares.
//
// Both sides use the f32 weights and an f32 KV cache (the script asks
// llama.cpp for one): the logits agree to ~1e-6 (measured: at most 1e-6 on
// logits of up to 2; the JSON keeps 6 decimals). Tolerance 2e-5, and the
// argmax must agree wherever llama.cpp's top two differ by more than that.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "stages/forward.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"
#include "tests/unit/stages/peer_logits.h"

using namespace kvasir;
namespace fs = std::filesystem;
using test::fnv1a64;
using test::logits_of;

TEST(ForwardPeer, TinyFamiliesMatchLlamaCpp) {
  const fs::path refs = fs::path(KVASIR_SOURCE_DIR) / "tests/data/moe/llama_cpp_tiny.json";
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(refs));
  const auto ids = j.at("ids").get<std::vector<int32_t>>();
  ASSERT_FALSE(ids.empty());
  test::TempDir dir;
  for (const char* family : {"llama", "qwen3", "qwen3moe", "qwen2moe", "mixtral"}) {
    SCOPED_TRACE(family);
    const nlohmann::json& ref = j.at("models").at(family);
    const std::string path = dir.file(std::string(family) + ".gguf");
    test::write_tiny_gguf(path, test::tiny_family(family));
    ASSERT_EQ(fnv1a64(test::read_bytes(path)), ref.at("fnv1a64").get<std::string>())
        << "the tiny model generator changed: re-run tests/reference/moe/make_refs.py";
    const auto model = ModelFile::open(path);
    const int64_t V = model->config().vocab;
    const auto got = logits_of(*model, ids);
    const auto& want = ref.at("logits");
    ASSERT_EQ(want.size(), ids.size());
    double err = 0, scale = 0;
    constexpr double kTol = 2e-5;
    int argmax_agree = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const auto row = want[t].get<std::vector<double>>();
      ASSERT_EQ(int64_t(row.size()), V);
      int64_t a = 0, b = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double g = got[t * size_t(V) + size_t(v)];
        err = std::max(err, std::abs(g - row[size_t(v)]));
        scale = std::max(scale, std::abs(row[size_t(v)]));
        if (g > got[t * size_t(V) + size_t(a)]) a = v;
        if (row[size_t(v)] > row[size_t(b)]) b = v;
      }
      argmax_agree += a == b;
      EXPECT_TRUE(a == b || row[size_t(b)] - row[size_t(a)] <= kTol) << "position " << t;
    }
    std::printf("%-9s max |logit - llama.cpp| %.2e (max |logit| %.3f), argmax %d/%zu\n", family,
                err, scale, argmax_agree, ids.size());
    EXPECT_LT(err, kTol * std::max(1.0, scale));
  }
}
