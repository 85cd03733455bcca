// tokenizer.json loader: references from the Hugging Face `tokenizers`
// package for small tokenizers trained per family (make_hf_refs.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "model/tokenizer.h"

using namespace kvasir;

namespace {

std::string src(const std::string& rel) {
  return std::string(KVASIR_SOURCE_DIR) + "/" + rel;
}

class HfFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFamily, MatchesTokenizersPackage) {
  const std::string fam = GetParam();
  auto tok = Tokenizer::from_hf_json(src("tests/data/tokenizer/hf_" + fam + ".json"));
  std::ifstream in(src("tests/data/tokenizer/hf_" + fam + ".jsonl"));
  std::string line;
  std::getline(in, line);  // header
  size_t n = 0, bad = 0, bad_rt = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string text = j["text"];
    const auto want = j["ids"].get<std::vector<int32_t>>();
    const auto got = tok->encode(text, true, true);
    if (got != want && bad++ < 5) {
      std::string g, w;
      for (auto x : got) g += std::to_string(x) + " ";
      for (auto x : want) w += std::to_string(x) + " ";
      ADD_FAILURE() << fam << ": '" << text << "'\n got: " << g << "\nwant: " << w;
    }
    if (j["rt"].get<bool>()) {
      std::string dec = tok->decode(tok->encode(text, false, true));
      if (tok->strips_leading_space() && !dec.empty() && dec[0] == ' ') dec.erase(0, 1);
      if (dec != text && bad_rt++ < 5)
        ADD_FAILURE() << fam << ": round trip of '" << text << "' gives '" << dec << "'";
    }
    ++n;
  }
  EXPECT_GT(n, 400u);
  EXPECT_EQ(bad, 0u) << fam << ": " << bad << " of " << n << " differ";
  EXPECT_EQ(bad_rt, 0u);
}

INSTANTIATE_TEST_SUITE_P(Families, HfFamily,
                         ::testing::Values("gpt2", "smollm", "llama3", "qwen2", "spm", "gemma"));

// gpt-oss's tokenizer.json: Split(o200k pattern) then ByteLevel without its
// own regex. A trained llama3 file with its pattern swapped for o200k's
// loads with the gpt-4o splitter.
TEST(HfJson, O200kPatternLoadsTheGpt4oSplitter) {
  std::ifstream in(src("tests/data/tokenizer/hf_llama3.json"));
  auto j = nlohmann::json::parse(in);
  auto& split = j["pre_tokenizer"]["pretokenizers"][0];
  ASSERT_EQ(split["type"], "Split");
  split["pattern"]["Regex"] =
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
      "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const std::string p = ::testing::TempDir() + "/tok_o200k.json";
  std::ofstream(p) << j.dump();
  auto tok = Tokenizer::from_hf_json(p);
  EXPECT_EQ(tok->data().pre, PreTokenizer::kGpt4o);
  // "HelloWorld" is two words now: its ids are those of each word.
  auto ids = tok->encode("Hello", false, false);
  const auto world = tok->encode("World", false, false);
  ids.insert(ids.end(), world.begin(), world.end());
  EXPECT_EQ(tok->encode("HelloWorld", false, false), ids);
}

TEST(HfJson, RefusesWhatItCannotDo) {
  EXPECT_THROW(Tokenizer::from_hf_json(src("tests/data/tokenizer/does-not-exist.json")), Error);
  const std::string p = ::testing::TempDir() + "/tok_bad.json";
  auto write = [&](const std::string& s) { std::ofstream(p) << s; };
  write("{not json");
  EXPECT_THROW(Tokenizer::from_hf_json(p), Error);
  write(R"({"model": {"type": "WordPiece", "vocab": {}}})");
  EXPECT_THROW(Tokenizer::from_hf_json(p), Error);
  write(
      R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 5}, "merges": []}})");
  EXPECT_THROW(Tokenizer::from_hf_json(p), Error);  // id gap
  write(
      R"({"pre_tokenizer": {"type": "Whitespace"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  EXPECT_THROW(Tokenizer::from_hf_json(p), Error);
}

}  // namespace
