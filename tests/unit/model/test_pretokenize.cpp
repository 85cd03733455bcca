// The gpt-4o (o200k) splitter against llama.cpp's words and the Hugging Face
// `tokenizers` ones (tests/data/tokenizer/gpt4o_words.json, written by
// tests/reference/tokenizer/make_gpt4o_words.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "model/pretokenize.h"
#include "model/unicode.h"

using namespace kvasir;

namespace {

std::vector<std::string> words(PreTokenizer p, const std::string& text) {
  const auto cps = unicode::decode_utf8(text);
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  pretokenize(p, cps, ranges);
  std::vector<std::string> out;
  for (auto [b, e] : ranges) {
    std::string w;
    for (uint32_t i = b; i < e; ++i) append_utf8(w, cps[i]);
    out.push_back(w);
  }
  return out;
}

using W = std::vector<std::string>;

TEST(PretokenizeGpt4o, NamesMapToTheSplitter) {
  EXPECT_EQ(pretokenizer_from_name("gpt-4o"), PreTokenizer::kGpt4o);
  EXPECT_EQ(pretokenizer_from_name("llama4"), PreTokenizer::kGpt4o);
  EXPECT_STREQ(pretokenizer_name(PreTokenizer::kGpt4o), "gpt-4o");
}

// The cases that say what the pattern does, readable without the JSON.
TEST(PretokenizeGpt4o, CaseRunsDigitsAndSlashes) {
  const auto p = PreTokenizer::kGpt4o;
  EXPECT_EQ(words(p, "HelloWorld"), (W{"Hello", "World"}));
  EXPECT_EQ(words(p, "iPhone"), (W{"i", "Phone"}));
  EXPECT_EQ(words(p, "McDONALD's"), (W{"Mc", "DONALD's"}));
  EXPECT_EQ(words(p, "HELLO'S"), (W{"HELLO'S"}));
  EXPECT_EQ(words(p, "1234567"), (W{"123", "456", "7"}));
  EXPECT_EQ(words(p, "end.\r\n/x"), (W{"end", ".\r\n/", "x"}));
  EXPECT_EQ(words(p, "a  b "), (W{"a", " ", " b", " "}));
  EXPECT_EQ(words(p, "x \r\n\r\n y"), (W{"x", " \r\n\r\n", " y"}));
  // The reference's quirks (see model/pretokenize.h): a non-ASCII letter
  // is upper and lower case at once, and a combining mark is not a letter.
  EXPECT_EQ(words(p, "helloÀworld"), (W{"helloÀworld"}));
  EXPECT_EQ(words(p, "PRÈS"), (W{"PRÈ", "S"}));
  EXPECT_EQ(words(p, "cafe\xCC\x81"), (W{"cafe", "\xCC\x81"}));
}

TEST(PretokenizeGpt4o, EqualsLlamaCppOnTheCorpus) {
  std::ifstream in(std::string(KVASIR_SOURCE_DIR) + "/tests/data/tokenizer/gpt4o_words.json");
  ASSERT_TRUE(in) << "gpt4o_words.json missing";
  const auto doc = nlohmann::json::parse(in);
  size_t n = 0, n_hf = 0, bad = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string text = c.at("text");
    const auto want = c.at("llama_cpp").get<W>();
    const auto got = words(PreTokenizer::kGpt4o, text);
    if (got != want && bad++ < 5) {
      std::string g, w;
      for (auto& s : got) g += "[" + s + "]";
      for (auto& s : want) w += "[" + s + "]";
      ADD_FAILURE() << "'" << text << "'\n got: " << g << "\nwant: " << w;
    }
    // Where tokenizers agrees with llama.cpp the file has no "hf" entry;
    // where it does not, it differs only on non-ASCII text.
    if (c.contains("hf")) {
      ++n_hf;
      bool ascii = true;
      for (unsigned char ch : text) ascii = ascii && ch < 0x80;
      EXPECT_FALSE(ascii) << "tokenizers and llama.cpp differ on ASCII text '" << text << "'";
    }
    ++n;
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << n << " texts split differently from llama.cpp";
  EXPECT_GE(n, 700u);
  EXPECT_LT(n_hf, n / 4);  // the differences stay the non-ASCII corner cases
}

}  // namespace
