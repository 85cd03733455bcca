// Matcher: the mask against accept, refusals, termination, rollback (as a
// preempted or re-run step needs it), reset and fast-forward over tokens a
// request already generated.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/check.h"
#include "grammar_test_util.h"

namespace kvasir::grammar::testing {
namespace {

const TestVocab& vocab_for_test() {
  const TestVocab* d = default_vocab();
  return d != nullptr ? *d : *tiny_vocabs()[0];
}

std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec, const TestVocab& tv) {
  static GrammarCompiler compiler;
  std::shared_ptr<const CompiledGrammar> g;
  const Status st = compiler.compile(spec, tv.vocab, &g);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return g;
}

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string"},
  "tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":4}},
  "required":["name","tags"]})";

std::vector<uint32_t> mask_of(Matcher& m) {
  std::vector<uint32_t> mask(m.mask_words());
  m.fill_next_token_bitmask(mask);
  return mask;
}

TEST(GrammarMatcher, RollbackRestoresEveryEarlierState) {
  const TestVocab& tv = vocab_for_test();
  auto g = compile(GrammarSpec::json_schema(kSchema), tv);
  Matcher m(g);
  const Walk w = random_walk(m, *tv.vocab, 42, 200);
  ASSERT_TRUE(w.terminated) << w.text;
  ASSERT_EQ(m.num_accepted(), w.ids.size());
  // Masks along the way, from a second matcher.
  Matcher ref(g);
  std::vector<std::vector<uint32_t>> masks;
  for (int32_t id : w.ids) {
    masks.push_back(mask_of(ref));
    ASSERT_TRUE(ref.accept(id));
  }
  EXPECT_FALSE(m.rollback(w.ids.size() + 1));  // more than was accepted: nothing happens
  EXPECT_TRUE(m.is_terminated());
  ASSERT_TRUE(m.rollback(1));  // the stop token: no longer terminated
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.can_terminate());
  EXPECT_EQ(mask_of(m), masks.back());
  for (size_t back = 3; back <= w.ids.size(); back += 3) {
    Matcher r(g);
    ASSERT_EQ(r.accept_all(w.ids), w.ids.size());
    ASSERT_TRUE(r.rollback(back));
    EXPECT_EQ(r.num_accepted(), w.ids.size() - back);
    EXPECT_EQ(mask_of(r), masks[w.ids.size() - back]) << "after rolling back " << back;
    // ...and it goes on as before.
    EXPECT_EQ(r.accept_all(std::span(w.ids).subspan(w.ids.size() - back)), back);
    EXPECT_TRUE(r.is_terminated());
  }
  EXPECT_TRUE(m.rollback(m.num_accepted()));
  EXPECT_EQ(mask_of(m), masks.front());
}

TEST(GrammarMatcher, FastForwardOverGeneratedTokens) {
  const TestVocab& tv = vocab_for_test();
  auto g = compile(GrammarSpec::json_schema(kSchema), tv);
  const std::string text = R"({"name": "Ada Lovelace", "tags": ["math", "poet"]})";
  std::vector<int32_t> ids = tv.tokenizer->encode(text, /*add_special=*/false);
  Matcher m(g);
  ASSERT_EQ(m.accept_all(ids), ids.size()) << "the tokenizer's own tokens of a valid output";
  EXPECT_TRUE(m.can_terminate());
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.accept(tv.vocab->stop_ids().back()));
  EXPECT_TRUE(m.is_terminated());
  // A sequence that breaks the grammar stops where it breaks.
  const std::vector<int32_t> bad = tv.tokenizer->encode(R"({"name": 12})", false);
  Matcher n(g);
  const size_t took = n.accept_all(bad);
  EXPECT_LT(took, bad.size());
  EXPECT_EQ(n.num_accepted(), took);
  m.reset();
  EXPECT_EQ(m.num_accepted(), 0u);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_EQ(m.accept_all(ids), ids.size());
}

