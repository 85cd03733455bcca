// Vocabulary: each id's bytes as the detokenizer emits them (GPT-2 byte
// alphabet, U+2581, <0xNN> byte fallback), cross-checked against XGrammar's
// own decoders; specials, stops, padding, the fingerprint, bad input.
#include <gtest/gtest.h>
#include <xgrammar/xgrammar.h>

#include "base/check.h"
#include "grammar_test_util.h"

namespace kvasir::grammar::testing {
namespace {

// Bytes that no UTF-8 text holds: C0, C1, F5-FF, or a second byte out of its
// lead's range (overlong, surrogate, above U+10FFFF).
bool never_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = uint8_t(s[i]);
    if (b == 0xC0 || b == 0xC1 || b >= 0xF5) return true;
    const auto n = i + 1 < s.size() ? uint8_t(s[i + 1]) : uint8_t(0x80);
    if ((b == 0xE0 && n < 0xA0) || (b == 0xED && n > 0x9F) || (b == 0xF0 && n < 0x90) ||
        (b == 0xF4 && n > 0x8F))
      return i + 1 < s.size();
  }
  return false;
}

// XGrammar's decoding of the raw token strings, for the tokens that are text;
// those our Vocabulary blanks must be ones no UTF-8 text holds.
void cross_check(const TestVocab& tv, xgrammar::VocabType type) {
  const TokenizerData& d = tv.tokenizer->data();
  const xgrammar::TokenizerInfo info(d.tokens, type);
  const std::vector<std::string>& theirs = info.GetDecodedVocab();
  ASSERT_EQ(int32_t(theirs.size()), tv.vocab->size());
  int compared = 0, not_utf8 = 0;
  for (int32_t id = 0; id < tv.vocab->size(); ++id) {
    if (!(d.attrs[id] & (kAttrNormal | kAttrByte))) continue;
    if (tv.vocab->token_bytes(id).empty()) {
      EXPECT_TRUE(never_utf8(theirs[id])) << tv.name << " token " << id;
      ++not_utf8;
      continue;
    }
    EXPECT_EQ(tv.vocab->token_bytes(id), theirs[id]) << tv.name << " token " << id;
    ++compared;
  }
  EXPECT_GT(compared, tv.vocab->size() / 2) << tv.name;
  EXPECT_LE(not_utf8, 16) << tv.name;  // byte-level vocabularies: one token per such byte
}

TEST(GrammarVocabulary, ByteLevelBpeMatchesXGrammarsDecoder) {
  for (const TestVocab* tv : tiny_vocabs())
    if (tv->tokenizer->data().model == TokenizerData::Model::kBpe)
      cross_check(*tv, xgrammar::VocabType::BYTE_LEVEL);
}

TEST(GrammarVocabulary, DefaultModelMatchesXGrammarsDecoder) {
  const TestVocab* tv = default_vocab();
  if (tv == nullptr) GTEST_SKIP() << "no default model at " << model_path();
  cross_check(*tv, xgrammar::VocabType::BYTE_LEVEL);
  // The alphabet: "Ġ" is a space, "Ċ" a newline.
  EXPECT_EQ(tv->vocab->token_bytes(tv->tokenizer->find_token("\xC4\xA0{")), " {");
  EXPECT_EQ(tv->vocab->token_bytes(tv->tokenizer->find_token("\xC4\x8A")), "\n");
}

TEST(GrammarVocabulary, SentencePieceByteFallbackMatchesXGrammarsDecoder) {
  const TestVocab* spm = tiny_vocabs()[2];
  ASSERT_EQ(spm->tokenizer->data().model, TokenizerData::Model::kSpm);
  cross_check(*spm, xgrammar::VocabType::BYTE_FALLBACK);
  for (int b : {0x0A, 0x7B, 0xE2, 0xFF, 0xC0}) {
    const int32_t id = spm->tokenizer->find_token(fmt::format("<0x{:02X}>", b));
    ASSERT_GE(id, 0);
    // FF and C0 are in no UTF-8 text: no grammar may produce them.
    EXPECT_EQ(spm->vocab->token_bytes(id), b == 0xFF || b == 0xC0 ? "" : std::string(1, char(b)));
  }
  const int32_t space_a = spm->tokenizer->find_token(
      "\xE2\x96\x81"
      "a");
  if (space_a >= 0) {
    EXPECT_EQ(spm->vocab->token_bytes(space_a), " a");
  }
}

TEST(GrammarVocabulary, SpecialsAreNeverTextAndEndOfGenerationStops) {
  std::vector<const TestVocab*> vocabs = tiny_vocabs();
  if (const TestVocab* d = default_vocab()) vocabs.push_back(d);
  for (const TestVocab* tv : vocabs) {
    const Tokenizer& tok = *tv->tokenizer;
    std::vector<int32_t> eog;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      if (tok.is_eog(id)) eog.push_back(id);
      if (tok.is_special(id) || tok.is_eog(id)) {
        EXPECT_EQ(tv->vocab->token_bytes(id), "") << id;
      }
    }
    EXPECT_EQ(tv->vocab->stop_ids(), eog) << tv->name;
    EXPECT_FALSE(eog.empty()) << tv->name;
  }
  if (const TestVocab* d = default_vocab()) {
    EXPECT_EQ(d->vocab->stop_ids(), (std::vector<int32_t>{0, 2}));  // <|endoftext|>, <|im_end|>
    EXPECT_EQ(d->vocab->token_bytes(1), "");                        // <|im_start|>
  }
}

TEST(GrammarVocabulary, SizePaddingAndFingerprint) {
  const TestVocab& tv = *tiny_vocabs()[0];
  const int32_t n = tv.tokenizer->vocab_size();
  auto padded = Vocabulary::from_tokenizer(*tv.tokenizer, n + 70);
  EXPECT_EQ(padded->size(), n + 70);
  EXPECT_EQ(padded->mask_words(), size_t(n + 70 + 31) / 32);
  EXPECT_EQ(padded->token_bytes(n + 69), "");
  EXPECT_NE(padded->fingerprint(), tv.vocab->fingerprint());
  EXPECT_EQ(Vocabulary::from_tokenizer(*tv.tokenizer)->fingerprint(), tv.vocab->fingerprint());
  EXPECT_NE(tiny_vocabs()[1]->vocab->fingerprint(), tv.vocab->fingerprint());
  EXPECT_THROW(padded->token_bytes(n + 70), Error);
  EXPECT_THROW(padded->token_bytes(-1), Error);
  EXPECT_THROW(Vocabulary::from_tokenizer(*tv.tokenizer, n - 1), Error);
}

TEST(GrammarVocabulary, FromTokensChecksItsInput) {
  auto v = Vocabulary::from_tokens({"a", "b", "", "stop"}, {3, 3}, 40);
  EXPECT_EQ(v->size(), 40);
  EXPECT_EQ(v->stop_ids(), std::vector<int32_t>{3});
  EXPECT_EQ(v->token_bytes(3), "");  // a stop token is never text
  EXPECT_EQ(v->token_bytes(0), "a");
  EXPECT_THROW(Vocabulary::from_tokens({"a"}, {1}), Error);
  EXPECT_THROW(Vocabulary::from_tokens({"a", "b"}, {0}, 1), Error);
  EXPECT_THROW(Vocabulary::from_tokens({}, {}), Error);
}

}  // namespace
}  // namespace kvasir::grammar::testing
