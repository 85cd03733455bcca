// Random walks through JSON schemas: for each schema, matchers driven by a
// seeded RNG over the allowed tokens until they end (or a length cap); every
// output that ended must parse as JSON and validate against its schema
// (check_json). On the default model's tokenizer and the tiny ones.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "grammar_test_util.h"

namespace kvasir::grammar::testing {
namespace {

using nlohmann::json;

struct SchemaCase {
  const char* name;
  const char* schema;
  bool strict = true;
};

// Shapes: flat and nested objects, arrays with bounds, enums, numbers with
// ranges, required and optional properties, strings with patterns and
// lengths, anyOf, const, $defs/$ref, type unions, tuples, a tool call's
// arguments, a non-strict schema.
const SchemaCase kSchemas[] = {
    {"flat_object", R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
      "age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"]})"},
    {"nested_objects", R"({"type":"object","properties":{"user":{"type":"object","properties":{
      "id":{"type":"integer"},"profile":{"type":"object","properties":{
      "nick":{"type":"string","maxLength":8},"verified":{"type":"boolean"}},
      "required":["nick","verified"]}},"required":["id","profile"]}},"required":["user"]})"},
    {"bounded_array", R"({"type":"array","items":{"type":"integer","minimum":-10,"maximum":10},
      "minItems":2,"maxItems":5})"},
    {"enums", R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},
      "size":{"type":"string","enum":["S","M","L","XL"]}},"required":["color","size"]})"},
    {"number_ranges", R"({"type":"object","properties":{
      "temp":{"type":"number","minimum":-50,"maximum":50},
      "count":{"type":"integer","minimum":100,"maximum":999},
      "ratio":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1}},
      "required":["temp","count","ratio"]})"},
    {"optional_properties", R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"boolean"},"c":{"type":"string","maxLength":4},"d":{"type":"null"}},
      "required":["a","c"]})"},
    {"string_patterns", R"({"type":"object","properties":{
      "code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
      "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["code","zip"]})"},
    {"string_lengths", R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":6},
      "minItems":1,"maxItems":3})"},
    {"array_of_objects", R"({"type":"array","minItems":1,"maxItems":3,"items":{"type":"object",
      "properties":{"id":{"type":"integer","minimum":1},"tags":{"type":"array",
      "items":{"type":"string","maxLength":5},"maxItems":3}},"required":["id","tags"]}})"},
    {"any_of", R"({"type":"object","properties":{"value":{"anyOf":[{"type":"integer"},
      {"type":"string","maxLength":5},{"type":"null"}]}},"required":["value"]})"},
    {"const_and_literals", R"({"type":"object","properties":{"version":{"const":"v1"},
      "enabled":{"type":"boolean"},"nothing":{"type":"null"}},
      "required":["version","enabled","nothing"]})"},
    {"defs_and_refs", R"({"$defs":{"point":{"type":"object","properties":{
      "x":{"type":"integer","minimum":-100,"maximum":100},
      "y":{"type":"integer","minimum":-100,"maximum":100}},"required":["x","y"]}},
      "type":"object","properties":{"from":{"$ref":"#/$defs/point"},
      "to":{"$ref":"#/$defs/point"}},"required":["from","to"]})"},
    {"type_union", R"({"type":"object","properties":{"note":{"type":["string","null"],
      "maxLength":10},"score":{"type":["integer","boolean"]}},"required":["note","score"]})"},
    {"tuple", R"({"type":"array","prefixItems":[{"type":"string","maxLength":6},
      {"type":"integer","minimum":0,"maximum":9},{"type":"boolean"}]})"},
    {"tool_arguments", R"({"type":"object","properties":{"city":{"type":"string","maxLength":20},
      "unit":{"type":"string","enum":["celsius","fahrenheit"]},
      "days":{"type":"integer","minimum":1,"maximum":14}},"required":["city","unit"]})"},
    {"not_strict", R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]})",
     false},
};

// The text with every byte outside printable ASCII as \xNN.
std::string printable(const std::string& s) {
  std::string out;
  for (const unsigned char c : s)
    out += c >= 0x20 && c < 0x7F ? std::string(1, char(c)) : fmt::format("\\x{:02X}", c);
  return out;
}

struct Tally {
  int walks = 0, ended = 0, valid = 0;
  int repaired = 0;  // held ill-formed UTF-8, which the detokenizer replaced
  int huge = 0;      // valid JSON with a number beyond a double (nlohmann refuses it)
};

// The text a client reads: the detokenizer's, where bytes that are not
// UTF-8 become U+FFFD. XGrammar admits UTF-8-encoded surrogates (U+D800 to
// U+DFFF, ill-formed) in strings; the detokenizer repairs them.
std::string client_text(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamDecoder d(tok);
  std::string out;
  for (int32_t id : ids) out += d.push(id);
  return out + d.flush();
}