TEST(GrammarMatcher, RefusalsLeaveTheStateAlone) {
  const TestVocab& tv = vocab_for_test();
  auto g = compile(GrammarSpec::choice({"yes", "no"}), tv);
  Matcher m(g);
  const std::vector<uint32_t> before = mask_of(m);
  EXPECT_FALSE(m.accept(-1));
  EXPECT_FALSE(m.accept(tv.vocab->size()));
  EXPECT_FALSE(m.accept(tv.vocab->stop_ids()[0]));  // the output is not complete yet
  for (int32_t id = 0; id < tv.vocab->size(); ++id)
    if (tv.tokenizer->is_special(id) && !tv.tokenizer->is_eog(id)) {
      EXPECT_FALSE(m.accept(id)) << "special token " << id;
      break;
    }
  EXPECT_FALSE(m.accept(tv.tokenizer->find_token("x")));
  EXPECT_EQ(m.num_accepted(), 0u);
  EXPECT_EQ(mask_of(m), before);
  // The mask holds exactly what accept takes.
  const auto allowed = allowed_ids(before, tv.vocab->size());
  ASSERT_FALSE(allowed.empty());
  for (int32_t id : allowed) {
    const std::string& b = tv.vocab->token_bytes(id);
    EXPECT_TRUE(std::string("yes").rfind(b, 0) == 0 || std::string("no").rfind(b, 0) == 0) << b;
  }
  for (int32_t id : tv.tokenizer->encode("yes", false)) ASSERT_TRUE(m.accept(id));
  ASSERT_TRUE(m.can_terminate());
  ASSERT_TRUE(m.accept(tv.vocab->stop_ids()[0]));
  EXPECT_FALSE(m.accept(tv.tokenizer->find_token("x")));  // terminated: nothing more
  std::vector<uint32_t> mask(m.mask_words());
  EXPECT_THROW(m.fill_next_token_bitmask(mask), Error);
  std::vector<uint32_t> short_mask(m.mask_words() - 1);
  m.reset();
  EXPECT_THROW(m.fill_next_token_bitmask(short_mask), Error);
  EXPECT_THROW(Matcher(nullptr), Error);
}

TEST(GrammarMatcher, MaskIsClearPastTheVocabulary) {
  const TestVocab& tv = *tiny_vocabs()[0];
  const int32_t n = tv.tokenizer->vocab_size();
  auto padded = Vocabulary::from_tokenizer(*tv.tokenizer, n + 45);  // a logits row wider than n
  GrammarCompiler compiler;
  std::shared_ptr<const CompiledGrammar> g;
  ASSERT_TRUE(compiler.compile(GrammarSpec::regex("[^\"]*"), padded, &g).ok());
  Matcher m(g);
  EXPECT_EQ(m.vocab_size(), n + 45);
  std::vector<uint32_t> mask(m.mask_words(), 0xFFFFFFFFu);
  EXPECT_TRUE(m.fill_next_token_bitmask(mask));
  for (int32_t id = n; id < int32_t(mask.size() * 32); ++id)
    EXPECT_EQ((mask[id / 32] >> (id % 32)) & 1, 0u) << "id " << id;
  EXPECT_FALSE(m.accept(n + 3));
}

