// The wire form of a spec (encode_spec / decode_spec): every kind round
// trips; every malformed byte string is refused without touching the
// output. And the structural_tag kind: tool calls in a family's syntax
// around a JSON schema, walked, refused when malformed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "grammar_test_util.h"

namespace kvasir::grammar::testing {
namespace {

TEST(GrammarWire, EveryKindRoundTrips) {
  const std::vector<GrammarSpec> specs = {
      GrammarSpec::json_object(),
      GrammarSpec::json_schema(R"({"type":"integer"})", false),
      GrammarSpec::json_schema(R"({"type":"string"})", true),
      GrammarSpec::regex("[a-z]+"),
      GrammarSpec::choice({"yes", "", "n\"o\\\n", "\xC3\xA9t\xC3\xA9"}),
      GrammarSpec::ebnf("root ::= \"a\"*"),
      GrammarSpec::structural_tag(
          R"({"type":"structural_tag","format":{"type":"const_string","value":"x"}})"),
      GrammarSpec::regex(std::string("a\0b", 3)),
  };
  for (const GrammarSpec& s : specs) {
    const std::string bytes = encode_spec(s);
    GrammarSpec back;
    ASSERT_TRUE(decode_spec(bytes, &back).ok()) << kind_name(s.kind);
    EXPECT_EQ(back, s) << kind_name(s.kind);
  }
}

TEST(GrammarWire, MalformedBytesAreRefused) {
  const std::string good = encode_spec(GrammarSpec::choice({"ab", "cd"}));
  GrammarSpec untouched = GrammarSpec::regex("keep");
  auto refused = [&](const std::string& bytes, const std::string& why) {
    GrammarSpec out = untouched;
    const Status st = decode_spec(bytes, &out);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << why;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
    EXPECT_EQ(out, untouched);
  };
  refused("", "unknown format version");
  refused(std::string(1, '\x02') + good.substr(1), "unknown format version");
  refused(good.substr(0, 1) + "\x09" + good.substr(2), "unknown kind");
  refused(good.substr(0, 2) + "\x02" + good.substr(3), "bad strict flag");
  for (size_t n = 3; n < good.size(); ++n) refused(good.substr(0, n), "");
  refused(good + "x", "bytes after the end");
  // A text length far past the end, and a choice count no bytes could hold.
  std::string huge = good;
  huge[3] = '\xFF';
  huge[4] = '\xFF';
  refused(huge, "truncated");
  std::string many = encode_spec(GrammarSpec::regex("a"));
  many.replace(many.size() - 4, 4, std::string("\xFF\xFF\xFF\x7F", 4));
  refused(many, "more choices than bytes");
}

// Hermes-style tool calls: `<tool_call>` + {"name": ..., "arguments": ARGS} +
// `</tool_call>`, one or more, ARGS under the function's schema.
nlohmann::json weather_params() {
  return {{"type", "object"},
          {"properties",
           {{"city", {{"type", "string"}, {"maxLength", 12}}},
            {"days", {{"type", "integer"}, {"minimum", 1}, {"maximum", 7}}}}},
          {"required", {"city", "days"}}};
}

std::string hermes_tag(bool parallel) {
  const nlohmann::json params = weather_params();
  nlohmann::ordered_json tag = {
      {"type", "tag"},
      {"begin", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "},
      {"content", {{"type", "json_schema"}, {"json_schema", params}}},
      {"end", "}\n</tool_call>"}};
  nlohmann::ordered_json st = {{"type", "structural_tag"},
                               {"format",
                                {{"type", "tags_with_separator"},
                                 {"tags", {tag}},
                                 {"separator", "\n"},
                                 {"at_least_one", true},
                                 {"stop_after_first", !parallel}}}};
  return st.dump();
}

TEST(GrammarStructuralTag, ToolCallWalksParse) {
  if (default_vocab() == nullptr) std::printf("no default model at %s\n", model_path().c_str());
  GrammarCompiler compiler;
  for (const TestVocab* tv : tiny_vocabs()) {
    for (bool parallel : {false, true}) {
      std::shared_ptr<const CompiledGrammar> g;
      const Status st =
          compiler.compile(GrammarSpec::structural_tag(hermes_tag(parallel)), tv->vocab, &g);
      ASSERT_TRUE(st.ok()) << st.to_string();
      int ended = 0;
      for (int seed = 0; seed < 6 * walk_scale(); ++seed) {
        Matcher m(g);
        const Walk w = random_walk(m, *tv->vocab, 131 * seed + 7, 400);
        EXPECT_EQ(w.error, "");
        if (!w.terminated) continue;
        ++ended;
        // Every call parses and its arguments validate.
        std::string rest = w.text;
        int calls = 0;
        for (size_t at; (at = rest.find("<tool_call>\n")) != std::string::npos; ++calls) {
          const size_t end = rest.find("\n</tool_call>", at);
          ASSERT_NE(end, std::string::npos) << w.text;
          const auto call = nlohmann::json::parse(rest.substr(at + 12, end - at - 12));
          EXPECT_EQ(call["name"], "get_weather");
          EXPECT_EQ(check_json(weather_params(), call["arguments"], true), "") << w.text;
          rest.erase(0, end + 13);
        }
        EXPECT_GE(calls, 1) << w.text;
        if (!parallel) {
          EXPECT_EQ(calls, 1) << w.text;
        }
      }
      EXPECT_GE(ended, 3) << tv->name;
    }
  }
}

TEST(GrammarStructuralTag, Refusals) {
  GrammarCompiler compiler;
  std::shared_ptr<const CompiledGrammar> g;
  auto code_and_message = [&](const std::string& text) {
    const Status st =
        compiler.compile(GrammarSpec::structural_tag(text), tiny_vocabs()[0]->vocab, &g);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << text;
    EXPECT_EQ(st.message().rfind("structural_tag: ", 0), 0u) << st.message();
    return st.message();
  };
  EXPECT_EQ(code_and_message(""), "structural_tag: the structural tag is empty");
  EXPECT_NE(code_and_message("{").find("is not valid JSON"), std::string::npos);
  EXPECT_EQ(code_and_message("[]"),
            "structural_tag: the structural tag must be a JSON object, not array");
  code_and_message(R"({"type":"structural_tag","format":{"type":"nonsense"}})");
  code_and_message(R"({"type":"structural_tag"})");
  std::string deep = R"({"type":"integer"})";
  for (int i = 0; i < 70; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_NE(code_and_message(R"({"type":"structural_tag","format":{"type":"json_schema",)"
                             R"("json_schema":)" +
                             deep + "}}")
                .find("nests deeper than the limit"),
            std::string::npos);
  EXPECT_EQ(g, nullptr);
}

}  // namespace
}  // namespace kvasir::grammar::testing
