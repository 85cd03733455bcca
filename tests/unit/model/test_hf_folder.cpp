// A Hugging Face folder's tokenizer, chat template and generation defaults
// (model/hf_folder.h) against the GGUF file of the same tiny model: the
// folder must encode, decode, end generations and render chats as the GGUF
// file does, and a folder whose tokenizer cannot be read is refused naming
// the file.
#include <gtest/gtest.h>

#include <fstream>

#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/hf_folder.h"
#include "model/tokenizer.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

using test::TempDir;

struct Pair {
  TempDir dir;
  std::unique_ptr<GgufFile> gguf;
  std::string folder;
  explicit Pair(const std::string& generation = "{}") {
    const test::TinySpec s;
    test::write_tiny_gguf(dir.file("tiny.gguf"), s);
    folder = dir.file("hf");
    test::write_tiny_hf_tokenizer(folder, s, generation);
    gguf = GgufFile::open(dir.file("tiny.gguf"));
  }
};

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(HfFolder, TokenizerMatchesTheGgufFiles) {
  Pair p;
  auto hf = hf_folder_tokenizer(p.folder);
  auto gg = Tokenizer::from_gguf(*p.gguf);
  ASSERT_EQ(hf->vocab_size(), gg->vocab_size());
  EXPECT_EQ(hf->bos_id(), test::kTinyBos);
  EXPECT_EQ(hf->eos_id(), test::kTinyEos);
  EXPECT_EQ(hf->add_bos(), gg->add_bos());
  for (const char* text : {"Hello, world! 12345 héllo\n\n  x",
                           "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"}) {
    EXPECT_EQ(hf->encode(text), gg->encode(text)) << text;
    EXPECT_EQ(hf->decode(hf->encode(text)), text);
  }
  for (int32_t id = 0; id < hf->vocab_size(); ++id) {
    EXPECT_EQ(hf->is_eog(id), gg->is_eog(id)) << id;
    EXPECT_EQ(hf->is_special(id), gg->is_special(id)) << id;
  }
}

TEST(HfFolder, ChatTemplateRendersAsTheGgufFiles) {
  Pair p;
  const std::vector<ChatMessage> chat = {{"system", "Be brief."}, {"user", "Hi 2 you"}};
  const auto hf = ChatTemplate::from_hf_dir(p.folder);
  EXPECT_EQ(hf.render(chat, true), ChatTemplate::from_gguf(*p.gguf).render(chat, true));
  // transformers 5 writes the template to chat_template.jinja; that file wins.
  write(p.folder + "/chat_template.jinja", "{{ bos_token }}only{{ eos_token }}");
  EXPECT_EQ(ChatTemplate::from_hf_dir(p.folder).render(chat, true), "<|im_start|>only<|im_end|>");
}

TEST(HfFolder, GenerationConfigGivesDefaultsAndEndIds) {
  Pair p(R"({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
             "repetition_penalty": 1.1, "do_sample": true, "eos_token_id": [258, 260]})");
  const GenerationDefaults g = read_generation_config(p.folder);
  EXPECT_FLOAT_EQ(g.temperature.value(), 0.6f);
  EXPECT_FLOAT_EQ(g.top_p.value(), 0.9f);
  EXPECT_EQ(g.top_k.value(), 20);
  EXPECT_FLOAT_EQ(g.min_p.value(), 0.05f);
  EXPECT_FLOAT_EQ(g.repetition_penalty.value(), 1.1f);
  EXPECT_EQ(g.eos_ids, (std::vector<int32_t>{258, 260}));
  auto tok = hf_folder_tokenizer(p.folder);
  EXPECT_TRUE(tok->is_eog(260));  // <extra_1>: an end only because the file says so
  EXPECT_FALSE(tok->is_eog(261));
  EXPECT_EQ(tok->eos_id(), test::kTinyEos);
}

TEST(HfFolder, AbsentGenerationConfigLeavesEverythingUnset) {
  Pair p;
  std::filesystem::remove(p.folder + "/generation_config.json");
  const GenerationDefaults g = read_generation_config(p.folder);
  EXPECT_FALSE(g.temperature || g.top_p || g.top_k || g.min_p || g.repetition_penalty);
  EXPECT_TRUE(g.eos_ids.empty());
  write(p.folder + "/generation_config.json", R"({"temperature": null, "eos_token_id": 258})");
  EXPECT_FALSE(read_generation_config(p.folder).temperature);
  EXPECT_EQ(read_generation_config(p.folder).eos_ids, std::vector<int32_t>{258});
}

TEST(HfFolder, BadGenerationConfigIsRefusedNamingTheFileAndKey) {
  Pair p(R"({"temperature": "hot"})");
  test::expect_error([&] { read_generation_config(p.folder); },
                     {"generation_config.json", "temperature"});
  write(p.folder + "/generation_config.json", R"({"eos_token_id": [258, 99999]})");
  test::expect_error([&] { hf_folder_tokenizer(p.folder); }, {"generation_config.json", "99999"});
  write(p.folder + "/generation_config.json", "{not json");
  test::expect_error([&] { read_generation_config(p.folder); },
                     {"generation_config.json", "not valid JSON"});
}

TEST(HfFolder, UnreadableTokenizerIsRefusedNamingTheFile) {
  Pair p;
  write(p.folder + "/tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": ");
  try {
    hf_folder_tokenizer(p.folder);
    ADD_FAILURE() << "a corrupt tokenizer.json was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kModelFormat);
    EXPECT_NE(e.message().find(p.folder + "/tokenizer.json"), std::string::npos) << e.message();
  }
  std::filesystem::remove(p.folder + "/tokenizer.json");
  test::expect_error([&] { hf_folder_tokenizer(p.folder); }, {"tokenizer.json", "missing"});
  Pair q;
  write(q.folder + "/tokenizer_config.json", "[1,");
  test::expect_error([&] { hf_folder_tokenizer(q.folder); }, {"tokenizer_config.json"});
}

}  // namespace
}  // namespace kvasir
