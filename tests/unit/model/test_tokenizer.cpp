// Tokenizer tests: llama.cpp references on the default model (encode with
// and without special-token parsing, decode, round trip), plus behaviour that
// needs no model (stream decoder, UTF-8 handling, validation).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/check.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

using namespace kvasir;

namespace {

std::string src(const std::string& rel) {
  return std::string(KVASIR_SOURCE_DIR) + "/" + rel;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(char(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s;
  for (auto x : v) s += std::to_string(x) + " ";
  return s;
}

struct Ref {
  std::string text;
  std::vector<int32_t> ids, ids_plain;
  std::string detok, detok_skip;
  bool rt = false;
};

std::vector<Ref> load_refs(const std::string& path, nlohmann::json& header) {
  std::ifstream in(path);
  std::vector<Ref> refs;
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (first) {
      header = j;
      first = false;
      continue;
    }
    Ref r;
    r.text = j.contains("text") ? j["text"].get<std::string>() : unhex(j["hex"].get<std::string>());
    r.ids = j["ids"].get<std::vector<int32_t>>();
    r.ids_plain = j.contains("ids_plain") ? j["ids_plain"].get<std::vector<int32_t>>() : r.ids;
    r.detok = unhex(j["detok"].get<std::string>());
    r.detok_skip = j.contains("detok_skip") ? unhex(j["detok_skip"].get<std::string>()) : r.detok;
    r.rt = j["rt"].get<bool>();
    refs.push_back(std::move(r));
  }
  return refs;
}

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model = src("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!std::filesystem::exists(model)) return;
    file_ = GgufFile::open(model).release();
    tok_ = Tokenizer::from_gguf(*file_).release();
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "default model absent (models/SmolLM2-135M-Instruct.Q4_1.gguf)";
  }
  static inline GgufFile* file_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

TEST_F(SmolLM2, Metadata) {
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_TRUE(tok_->is_eog(2));
  const int32_t im_end = tok_->find_token("<|im_end|>");
  ASSERT_GE(im_end, 0);
  EXPECT_TRUE(tok_->is_eog(im_end));
  EXPECT_FALSE(tok_->is_eog(tok_->find_token("<|im_start|>")));
  EXPECT_THROW(tok_->decode({49152}), Error);
  EXPECT_THROW(tok_->decode({-1}), Error);
  EXPECT_THROW(tok_->token_text(1 << 30), Error);
}

// Every reference string: ids with special parsing on and off, decode with
// and without specials, and the round trip where the reference round-trips.
void check_against(const Tokenizer& tok, const std::string& refs_path, size_t min_refs) {
  nlohmann::json header;
  const auto refs = load_refs(refs_path, header);
  ASSERT_GE(refs.size(), min_refs) << "reference file missing or short: " << refs_path;
  size_t bad_ids = 0, bad_plain = 0, bad_detok = 0, bad_rt = 0, n_rt = 0;
  for (const auto& r : refs) {
    const auto ids = tok.encode(r.text, true, true);
    if (ids != r.ids && bad_ids++ < 5)
      ADD_FAILURE() << "encode(special) of '" << r.text << "'\n got: " << show(ids)
                    << "\nwant: " << show(r.ids);
    const auto plain = tok.encode(r.text, true, false);
    if (plain != r.ids_plain && bad_plain++ < 5)
      ADD_FAILURE() << "encode(plain) of '" << r.text << "'\n got: " << show(plain)
                    << "\nwant: " << show(r.ids_plain);
    const std::string dec = tok.decode(r.ids);
    if (dec != r.detok && bad_detok++ < 5)
      ADD_FAILURE() << "decode of '" << r.text << "' gives '" << dec << "'";
    if (tok.decode(r.ids, true) != r.detok_skip && bad_detok++ < 5)
      ADD_FAILURE() << "decode(skip_special) of '" << r.text << "'";
    if (r.rt) {
      ++n_rt;
      std::vector<int32_t> body = ids;
      if (tok.add_bos() && !body.empty() && body[0] == tok.bos_id()) body.erase(body.begin());
      std::string back = tok.decode(body);
      if (tok.strips_leading_space() && !back.empty() && back[0] == ' ') back.erase(0, 1);
      if (back != r.text && bad_rt++ < 5)
        ADD_FAILURE() << "round trip of '" << r.text << "' gives '" << back << "'";
    }
  }
  EXPECT_EQ(bad_ids, 0u);
  EXPECT_EQ(bad_plain, 0u);
  EXPECT_EQ(bad_detok, 0u);
  EXPECT_EQ(bad_rt, 0u);
  std::printf("%s: %zu strings (%s %s), %zu round-trip\n", refs_path.c_str(), refs.size(),
              header.value("reference", "?").c_str(), header.value("version", "?").c_str(), n_rt);
}

TEST_F(SmolLM2, MatchesLlamaCppReference) {
  check_against(*tok_, src("tests/data/tokenizer/smollm2.jsonl"), 2000);
}

// Gemma 3 270M's 262,144-token SentencePiece (byte fallback, no space
// prefix) against llama.cpp: the corpus (every 4th string) and Gemma's
// control tokens as data (tests/reference/tokenizer/make_gemma3_refs.py).
// Skips without the file (scripts/fetch-gemma3).
TEST(Gemma3Tokenizer, MatchesLlamaCppReference) {
  const std::string model = src("models/gemma-3-270m-q4_k_m.gguf");
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << "models/gemma-3-270m-q4_k_m.gguf absent: run scripts/fetch-gemma3";
  auto f = GgufFile::open(model);
  auto tok = Tokenizer::from_gguf(*f);
  EXPECT_EQ(tok->vocab_size(), 262144);
  EXPECT_EQ(tok->bos_id(), 2);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(tok->find_token("<end_of_turn>")));
  check_against(*tok, src("tests/data/tokenizer/gemma3.jsonl"), 500);
}

// Llama 3, Qwen2 and SentencePiece GGUF paths: small vocab-only files written
// by make_gguf_refs.py, references by llama.cpp on the same files.
class TinyGguf : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyGguf, MatchesLlamaCppReference) {
  auto f = GgufFile::open(src("tests/data/tokenizer/tiny_" + GetParam() + ".gguf"));
  auto tok = Tokenizer::from_gguf(*f);
  check_against(*tok, src("tests/data/tokenizer/tiny_" + GetParam() + ".jsonl"), 700);
}

