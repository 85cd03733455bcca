// ModelFacts (daemon/api/model_facts.h): what every template under
// tests/data/chat_templates can render and the tool-call syntax it teaches,
// the end-of-generation ids, and the default model's facts through the real
// tokenizer and template (skipped without models/).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "daemon/api/model_facts.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "tests/unit/daemon/api/test_api_fakes.h"

using namespace kvasir;

namespace {

std::string src(const std::string& rel) {
  return std::string(KVASIR_SOURCE_DIR) + "/" + rel;
}

std::string read_template(const std::string& name) {
  std::ifstream f(src("tests/data/chat_templates/" + name));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ModelFacts facts_of(const std::string& source) {
  test::FakeCodec codec;
  codec.source = source;
  return model_facts(codec);
}

TEST(ModelFacts, EveryTemplateUnderTestsData) {
  struct Case {
    const char* file;
    bool tools, tool_calls, developer;
    ToolFormat f;
  };
  using enum ToolFormat;
  const std::initializer_list<Case> cases = {
      {"ByteDance-Seed-OSS.jinja", true, true, false, kHermes},
      {"HuggingFaceTB-SmolLM2-135M-Instruct.jinja", false, false, false, kHermes},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", true, true, false, kMistral},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", true, true, false, kHermes},
      {"Qwen-QwQ-32B.jinja", true, true, false, kHermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", true, true, false, kHermes},
      {"Qwen-Qwen3-0.6B.jinja", true, true, false, kHermes},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", false, true, false, kHermes},
      {"deepseek-ai-DeepSeek-V3.1.jinja", false, true, false, kHermes},
      {"google-gemma-2-2b-it.jinja", false, false, false, kHermes},
      {"google-gemma-3-it.jinja", false, false, false, kHermes},
      {"ibm-granite-granite-3.3-2B-Instruct.jinja", true, false, false, kHermes},
      {"meetkai-functionary-medium-v3.1.jinja", true, true, false, kLlama3Json},
      {"meetkai-functionary-medium-v3.2.jinja", true, true, false, kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", true, true, false, kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", true, true, false, kLlama3Json},
      {"microsoft-Phi-3.5-mini-instruct.jinja", false, false, false, kHermes},
      {"microsoft-Phi-4-mini-instruct.jinja", true, false, false, kHermes},
      {"microsoft-phi-4.jinja", false, false, false, kHermes},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", true, true, false, kMistral},
      {"openai-gpt-oss-120b.jinja", true, true, true, kHarmony},
  };
  size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(src("tests/data/chat_templates")))
    seen += e.path().extension() == ".jinja";
  EXPECT_EQ(seen, cases.size()) << "a template under tests/data has no case here";
  for (const Case& c : cases) {
    const std::string source = read_template(c.file);
    ASSERT_FALSE(source.empty()) << c.file;
    const ModelFacts f = facts_of(source);
    EXPECT_EQ(f.template_traits.tools, c.tools) << c.file;
    EXPECT_EQ(f.template_traits.tool_calls, c.tool_calls) << c.file;
    EXPECT_EQ(f.template_traits.developer, c.developer) << c.file;
    // Only gpt-oss's template reads an assistant turn's `thinking`.
    EXPECT_EQ(f.template_traits.thinking, c.f == kHarmony) << c.file;
    // Every one of them tests for a string content or never loops over parts.
    EXPECT_FALSE(f.template_traits.content_parts) << c.file;
    EXPECT_STREQ(tool_format_name(f.tool_format), tool_format_name(c.f)) << c.file;
  }
}

TEST(ModelFacts, ContentPartsOnlyWithoutAStringTest) {
  EXPECT_TRUE(facts_of("{% for p in message.content %}{{ p.text }}{% endfor %}")
                  .template_traits.content_parts);
  EXPECT_TRUE(facts_of("{% for p in m['content'] %}{{ p.text }}{% endfor %}")
                  .template_traits.content_parts);
  EXPECT_FALSE(facts_of("{% if m.content is string %}{{ m.content }}{% else %}"
                        "{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}")
                   .template_traits.content_parts);
  // No template: nothing it can render, the default syntax.
  const ModelFacts none = facts_of("");
  EXPECT_FALSE(none.template_traits.tools || none.template_traits.tool_calls ||
               none.template_traits.developer || none.template_traits.content_parts);
  EXPECT_EQ(none.tool_format, ToolFormat::kHermes);
}

TEST(ModelFacts, VocabularyAndEndOfGeneration) {
  const ModelFacts f = facts_of("");
  EXPECT_EQ(f.vocab_size, 257);
  EXPECT_EQ(f.eog_ids, std::vector<int32_t>{test::FakeCodec::kEog});
  EXPECT_TRUE(f.is_eog(test::FakeCodec::kEog));
  EXPECT_FALSE(f.is_eog(0));
  EXPECT_FALSE(f.is_eog(-1));
  EXPECT_FALSE(f.is_eog(257));
}

// The daemon's path: the model's own tokenizer and template behind the
// TextCodec the routes use.
TEST(ModelFacts, DefaultModel) {
  const std::string model = src("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "default model absent";
  auto gguf = GgufFile::open(model);
  const auto tok = Tokenizer::from_gguf(*gguf);
  const auto chat = ChatTemplate::from_gguf(*gguf);
  const ModelFacts f = model_facts(*make_text_codec(*tok, &chat));
  EXPECT_EQ(f.vocab_size, tok->vocab_size());
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < tok->vocab_size(); ++id)
    if (tok->is_eog(id)) eog.push_back(id);
  EXPECT_EQ(f.eog_ids, eog);
  EXPECT_TRUE(f.is_eog(tok->find_token("<|im_end|>")));
  EXPECT_FALSE(f.template_traits.tools || f.template_traits.tool_calls);
  EXPECT_EQ(f.tool_format, ToolFormat::kHermes);
}

}  // namespace
