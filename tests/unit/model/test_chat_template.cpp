// Chat template tests: byte-for-byte against jinja2 renderings of the default
// model's own template and of the Llama 3 / Llama 2 / Mistral templates
// (the earlier references; tests/unit/model/test_jinja_refs.cpp has the
// real templates of the major families).
#include <gtest/gtest.h>
#include <unistd.h>

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

namespace {

// A Hugging Face folder: chat_template.jinja wins over tokenizer_config.json,
// whose chat_template may be a string or a list of named templates, and
// whose bos/eos tokens may be strings or {"content": ...}.
TEST(ChatTemplate, FromHfDir) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvasir_hf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const char* name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  write("tokenizer_config.json", R"({"bos_token": {"content": "<B>"}, "eos_token": "<E>",
      "chat_template": [{"name": "tool_use", "template": "tools"},
                        {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}]})");
  EXPECT_EQ(ChatTemplate::from_hf_dir(dir.string()).render({{"user", "hi"}}, false), "<B>hi<E>");
  write("tokenizer_config.json",
        R"({"bos_token": "<B>", "chat_template": "[{{ messages[0].content }}]"})");
  EXPECT_EQ(ChatTemplate::from_hf_dir(dir.string()).render({{"user", "hi"}}, false), "[hi]");
  write("chat_template.jinja", "file:{{ messages[0].content }}\n");
  EXPECT_EQ(ChatTemplate::from_hf_dir(dir.string()).render({{"user", "hi"}}, false), "file:hi");
  std::filesystem::remove(dir / "chat_template.jinja");
  write("tokenizer_config.json", R"({"bos_token": "<B>"})");
  EXPECT_THROW(ChatTemplate::from_hf_dir(dir.string()), Error);
  write("tokenizer_config.json", "{not json");
  EXPECT_THROW(ChatTemplate::from_hf_dir(dir.string()), Error);
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, ApplyChecksItsInput) {
  const auto t = ChatTemplate::from_string("{{ messages|length }}{{ x }}", "", "", "m");
  ChatInput in;
  in.kwargs = {{"x", "!"}};
  EXPECT_EQ(t.apply(in).text(), "0!");
  in.kwargs = {{"bos_token", "<forged>"}};
  EXPECT_THROW(t.apply(in), Error);
  in.kwargs = nlohmann::ordered_json::array();
  EXPECT_THROW(t.apply(in), Error);
  in.kwargs = nlohmann::ordered_json::object();
  in.messages = "not a list";
  EXPECT_THROW(t.apply(in), Error);
  in.messages = nlohmann::ordered_json::array();
  in.tools = {{"type", "function"}};
  EXPECT_THROW(t.apply(in), Error);
  // A limit reached is an error too.
  ChatInput big;
  big.messages.push_back({{"role", "user"}, {"content", std::string(100, 'x')}});
  jinja::Limits l;
  l.max_output = 10;
  EXPECT_THROW(ChatTemplate::from_string("{{ messages[0].content }}", "", "", "m").apply(big, l),
               Error);
}

}  // namespace