// KVASIR_GRAMMAR_DUMP=FILE: every validated output, one JSON line each, for
// tests/reference/grammar/check_walks.py to check with Python's jsonschema.
void dump(const std::string& where, const json& schema, bool strict, const std::string& text,
          const std::string& why) {
  static const char* path = std::getenv("KVASIR_GRAMMAR_DUMP");
  static std::ofstream out = path ? std::ofstream(path) : std::ofstream();
  if (path == nullptr) return;
  out << json{{"case", where},
              {"schema", schema},
              {"strict", strict},
              {"text", text},
              {"ours", why}}
             .dump()
      << "\n";
}

// One ended walk: parses as JSON and validates, or fails the test.
void judge(const std::string& where, const json& schema, bool strict, const Walk& w,
           const Tokenizer& tok, Tally& t) {
  const std::string text = client_text(tok, w.ids);
  t.repaired += text != w.text;
  json value;
  try {
    value = json::parse(text);
  } catch (const json::out_of_range& e) {
    t.huge += e.id == 406;  // "number overflow": JSON allows any magnitude
    if (e.id != 406) ADD_FAILURE() << where << ": " << e.what() << ": " << printable(text);
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << where << ": not JSON (" << e.what() << "): " << printable(text);
    return;
  }
  const std::string why = check_json(schema, value, strict);
  EXPECT_EQ(why, "") << where << ": " << printable(text);
  t.valid += why.empty();
  dump(where, schema, strict, text, why);
}

// Runs `walks` seeded walks of one schema on one vocabulary; every ended
// output must validate. Returns the counts.
Tally walk_schema(GrammarCompiler& compiler, const TestVocab& tv, const SchemaCase& c, int walks,
                  size_t cap) {
  Tally t;
  std::shared_ptr<const CompiledGrammar> g;
  const Status st = compiler.compile(GrammarSpec::json_schema(c.schema, c.strict), tv.vocab, &g);
  EXPECT_TRUE(st.ok()) << c.name << ": " << st.to_string();
  if (!st.ok()) return t;
  const json schema = json::parse(c.schema);
  for (int seed = 0; seed < walks; ++seed) {
    const std::string where = tv.name + " " + c.name + " seed " + std::to_string(seed);
    Matcher m(g);
    const Walk w = random_walk(m, *tv.vocab, 1000 * seed + 17, cap);
    ++t.walks;
    EXPECT_EQ(w.error, "") << where;
    if (!w.terminated) continue;
    ++t.ended;
    judge(where, schema, c.strict, w, *tv.tokenizer, t);
  }
  return t;
}

void walk_all(const TestVocab& tv, int walks, size_t cap) {
  walks *= walk_scale();
  GrammarCompiler compiler;
  int schemas = 0;
  Tally all;
  for (const SchemaCase& c : kSchemas) {
    const Tally t = walk_schema(compiler, tv, c, walks, cap);
    // Most walks must end, or the test checks little.
    EXPECT_GE(t.ended * 2, t.walks) << tv.name << " " << c.name << ": only " << t.ended << " of "
                                    << t.walks << " walks ended within " << cap << " tokens";
    ++schemas, all.walks += t.walks, all.ended += t.ended, all.valid += t.valid;
    all.repaired += t.repaired, all.huge += t.huge;
  }
  std::printf(
      "%s: %d schemas, %d walks, %d ended, %d valid (%d repaired by the detokenizer), "
      "%d with numbers beyond a double\n",
      tv.name.c_str(), schemas, all.walks, all.ended, all.valid, all.repaired, all.huge);
  EXPECT_GE(schemas, 12);
}

TEST(GrammarJsonWalk, SchemasOnDefaultModel) {
  const TestVocab* tv = default_vocab();
  if (tv == nullptr) GTEST_SKIP() << "no default model at " << model_path();
  walk_all(*tv, 10, 400);
}

TEST(GrammarJsonWalk, SchemasOnTinyTokenizers) {
  for (const TestVocab* tv : tiny_vocabs()) walk_all(*tv, 4, 1500);
}

TEST(GrammarJsonWalk, JsonObjectIsAnyObject) {
  const TestVocab* tv = default_vocab();
  if (tv == nullptr) tv = tiny_vocabs()[0];
  GrammarCompiler compiler;
  std::shared_ptr<const CompiledGrammar> g;
  ASSERT_TRUE(compiler.compile(GrammarSpec::json_object(), tv->vocab, &g).ok());
  int ended = 0;
  for (int seed = 0; seed < 8; ++seed) {
    Matcher m(g);
    const Walk w = random_walk(m, *tv->vocab, seed, 300);
    EXPECT_EQ(w.error, "");
    if (!w.terminated) continue;
    ++ended;
    json v;
    ASSERT_NO_THROW(v = json::parse(w.text)) << w.text;
    EXPECT_TRUE(v.is_object()) << w.text;
  }
  EXPECT_GE(ended, 4);
}

}  // namespace
}  // namespace kvasir::grammar::testing
