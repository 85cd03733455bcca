// Tool calls in each family's syntax (daemon/api/tool_calls.h): the parser
// on whole texts, the same texts fed in every split (the streamed deltas
// must assemble into exactly the whole text's calls and content), the
// format each real template teaches, and the forcing grammar: walked at
// random under the grammar engine, every output parses into valid calls.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "daemon/api/chat_turns.h"
#include "daemon/api/tool_calls.h"
#include "grammar/grammar.h"

namespace kvasir {
namespace {

using nlohmann::ordered_json;

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;
  std::string reasoning;  // harmony's analysis channel
  bool cut = false;
};

Parsed whole(ToolFormat f, const std::string& text, bool constrained = false) {
  ToolCallStream s(f, constrained, 42);
  s.push(text);
  s.finish();
  return {s.content(), s.calls(), s.reasoning(), s.cut()};
}

// Fed in pieces of `step` bytes; the deltas assembled as a client would.
Parsed streamed(ToolFormat f, const std::string& text, size_t step, bool constrained = false) {
  ToolCallStream s(f, constrained, 42);
  Parsed p;
  auto take = [&](const ToolCallStream::Out& o) {
    p.content += o.content;
    p.reasoning += o.reasoning;
    for (const ToolCallDelta& d : o.deltas) {
      if (d.first) {
        EXPECT_EQ(d.index, p.calls.size());
        EXPECT_EQ(d.arguments, "");
        p.calls.push_back({d.id, d.name, ""});
      } else {
        EXPECT_LT(d.index, p.calls.size());
        p.calls[d.index].arguments += d.arguments;
      }
    }
  };
  for (size_t i = 0; i < text.size(); i += step) take(s.push(text.substr(i, step)));
  take(s.finish());
  return p;
}

// Whole, and streamed in every piece size: always the same.
Parsed parse_all_ways(ToolFormat f, const std::string& text, bool constrained = false) {
  const Parsed w = whole(f, text, constrained);
  for (size_t step = 1; step <= text.size() + 1; ++step) {
    const Parsed s = streamed(f, text, step, constrained);
    EXPECT_EQ(s.content, w.content) << "step " << step;
    EXPECT_EQ(s.reasoning, w.reasoning) << "step " << step;
    EXPECT_EQ(s.calls.size(), w.calls.size()) << "step " << step;
    for (size_t i = 0; i < std::min(s.calls.size(), w.calls.size()); ++i) {
      EXPECT_EQ(s.calls[i].id, w.calls[i].id);
      EXPECT_EQ(s.calls[i].name, w.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, w.calls[i].arguments) << "step " << step;
    }
  }
  return w;
}

TEST(ToolCalls, Hermes) {
  const Parsed p = parse_all_ways(
      ToolFormat::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris <tool_call> }\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"arguments\": {}, "
      "\"name\": \"now\"}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me look.");  // whitespace beside calls is not content
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris <tool_call> }\", \"days\": 2}");
  EXPECT_EQ(p.calls[1].name, "now");  // arguments before the name: sent once it is known
  EXPECT_EQ(p.calls[1].arguments, "{}");
  EXPECT_EQ(p.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(p.calls[0].id.size(), 29u);
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
}

