// Random walks through regexes, choice lists and EBNF grammars: every output
// that ended must match (std::regex, the list, a small parser). On the
// default model's tokenizer and the tiny ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "grammar_test_util.h"

namespace kvasir::grammar::testing {
namespace {

std::vector<const TestVocab*> all_vocabs() {
  std::vector<const TestVocab*> v = tiny_vocabs();
  if (const TestVocab* d = default_vocab()) v.insert(v.begin(), d);
  return v;
}

// Walks `spec` `walks` times on every vocabulary; `ok` judges each output
// that ended. At least half must end.
void walk_spec(const GrammarSpec& spec, const std::function<bool(const std::string&)>& ok,
               int walks = 6, size_t cap = 300) {
  walks *= walk_scale();
  GrammarCompiler compiler;
  for (const TestVocab* tv : all_vocabs()) {
    std::shared_ptr<const CompiledGrammar> g;
    const Status st = compiler.compile(spec, tv->vocab, &g);
    ASSERT_TRUE(st.ok()) << tv->name << ": " << st.to_string();
    int ended = 0;
    for (int seed = 0; seed < walks; ++seed) {
      Matcher m(g);
      const Walk w = random_walk(m, *tv->vocab, 7919 * seed + 1, cap);
      EXPECT_EQ(w.error, "") << tv->name << " seed " << seed;
      if (!w.terminated) continue;
      ++ended;
      EXPECT_TRUE(ok(w.text)) << tv->name << " seed " << seed << ": '" << w.text << "'";
    }
    EXPECT_GE(ended * 2, walks) << tv->name << ": " << ended << " of " << walks << " ended";
  }
}

TEST(GrammarWalk, Regexes) {
  if (default_vocab() == nullptr) std::printf("no default model at %s\n", model_path().c_str());
  for (const char* re : {
           "[a-z]{2,5}-[0-9]{3}",
           "(yes|no|maybe)",
           "[0-9]{4}-[0-9]{2}-[0-9]{2}",
           "[A-Z][a-z]{1,6}( [A-Z][a-z]{1,6})?",
           "[a-z0-9._]{1,8}@[a-z]{2,6}\\.(com|org)",
           "(0|[1-9][0-9]{0,5})(\\.[0-9]{1,3})?",
       }) {
    SCOPED_TRACE(re);
    const std::regex expect(re);
    walk_spec(GrammarSpec::regex(re),
              [&](const std::string& s) { return std::regex_match(s, expect); });
  }
}

TEST(GrammarWalk, Choices) {
  const std::vector<std::string> choices = {"red",        "redder",     "green",
                                            "dark blue",  "\"quoted\"", "back\\slash",
                                            "two\nlines", "ünïcödé",    "tab\there"};
  walk_spec(
      GrammarSpec::choice(choices),
      [&](const std::string& s) {
        return std::find(choices.begin(), choices.end(), s) != choices.end();
      },
      20);
}

// expr ::= term (("+" | "-") term)*; term ::= factor (("*" | "/") factor)*;
// factor ::= [0-9]+ | "(" expr ")"  — true iff s is exactly one expr.
bool is_expression(const std::string& s) {
  size_t i = 0;
  std::function<bool()> expr, term, factor;
  factor = [&] {
    if (i < s.size() && s[i] == '(') {
      ++i;
      if (!expr() || i >= s.size() || s[i] != ')') return false;
      ++i;
      return true;
    }
    const size_t start = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i > start;
  };
  term = [&] {
    if (!factor()) return false;
    while (i < s.size() && (s[i] == '*' || s[i] == '/'))
      if (++i, !factor()) return false;
    return true;
  };
  expr = [&] {
    if (!term()) return false;
    while (i < s.size() && (s[i] == '+' || s[i] == '-'))
      if (++i, !term()) return false;
    return true;
  };
  return expr() && i == s.size();
}

TEST(GrammarWalk, EbnfArithmetic) {
  const char* grammar = R"g(# arithmetic, GBNF style
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
)g";
  walk_spec(GrammarSpec::ebnf(grammar), is_expression, 10, 400);
}

TEST(GrammarWalk, EbnfRepetitionAndClasses) {
  // Repetition ranges, optional parts, negated classes, escapes. (std::regex
  // sees bytes: the note's class is checked without its count.)
  const char* grammar = R"(root ::= "[" item ("," item){0,3} "]" note?
item ::= "\"" [a-z]{1,5} "\""
note ::= " # " [^\n\r"\\]{1,10}
)";
  const std::regex expect(R"(\[("[a-z]{1,5}")(,"[a-z]{1,5}"){0,3}\]( # [^\n\r"\\]+)?)");
  walk_spec(GrammarSpec::ebnf(grammar),
            [&](const std::string& s) { return std::regex_match(s, expect); });
}

}  // namespace
}  // namespace kvasir::grammar::testing