// XGrammar takes any continuation byte after a lead byte; the Matcher keeps
// the output UTF-8: no surrogate after ED, no overlong form after E0.
TEST(GrammarMatcher, Utf8AcrossTokens) {
  auto v = Vocabulary::from_tokens(
      {"a", "\xED", "\xA0\x80", "\x9F\xBF", "\xE0", "\x80\x80", "\xC0\x80", "\xED\xA0\x80", "</s>"},
      {8});
  EXPECT_EQ(v->token_bytes(6), "");  // C0: never UTF-8
  EXPECT_EQ(v->token_bytes(7), "");  // a surrogate within the token
  GrammarCompiler compiler;
  std::shared_ptr<const CompiledGrammar> g;
  ASSERT_TRUE(compiler.compile(GrammarSpec::regex("[^x]{1,4}"), v, &g).ok());
  Matcher m(g);
  auto allowed = [&] {
    std::vector<uint32_t> mask(m.mask_words());
    m.fill_next_token_bitmask(mask);
    return allowed_ids(mask, v->size());
  };
  EXPECT_EQ(allowed(), (std::vector<int32_t>{0, 1, 4}));
  ASSERT_TRUE(m.accept(1));                            // ED
  EXPECT_EQ(allowed(), (std::vector<int32_t>{3, 5}));  // 80-9F: not A0 (a surrogate)
  EXPECT_FALSE(m.accept(2));
  ASSERT_TRUE(m.accept(3));  // U+D7FF
  EXPECT_EQ(allowed(), (std::vector<int32_t>{0, 1, 4, 8}));
  ASSERT_TRUE(m.rollback(1));
  EXPECT_EQ(allowed(), (std::vector<int32_t>{3, 5}));
  m.reset();
  ASSERT_TRUE(m.accept(4));                         // E0
  EXPECT_EQ(allowed(), (std::vector<int32_t>{2}));  // A0-BF: not 80 or 9F (overlong)
  EXPECT_FALSE(m.accept(5));
  EXPECT_TRUE(m.accept(2));  // U+0800
}

TEST(GrammarMatcher, MovesKeepTheState) {
  const TestVocab& tv = vocab_for_test();
  Matcher a(compile(GrammarSpec::choice({"alpha"}), tv));
  ASSERT_EQ(a.accept_all(tv.tokenizer->encode("al", false)),
            tv.tokenizer->encode("al", false).size());
  Matcher b = std::move(a);
  EXPECT_EQ(b.accept_all(tv.tokenizer->encode("pha", false)),
            tv.tokenizer->encode("pha", false).size());
  EXPECT_TRUE(b.can_terminate());
}

// Grammar-forced drafts: after `{"` the schema's one required key is the
// only way on, so the forced string is that key and its closing quote (and
// what must follow it); the tokens spell a prefix of it, every one the
// mask allows in turn; the state is unchanged; at the end there are none.
TEST(GrammarMatcher, ForcedStringAndTokensSpellTheOnlyKey) {
  const TestVocab& tv = vocab_for_test();
  const char* schema = R"({"type":"object","properties":{"customer_full_legal_name":
    {"type":"integer"}},"required":["customer_full_legal_name"],"additionalProperties":false})";
  auto g = compile(GrammarSpec::json_schema(schema), tv);
  Matcher m(g);
  const std::vector<int32_t> open = tv.tokenizer->encode("{\"", false, false);
  ASSERT_EQ(m.accept_all(open), open.size());
  const std::vector<uint32_t> before = mask_of(m);
  const std::string s = m.forced_string();
  EXPECT_EQ(s.rfind("customer_full_legal_name\"", 0), 0u) << s;
  const std::vector<int32_t> ids = m.forced_tokens(16);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(m.num_accepted(), open.size());
  EXPECT_EQ(mask_of(m), before);
  std::string spelled;
  Matcher walk(g);
  ASSERT_EQ(walk.accept_all(open), open.size());
  for (int32_t id : ids) {
    const std::vector<int32_t> allowed = allowed_ids(mask_of(walk), tv.vocab->size());
    EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), id)) << id;
    ASSERT_TRUE(walk.accept(id));
    spelled += tv.vocab->token_bytes(id);
  }
  EXPECT_EQ(s.rfind(spelled, 0), 0u) << spelled << " is not a prefix of " << s;
  EXPECT_LE(m.forced_tokens(2).size(), 2u);
  EXPECT_TRUE(m.forced_tokens(0).empty());
  // Where a value is free (the integer), nothing is forced.
  Matcher v(g);
  const std::vector<int32_t> key =
      tv.tokenizer->encode("{\"customer_full_legal_name\": ", false, false);
  ASSERT_EQ(v.accept_all(key), key.size());
  EXPECT_TRUE(v.forced_tokens(16).empty());
}

}  // namespace
}  // namespace kvasir::grammar::testing
