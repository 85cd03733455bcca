// A gpt-oss-style GGUF tokenizer (pre "gpt-4o", byte-level BPE, harmony
// control tokens) against llama-server's /tokenize on the same file
// (tests/data/tokenizer/gpt4o_llama_server.json, written by
// tests/reference/tokenizer/make_gpt4o_gguf_refs.py from
// bench/peers/make_gptoss.py --tiny-o200k). The test writes the same
// tokenizer into a GGUF file from the default model's vocabulary and merges.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "tests/support/gguf_writer.h"

using namespace kvasir;
using nlohmann::json;

namespace {

std::string src(const std::string& rel) {
  return std::string(KVASIR_SOURCE_DIR) + "/" + rel;
}

json refs() {
  std::ifstream in(src("tests/data/tokenizer/gpt4o_llama_server.json"));
  return json::parse(in);
}

// make_gptoss.py --tiny-o200k's tokenizer, from SmolLM2's file.
std::string write_o200k_style(const GgufFile& smol, const std::vector<std::string>& specials) {
  std::vector<std::string> tokens, merges;
  const GgufArray& t = smol.get("tokenizer.ggml.tokens").as_array("tokens");
  for (auto s : t.strings) tokens.emplace_back(s);
  const GgufArray& mg = smol.get("tokenizer.ggml.merges").as_array("merges");
  for (auto s : mg.strings) merges.emplace_back(s);
  const GgufArray& ty = smol.get("tokenizer.ggml.token_type").as_array("types");
  std::vector<int32_t> types;
  for (uint64_t i = 0; i < ty.count; ++i) types.push_back(int32_t(ty.int_at(i, "types")));
  const uint32_t first = uint32_t(tokens.size());
  for (const auto& s : specials) tokens.push_back(s), types.push_back(3);  // control
  test::GgufWriter w;
  w.add_string("general.architecture", "gpt-oss");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "gpt-4o");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_array("tokenizer.ggml.token_type", GgufType::I32, types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_u32("tokenizer.ggml.bos_token_id", first);      // <|startoftext|>
  w.add_u32("tokenizer.ggml.eos_token_id", first + 1);  // <|return|>
  w.add_u32("tokenizer.ggml.padding_token_id", 0);      // <|endoftext|>
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  const std::string path = ::testing::TempDir() + "/o200k_style.gguf";
  w.write(path);
  return path;
}

class O200kStyle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model = src("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!std::ifstream(model)) return;
    refs_ = new json(refs());
    auto smol = GgufFile::open(model);
    file_ = GgufFile::open(write_o200k_style(*smol, (*refs_)["specials"])).release();
    tok_ = Tokenizer::from_gguf(*file_).release();
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "default model absent (models/SmolLM2-135M-Instruct.Q4_1.gguf)";
  }
  int32_t id(const std::string& t) const {
    const auto ids = tok_->encode(t, false, true);
    return ids.size() == 1 ? ids[0] : -1;
  }
  static inline json* refs_ = nullptr;
  static inline GgufFile* file_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

TEST_F(O200kStyle, LoadsWithTheGpt4oSplitter) {
  EXPECT_EQ(tok_->data().pre, PreTokenizer::kGpt4o);
  EXPECT_EQ(tok_->vocab_size(), 49152 + int32_t((*refs_)["specials"].size()));
}

TEST_F(O200kStyle, IdsEqualLlamaServer) {
  size_t n = 0, n_plain = 0, bad = 0;
  for (const auto& c : (*refs_)["cases"]) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    if (tok_->encode(text, false, true) != want && bad++ < 5) ADD_FAILURE() << "'" << text << "'";
    ++n;
    // Without special parsing the reference still matches the harmony
    // markers it makes user-defined; we do not (see the tokenizer's
    // constructor), so only texts without them compare.
    if (!c.contains("ids_plain")) continue;
    bool marker = false;
    for (const char* m : {"<|start|>", "<|end|>", "<|channel|>", "<|message|>", "<|constrain|>"})
      marker = marker || text.find(m) != std::string::npos;
    if (marker) continue;
    ++n_plain;
    if (tok_->encode(text, false, false) != c["ids_plain"].get<std::vector<int32_t>>() && bad++ < 5)
      ADD_FAILURE() << "without specials: '" << text << "'";
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GE(n, 725u);
  EXPECT_GE(n_plain, 20u);
}

TEST_F(O200kStyle, ChatPromptsEqualLlamaServer) {
  for (const auto& c : (*refs_)["chats"])
    EXPECT_EQ(tok_->encode(c["prompt"].get<std::string>(), false, true),
              c["ids"].get<std::vector<int32_t>>());
}

// <|end|> closes a message, not the answer: a reply goes on past its
// analysis channel to the final one, and stops at <|return|> or <|call|>.
TEST_F(O200kStyle, HarmonyEndOfGeneration) {
  EXPECT_TRUE(tok_->is_eog(id("<|return|>")));
  EXPECT_TRUE(tok_->is_eog(id("<|call|>")));
  EXPECT_FALSE(tok_->is_eog(id("<|end|>")));
  EXPECT_FALSE(tok_->is_eog(id("<|channel|>")));
  // Content cannot forge a turn: without special parsing a marker is text.
  EXPECT_GT(tok_->encode("<|start|>", false, false).size(), 1u);
}

}  // namespace