INSTANTIATE_TEST_SUITE_P(Families, TinyGguf, ::testing::Values("llama3", "qwen2", "spm"));

TEST_F(SmolLM2, SpecialTokenParsing) {
  const int32_t s = tok_->find_token("<|im_start|>");
  const auto on = tok_->encode("<|im_start|>user", false, true);
  ASSERT_FALSE(on.empty());
  EXPECT_EQ(on[0], s);
  const auto off = tok_->encode("<|im_start|>user", false, false);
  EXPECT_NE(off[0], s);
  EXPECT_EQ(tok_->decode(off), "<|im_start|>user");
  EXPECT_EQ(tok_->decode(on, true), "user");
}

TEST_F(SmolLM2, StreamDecoderMatchesDecode) {
  for (const char* text :
       {"Hello, world!", "😀 emoji 👨‍👩‍👧‍👦 and 中文字符", "café naïve",
        "a\xff"
        "b"}) {
    const auto ids = tok_->encode(text, false, false);
    StreamDecoder sd(*tok_, false);
    std::string out;
    for (int32_t id : ids) {
      const std::string part = sd.push(id);
      size_t bad;
      EXPECT_EQ(unicode::utf8_complete_prefix(part, bad), part.size()) << "broken UTF-8 emitted";
      out += part;
    }
    out += sd.flush();
    EXPECT_EQ(out, tok_->decode(ids));
  }
}

// A tiny byte-level BPE built by hand: enough to test mechanics without a model.
std::unique_ptr<Tokenizer> tiny() {
  TokenizerData d;
  d.name = "tiny";
  for (int b = 0; b < 256; ++b) d.tokens.push_back(unicode::byte_to_symbol(uint8_t(b)));
  d.tokens.push_back("he");
  d.tokens.push_back("hel");
  d.tokens.push_back("<|end|>");
  d.merges = {"h e", "he l"};
  d.attrs.assign(d.tokens.size(), kAttrNormal);
  d.attrs.back() = kAttrControl;
  d.eos = 258;
  d.pre = PreTokenizer::kGpt2;
  return Tokenizer::from_data(std::move(d));
}

TEST(Tokenizer, TinyBpeMergesAndSpecials) {
  auto t = tiny();
  EXPECT_EQ(t->encode("hel", false), (std::vector<int32_t>{257}));
  EXPECT_EQ(t->encode("helhe", false), (std::vector<int32_t>{257, 256}));
  EXPECT_EQ(t->encode("x<|end|>", false, true), (std::vector<int32_t>{'x', 258}));
  EXPECT_TRUE(t->is_eog(258));
  EXPECT_EQ(t->decode(t->encode("hé\tlo  x", false)), "hé\tlo  x");
}

