// Every way a spec is refused, with its code and message: the limits checked
// before compiling (check_spec), and XGrammar's refusals (a bad schema, a
// regex or grammar that does not compile), and the derived-grammar bound.
#include <gtest/gtest.h>

#include <string>

#include "grammar_test_util.h"

namespace kvasir::grammar::testing {
namespace {

// compile() must refuse with kInvalidArgument and a message holding `what`,
// and check_grammar (the daemon's check on arrival, without a vocabulary)
// must refuse it with the same words.
void expect_refused(const GrammarSpec& spec, const std::string& what,
                    CompilerOptions options = {}) {
  GrammarCompiler compiler(options);
  std::shared_ptr<const CompiledGrammar> g;
  const Status st = compiler.compile(spec, tiny_vocabs()[0]->vocab, &g);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(what), std::string::npos)
      << "message '" << st.message() << "' lacks '" << what << "'";
  EXPECT_EQ(st.message().rfind(std::string(kind_name(spec.kind)) + ": ", 0), 0u) << st.message();
  EXPECT_EQ(g, nullptr);
  const Status checked = check_grammar(spec, options);
  EXPECT_EQ(checked.code(), st.code()) << checked.to_string();
  EXPECT_EQ(checked.message(), st.message());
}

std::string nested_schema(int levels) {
  std::string s = R"({"type":"integer"})";
  for (int i = 0; i < levels; ++i)
    s = R"({"type":"object","properties":{"a":)" + s + R"(},"required":["a"]})";
  return s;
}

TEST(GrammarRefusal, LimitsCheckedBeforeCompiling) {
  GrammarLimits lim;
  lim.max_text_bytes = 100;
  const std::string big(101, 'a');
  EXPECT_EQ(check_spec(GrammarSpec::regex(big), lim).message(),
            "regex: the regex is 101 bytes, over the limit of 100");
  EXPECT_EQ(check_spec(GrammarSpec::ebnf("root ::= \"" + big + "\""), lim).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(check_spec(GrammarSpec::choice({big.substr(50), big.substr(50)}), lim).message(),
            "choice: the choices are 102 bytes, over the limit of 100");
  EXPECT_EQ(
      check_spec(GrammarSpec::json_schema(R"({"description":")" + big + R"("})"), lim).message(),
      "json_schema: the schema is 119 bytes, over the limit of 100");

  const GrammarLimits def;
  EXPECT_TRUE(check_spec(GrammarSpec::json_schema(nested_schema(30)), def).ok());
  EXPECT_EQ(check_spec(GrammarSpec::json_schema(nested_schema(40)), def).message(),
            "json_schema: the schema nests deeper than the limit of 64 levels");
  std::string props = R"({"type":"object","properties":{)";
  for (int i = 0; i < 1025; ++i) props += (i ? "," : "") + fmt::format(R"("p{}":{{}})", i);
  EXPECT_EQ(check_spec(GrammarSpec::json_schema(props + "}}"), def).message(),
            "json_schema: the schema has 1025 properties, over the limit of 1024");
  std::string enums = R"({"enum":[0)";
  for (int i = 1; i < 1025; ++i) enums += "," + std::to_string(i);
  EXPECT_EQ(check_spec(GrammarSpec::json_schema(enums + "]}"), def).message(),
            "json_schema: the schema has 1025 enum values, over the limit of 1024");
  EXPECT_EQ(check_spec(GrammarSpec::choice(std::vector<std::string>(1025, "x")), def).message(),
            "choice: 1025 choices, over the limit of 1024");
  const std::string deep = std::string(65, '(') + "a" + std::string(65, ')');
  EXPECT_EQ(check_spec(GrammarSpec::regex(deep), def).message(),
            "regex: groups nest deeper than the limit of 64 levels");
  EXPECT_EQ(check_spec(GrammarSpec::ebnf("root ::= " + deep), def).message(),
            "ebnf: groups nest deeper than the limit of 64 levels");
  // Parentheses in strings, classes and escapes are not groups.
  EXPECT_TRUE(check_spec(GrammarSpec::ebnf("root ::= \"" + deep + "\" [(] \"\\\"(\""), def).ok());
  EXPECT_TRUE(check_spec(GrammarSpec::regex("\\(" + std::string(70, '[') + "(]"), def).ok());
}

TEST(GrammarRefusal, EmptyAndMalformedInput) {
  const GrammarLimits def;
  EXPECT_EQ(check_spec(GrammarSpec::regex(""), def).message(), "regex: the regex is empty");
  EXPECT_EQ(check_spec(GrammarSpec::ebnf(""), def).message(), "ebnf: the grammar is empty");
  EXPECT_EQ(check_spec(GrammarSpec::json_schema(""), def).message(),
            "json_schema: the schema is empty");
  EXPECT_EQ(check_spec(GrammarSpec::choice({}), def).message(),
            "choice: the list of choices is empty");
  const Status bad_json = check_spec(GrammarSpec::json_schema(R"({"type": )"), def);
  EXPECT_EQ(bad_json.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad_json.message().rfind("json_schema: the schema is not valid JSON: parse error", 0),
            0u)
      << bad_json.message();
  EXPECT_EQ(check_spec(GrammarSpec::json_schema("[1, 2]"), def).message(),
            "json_schema: the schema must be a JSON object, not array");
  EXPECT_EQ(check_spec(GrammarSpec::choice({"ok", "caf\xC3"}), def).message(),
            "choice: choice 1 is not valid UTF-8");
  EXPECT_EQ(check_spec(GrammarSpec::json_schema("{\"a\": \"\xFF\"}"), def).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(check_spec(GrammarSpec::json_object(), def).ok());
}

TEST(GrammarRefusal, XGrammarRefusesBadSpecs) {
  expect_refused(GrammarSpec::json_schema(R"({"type":"foo"})"), "Unsupported type \"foo\"");
  expect_refused(GrammarSpec::json_schema(R"({"type":"integer","minimum":5,"maximum":3})"),
                 "minimum greater than maximum");
  expect_refused(GrammarSpec::json_schema(R"({"properties":{"a":{"$ref":"#/$defs/nope"}}})"),
                 "nope");
  expect_refused(GrammarSpec::json_schema(R"({"type":"string","pattern":"a(b"})"),
                 "The parenthesis is not closed");
  expect_refused(GrammarSpec::regex("a(b"), "The parenthesis is not closed");
  expect_refused(GrammarSpec::regex("[z-a]"), "lower bound is larger than upper bound");
  expect_refused(GrammarSpec::regex("a{3,1}"), "Lower bound is larger than upper bound");
  expect_refused(GrammarSpec::ebnf("root ::= \"a"), "EBNF lexer error at line 1, column 12");
  expect_refused(GrammarSpec::ebnf("root ::= foo"), "Rule \"foo\" is not defined");
  expect_refused(GrammarSpec::ebnf("start ::= \"a\""), "The root rule with name \"root\"");
  expect_refused(GrammarSpec::ebnf("root ::= \"a\" |"), "EBNF parser error at line 1");
}

TEST(GrammarRefusal, DerivedGrammarBound) {
  CompilerOptions o;
  o.limits.max_grammar_bytes = 64;
  expect_refused(GrammarSpec::json_schema(R"({"type":"object","properties":{"a":{"type":
                 "string"},"b":{"type":"integer"}},"required":["a","b"]})"),
                 "the grammar it makes is", o);
}

TEST(GrammarRefusal, WarningsSayWhatWasIgnored) {
  GrammarCompiler compiler;
  std::shared_ptr<const CompiledGrammar> g;
  ASSERT_TRUE(compiler
                  .compile(GrammarSpec::json_schema(
                               R"({"type":"string","pattern":"[a-z]+","maxLength":3})"),
                           tiny_vocabs()[0]->vocab, &g)
                  .ok());
  ASSERT_EQ(g->warnings().size(), 1u);
  EXPECT_EQ(g->warnings()[0],
            "pattern combined with minLength/maxLength is not supported; ignoring "
            "minLength/maxLength");
  ASSERT_TRUE(compiler.compile(GrammarSpec::regex("[a-z]+"), tiny_vocabs()[0]->vocab, &g).ok());
  EXPECT_TRUE(g->warnings().empty());
}

TEST(GrammarRefusal, RefusalsAreCachedLimitsAreNot) {
  GrammarCompiler compiler;
  std::shared_ptr<const CompiledGrammar> g;
  const auto& vocab = tiny_vocabs()[0]->vocab;
  const Status a = compiler.compile(GrammarSpec::regex("a(b"), vocab, &g);
  const Status b = compiler.compile(GrammarSpec::regex("a(b"), vocab, &g);
  EXPECT_EQ(a.message(), b.message());
  EXPECT_FALSE(compiler.compile(GrammarSpec::regex(""), vocab, &g).ok());
  const CacheStats s = compiler.cache_stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.entries, 1u);
}

}  // namespace
}  // namespace kvasir::grammar::testing