TEST(ToolCalls, HermesEdges) {
  // No call: all content, a partial marker at the end included.
  Parsed p = parse_all_ways(ToolFormat::kHermes, "a < b and <tool_ca");
  EXPECT_EQ(p.content, "a < b and <tool_ca");
  EXPECT_TRUE(p.calls.empty());
  // A marker that opens no object: content.
  p = parse_all_ways(ToolFormat::kHermes, "<tool_call> not json");
  EXPECT_EQ(p.content, "<tool_call> not json");
  EXPECT_TRUE(p.calls.empty());
  // An object without a name: content.
  p = parse_all_ways(ToolFormat::kHermes, "<tool_call>{\"x\": 1}</tool_call>");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_NE(p.content.find("{\"x\": 1}"), std::string::npos);
  // Cut short by max_tokens: the call as it stands.
  p = parse_all_ways(ToolFormat::kHermes,
                     "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"a\": [1, 2");
  // Arguments as a JSON string: its contents.
  p = parse_all_ways(ToolFormat::kHermes,
                     "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"a\": 1}");
  // Whitespace beside calls is not content; text after them is.
  p = parse_all_ways(ToolFormat::kHermes,
                     "\n\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n Done.");
  EXPECT_EQ(p.content, "\n Done.");
  p = parse_all_ways(ToolFormat::kHermes, "  \n");
  EXPECT_EQ(p.content, "  \n");
  // The closing tag cut by the end (max_tokens): call syntax, not content
  // (it leaked as "\n</tool_call").
  for (const char* cut : {"\n</tool_call", "\n</", "\n<", "\n"}) {
    p = parse_all_ways(ToolFormat::kHermes,
                       std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}") + cut);
    EXPECT_EQ(p.content, "") << cut;
    ASSERT_EQ(p.calls.size(), 1u);
  }
}

// A call the end cuts short is marked so (finish_reason is then not
// "tool_calls"); a whole call, or one whose closing tag was cut, is not.
TEST(ToolCalls, CutCallsAreMarked) {
  auto cut = [](ToolFormat f, const std::string& text) {
    ToolCallStream s(f, false, 1);
    s.push(text);
    s.finish();
    return s.cut();
  };
  EXPECT_TRUE(cut(ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\""));
  EXPECT_FALSE(cut(ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"));
  EXPECT_FALSE(cut(ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}\n</tool"));
  EXPECT_TRUE(cut(ToolFormat::kLlama3Json, "{\"name\": \"f\", \"parameters\": {\"a\": 1"));
  EXPECT_FALSE(cut(ToolFormat::kHermes, "no call at all"));
}

TEST(ToolCalls, Llama3Json) {
  Parsed p =
      parse_all_ways(ToolFormat::kLlama3Json,
                     " {\"name\": \"f\", \"parameters\": {\"q\": \"a;b\"}}; {\"name\": \"g\", "
                     "\"parameters\": {}}");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, "{\"q\": \"a;b\"}");
  EXPECT_EQ(p.calls[1].name, "g");
  p = parse_all_ways(ToolFormat::kLlama3Json, "The answer is {\"name\": 4}.");
  EXPECT_EQ(p.content, "The answer is {\"name\": 4}.");
  EXPECT_TRUE(p.calls.empty());
}

TEST(ToolCalls, Mistral) {
  Parsed p = parse_all_ways(ToolFormat::kMistral,
                            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": "
                            "\"g\", \"arguments\": {\"b\": [2]}}]");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].arguments, "{\"b\": [2]}");
  EXPECT_EQ(p.calls[0].id.size(), 9u);  // Mistral's templates refuse other ids
  // Forced: the bare array (no grammar can write the control token).
  p = parse_all_ways(ToolFormat::kMistral, "[{\"name\": \"f\", \"arguments\": {}}]", true);
  ASSERT_EQ(p.calls.size(), 1u);
  // Not forced, no marker: content.
  p = parse_all_ways(ToolFormat::kMistral, "[{\"name\": \"f\"}]");
  EXPECT_TRUE(p.calls.empty());
}