TEST(Tokenizer, StreamDecoderHoldsPartialUtf8) {
  auto t = tiny();
  StreamDecoder sd(*t, true);
  // "€" = E2 82 AC, fed one byte token at a time.
  EXPECT_EQ(sd.push(0xE2), "");
  EXPECT_EQ(sd.push(0x82), "");
  EXPECT_EQ(sd.push(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(sd.push(0xFF), "\xEF\xBF\xBD");  // never valid: replaced at once
  EXPECT_EQ(sd.push(0xF0), "");
  EXPECT_EQ(sd.push('a'),
            "\xEF\xBF\xBD"
            "a");  // an interrupted sequence
  EXPECT_EQ(sd.push(0xC3), "");
  EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");  // incomplete at the end
  EXPECT_EQ(sd.push(258), "");            // special skipped
  EXPECT_THROW(sd.push(9999), Error);
}

TEST(Tokenizer, RejectsBadData) {
  TokenizerData d;
  EXPECT_THROW(Tokenizer::from_data(d), Error);  // empty vocabulary
  d.tokens = {"a", "a"};
  EXPECT_THROW(Tokenizer::from_data(d), Error);  // duplicate
  d.tokens = {"a", "b"};
  d.merges = {"ab"};
  EXPECT_THROW(Tokenizer::from_data(d), Error);  // malformed merge
  d.merges.clear();
  d.attrs = {kAttrNormal};
  EXPECT_THROW(Tokenizer::from_data(d), Error);  // types/tokens mismatch
}

TEST(Unicode, LenientDecodeLikeReference) {
  EXPECT_EQ(unicode::decode_utf8("a\xff"
                                 "b"),
            (std::vector<uint32_t>{'a', 0xFFFD, 'b'}));
  EXPECT_EQ(unicode::decode_utf8("\xc0\x80"), (std::vector<uint32_t>{0}));  // overlong accepted
  EXPECT_EQ(unicode::decode_utf8("\xe2\x82"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
  EXPECT_TRUE(unicode::is_letter(U'é'));
  EXPECT_TRUE(unicode::is_number(U'٣'));
  EXPECT_TRUE(unicode::is_space(0x3000));
  EXPECT_FALSE(unicode::is_space(0x1C));
}

}  // namespace

namespace {

// Untrusted input: random bytes through every splitter never crash, and
// every id produced decodes.
TEST(Tokenizer, RandomBytesAnyFamily) {
  uint64_t s = 12345;
  auto next = [&] {
    return s = s * 6364136223846793005ull + 1442695040888963407ull, uint32_t(s >> 33);
  };
  for (PreTokenizer p : {PreTokenizer::kGpt2, PreTokenizer::kSmolLm, PreTokenizer::kLlama3,
                         PreTokenizer::kQwen2, PreTokenizer::kGpt4o}) {
    TokenizerData d;
    for (int b = 0; b < 256; ++b) d.tokens.push_back(unicode::byte_to_symbol(uint8_t(b)));
    d.pre = p;
    auto t = Tokenizer::from_data(std::move(d));
    for (int i = 0; i < 300; ++i) {
      std::string x(next() % 64, '\0');
      for (auto& c : x) c = char(next());
      const auto ids = t->encode(x, true, true);
      for (auto id : ids) ASSERT_LT(id, t->vocab_size());
      (void)t->decode(ids);
    }
  }
}

}  // namespace

namespace {

// SentencePiece adds a space before the first word: a stream that starts a
// sequence drops it once; a continuation keeps its spaces.
TEST(StreamDecoder, SentencePieceLeadingSpace) {
  auto f = GgufFile::open(src("tests/data/tokenizer/tiny_spm.gguf"));
  auto tok = Tokenizer::from_gguf(*f);
  ASSERT_TRUE(tok->strips_leading_space());
  const auto ids = tok->encode("Hello world, café", true, true);
  auto run = [&](bool at_start) {
    StreamDecoder sd(*tok, true, at_start);
    std::string out;
    for (int32_t id : ids) out += sd.push(id);
    return out + sd.flush();
  };
  EXPECT_EQ(run(true), "Hello world, café");
  EXPECT_EQ(run(false), " Hello world, café");
}

// One Tokenizer shared by threads (the word cache is shared and locked).
TEST(Tokenizer, ConcurrentEncode) {
  auto f = GgufFile::open(src("tests/data/tokenizer/tiny_qwen2.gguf"));
  auto tok = Tokenizer::from_gguf(*f);
  const std::string text = "The quick brown fox, 12345 times; naïve café 😀 <|im_end|>\n";
  const auto want = tok->encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (tok->encode(text) != want) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
