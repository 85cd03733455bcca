// Chat template tests: byte-for-byte against jinja2 renderings of the default
// model's own template and of the Llama 3 / Llama 2 / Mistral templates
// (the earlier references; tests/unit/model/test_jinja_refs.cpp has the
// real templates of the major families).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "model/chat_template.h"
#include "model/gguf.h"

using namespace kvasir;

namespace {

std::string src(const std::string& rel) {
  return std::string(KVASIR_SOURCE_DIR) + "/" + rel;
}

nlohmann::json load() {
  std::ifstream in(src("tests/data/tokenizer/chat_refs.json"));
  return nlohmann::json::parse(in);
}

TEST(ChatTemplate, MatchesJinja2) {
  const auto j = load();
  size_t n = 0, errors = 0;
  for (const auto& c : j["cases"]) {
    const auto& t = j["templates"][c["template"].get<std::string>()];
    const auto tmpl = ChatTemplate::from_string(t["template"], t["bos"], t["eos"], "test");
    EXPECT_EQ(tmpl.family(), t["family"].get<std::string>());
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"]) msgs.push_back({m["role"], m["content"]});
    const bool gen = c["add_generation_prompt"];
    if (c.contains("error")) {
      EXPECT_THROW(tmpl.render(msgs, gen), Error) << c.dump();
      ++errors;
    } else {
      EXPECT_EQ(tmpl.render(msgs, gen), c["expected"].get<std::string>()) << c.dump();
    }
    ++n;
  }
  EXPECT_GE(n - errors, 30u);
  std::printf("%zu renderings (%zu expected errors), jinja2 %s\n", n, errors,
              j["version"].get<std::string>().c_str());
}

TEST(ChatTemplate, DefaultModel) {
  const std::string model = src("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "default model absent";
  auto f = GgufFile::open(model);
  const auto t = ChatTemplate::from_gguf(*f);
  EXPECT_EQ(t.family(), "chatml");
  // The template committed as the SmolLM2 reference is this model's.
  std::ifstream tf(src("tests/data/chat_templates/HuggingFaceTB-SmolLM2-135M-Instruct.jinja"));
  const std::string committed((std::istreambuf_iterator<char>(tf)),
                              std::istreambuf_iterator<char>());
  EXPECT_EQ(t.source(), committed);
  EXPECT_EQ(t.render({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate::from_gguf(*f, "llama3").family(), "llama3");
  EXPECT_THROW(ChatTemplate::from_gguf(*f, "vicuna"), Error);
}

TEST(ChatTemplate, UnsupportedNamesTheModelAndTheConstruct) {
  try {
    ChatTemplate::from_string("{% include 'other.jinja' %}", "", "", "MyModel-7B");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kModelFormat);
    EXPECT_NE(e.message().find("MyModel-7B"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("include"), std::string::npos) << e.message();
  }
  EXPECT_THROW(ChatTemplate::from_string("", "", "", "NoTemplate"), Error);
  EXPECT_EQ(ChatTemplate::from_string("", "<s>", "</s>", "x", "mistral").family(), "mistral");
  // An override may also be a template of its own.
  const auto t = ChatTemplate::from_string("", "", "", "x", "{{ messages[0].content }}!");
  EXPECT_EQ(t.render({{"user", "hi"}}, true), "hi!");
}

}  // namespace