std::string read_template(const std::string& name) {
  std::ifstream f(std::string(KVASIR_SOURCE_DIR) + "/tests/data/chat_templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// gpt-oss's harmony (daemon/api/harmony.h): channels split into reasoning,
// content and calls, in every split of the text.
TEST(ToolCalls, HarmonyChannels) {
  Parsed p = parse_all_ways(ToolFormat::kHarmony,
                            "<|channel|>analysis<|message|>Think <|about|> it.<|end|>"
                            "<|start|>assistant<|channel|>final<|message|>The answer.<|return|>"
                            "after the turn");
  EXPECT_EQ(p.reasoning, "Think <|about|> it.");  // a marker-like run that is not one stays
  EXPECT_EQ(p.content, "The answer.");            // nothing after the turn's end
  EXPECT_TRUE(p.calls.empty());
  // A preamble to no one is content; a call addressed in the role part works too.
  p = parse_all_ways(ToolFormat::kHarmony,
                     "<|channel|>commentary<|message|>Checking.<|end|>"
                     "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}"
                     "<|call|>");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "now");
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_EQ(p.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_FALSE(p.cut);
}

TEST(ToolCalls, HarmonyCallsAndTheirEnds) {
  // Two calls, the first ended by <|end|>; the end token itself may never
  // reach the text (it is the family's end of generation).
  Parsed p = parse_all_ways(
      ToolFormat::kHarmony,
      "<|channel|>analysis<|message|>Two lookups.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\": \"Oslo\"}<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json"
      "<|message|>{\"tz\": \"CET\"}");
  EXPECT_EQ(p.reasoning, "Two lookups.");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, R"({"tz": "CET"})");
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
  EXPECT_TRUE(p.cut);  // the last one's body was never closed: reported as cut
  // A call cut before any argument ends as no arguments.
  p = parse_all_ways(ToolFormat::kHarmony,
                     "<|channel|>commentary to=functions.f <|constrain|>json<|message|>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_TRUE(p.cut);
}

TEST(ToolCalls, NotHarmonyIsContentAsWritten) {
  // A constrained answer, or a model that ignores the format: content.
  for (const std::string text :
       {"{\"a\": 1}", "Plain words <|channel|>final<|message|>x", "<|chan", "<|channel|>final"}) {
    const Parsed p = parse_all_ways(ToolFormat::kHarmony, text);
    EXPECT_EQ(p.content, text);
    EXPECT_EQ(p.reasoning, "");
    EXPECT_TRUE(p.calls.empty());
  }
  // A header that never reaches <|message|> within its bound is not one.
  const std::string lost = "<|channel|>" + std::string(600, 'a') + "<|message|>x";
  EXPECT_EQ(whole(ToolFormat::kHarmony, lost).content, lost);
}

TEST(ToolCalls, FormatOfEachTemplate) {
  struct Case {
    const char* file;
    ToolFormat f;
  };
  for (auto [file, f] : std::initializer_list<Case>{
           {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::kHermes},
           {"Qwen-Qwen3-0.6B.jinja", ToolFormat::kHermes},
           {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolFormat::kHermes},
           {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::kLlama3Json},
           {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolFormat::kLlama3Json},
           {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::kMistral},
           {"HuggingFaceTB-SmolLM2-135M-Instruct.jinja", ToolFormat::kHermes},
           {"openai-gpt-oss-120b.jinja", ToolFormat::kHarmony},
       }) {
    const std::string src = read_template(file);
    ASSERT_FALSE(src.empty()) << file;
    EXPECT_EQ(tool_format_name(detect_tool_format(src)), std::string(tool_format_name(f))) << file;
  }
  const TemplateTraits smol =
      template_traits(read_template("HuggingFaceTB-SmolLM2-135M-Instruct.jinja"));
  EXPECT_FALSE(smol.tools || smol.tool_calls || smol.content_parts);
  const TemplateTraits qwen = template_traits(read_template("Qwen-Qwen2.5-7B-Instruct.jinja"));
  EXPECT_TRUE(qwen.tools && qwen.tool_calls);
}

// A conversation for a template that knows no tools: the tools in the
// system prompt, a call written back in the syntax asked for, text parts
// joined, null content "", developer as system.
TEST(ToolCalls, TurnsForATemplateWithoutTools) {
  ChatTurns t;
  t.messages = ordered_json::parse(R"([
    {"role": "developer", "content": [{"type": "text", "text": "be"}, {"type": "text", "text": "brief"}]},
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  t.tools = ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])");
  const ChatTurns a = adapt_chat_turns(t, TemplateTraits{}, ToolFormat::kHermes);
  ASSERT_EQ(a.messages.size(), 4u);
  EXPECT_EQ(a.messages[0]["role"], "system");
  const std::string sys = a.messages[0]["content"];
  EXPECT_EQ(sys.rfind("be\nbrief\n\n# Tools", 0), 0u) << sys;
  EXPECT_NE(sys.find("\"name\":\"get_weather\""), std::string::npos) << sys;
  EXPECT_EQ(a.messages[2]["content"],
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
            "\"Paris\"}}\n</tool_call>");
  EXPECT_FALSE(a.messages[2].contains("tool_calls"));
  // A template that knows tool calls gets them, arguments as an object.
  TemplateTraits knows{false, true, true, true};
  const ChatTurns b = adapt_chat_turns(t, knows, ToolFormat::kHermes);
  EXPECT_EQ(b.messages[0]["role"], "developer");
  EXPECT_TRUE(b.messages[2]["content"].is_null());
  EXPECT_EQ(b.messages[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(b.messages.size(), 4u);
}

// A vocabulary of every byte and an end token: any text can be written.
std::shared_ptr<const grammar::Vocabulary> byte_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 128; ++b) tokens.push_back(std::string(1, char(b)));
  tokens.push_back("");
  return grammar::Vocabulary::from_tokens(tokens, {128});
}

// Walks a matcher at random (the end when allowed, closing punctuation
// often) and returns the text.
std::string walk(grammar::Matcher& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(m.mask_words());
  std::string out;
  for (int step = 0; step < 600 && !m.is_terminated(); ++step) {
    m.fill_next_token_bitmask(mask);
    std::vector<int32_t> ok, closing;
    for (int32_t id = 0; id <= 128; ++id)
      if (mask[size_t(id) / 32] >> (id % 32) & 1u) {
        ok.push_back(id);
        if (id < 128 && std::string("}]\"0123456789,").find(char(id)) != std::string::npos)
          closing.push_back(id);
      }
    if (ok.empty()) break;
    int32_t id = ok[rng() % ok.size()];
    if (std::count(ok.begin(), ok.end(), 128) && rng() % 10 < 7)
      id = 128;
    else if (!closing.empty() && rng() % 2)
      id = closing[rng() % closing.size()];
    EXPECT_TRUE(m.accept(id));
    if (id < 128) out += char(id);
  }
  return out;
}

TEST(ToolCalls, ForcedCallsAlwaysParseAndValidate) {
  const ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
      "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "now"}}])");
  grammar::GrammarCompiler compiler;
  int checked = 0;
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kLlama3Json, ToolFormat::kMistral}) {
    for (const std::string only : {"", "get_weather"}) {
      for (bool parallel : {false, true}) {
        const OutputConstraint c = tool_call_constraint(f, tools, only, parallel);
        std::shared_ptr<const grammar::CompiledGrammar> g;
        const Status st =
            compiler.compile(grammar::GrammarSpec::structural_tag(c.text), byte_vocab(), &g);
        ASSERT_TRUE(st.ok()) << tool_format_name(f) << ": " << st.to_string();
        for (uint64_t seed = 0; seed < 8; ++seed) {
          grammar::Matcher m(g);
          const std::string text = walk(m, seed * 7 + 1);
          if (!m.is_terminated()) continue;
          const Parsed p = whole(f, text, true);
          ASSERT_GE(p.calls.size(), 1u) << text;
          if (!parallel || !only.empty()) {
            EXPECT_EQ(p.calls.size(), 1u) << text;
          }
          for (const ToolCall& call : p.calls) {
            if (!only.empty()) {
              EXPECT_EQ(call.name, only);
            }
            const auto args = nlohmann::json::parse(call.arguments);  // throws if not JSON
            EXPECT_TRUE(args.is_object()) << text;
            if (call.name == "get_weather") {
              EXPECT_TRUE(args["city"].is_string() && args["city"].get<std::string>().size() <= 8);
              EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << text;
            }
          }
          EXPECT_TRUE(p.content.empty()) << text;
          ++checked;
        }
      }
    }
  }
  EXPECT_GE(checked, 48);
}

}  // namespace
}  // namespace kvasir
