// tests/support/tiny_tokenizer.cpp — the tiny model's tokenizer as a
// Hugging Face folder holds it (write_tiny_hf_tokenizer, tiny_model.h).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "tests/support/tiny_model.h"

namespace kvasir::test {
namespace {

using json = nlohmann::ordered_json;

void write_json(const std::filesystem::path& p, const json& j) {
  std::ofstream out(p, std::ios::binary);
  out << j.dump(2);
  KV_CHECK(out.good(), "cannot write {}", p.string());
}

// tokenizer.json as the tokenizers library writes a SmolLM2-style
// byte-level BPE: the 256 byte tokens in the vocabulary, the rest added.
json tokenizer_json(const TinySpec& s) {
  json vocab = json::object();
  const std::vector<std::string> bytes = gpt2_byte_tokens();
  for (size_t i = 0; i < bytes.size(); ++i) vocab[bytes[i]] = i;
  std::vector<std::string> added = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int i = 0; int(bytes.size() + added.size()) < s.vocab; ++i)
    added.push_back("<extra_" + std::to_string(i) + ">");
  json added_tokens = json::array();
  for (size_t i = 0; i < added.size(); ++i)
    added_tokens.push_back({{"id", bytes.size() + i},
                            {"content", added[i]},
                            {"single_word", false},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"normalized", false},
                            {"special", true}});
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added_tokens},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}}},
          {"post_processor", byte_level},
          {"decoder",
           {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", json::array()}}}};
}

}  // namespace

void write_tiny_hf_tokenizer(const std::string& dir, const TinySpec& s,
                             const std::string& generation) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  write_json(fs::path(dir) / "tokenizer.json", tokenizer_json(s));
  write_json(fs::path(dir) / "tokenizer_config.json", {{"add_bos_token", false},
                                                       {"add_prefix_space", false},
                                                       {"bos_token", "<|im_start|>"},
                                                       {"eos_token", "<|im_end|>"},
                                                       {"pad_token", "<|endoftext|>"},
                                                       {"model_max_length", s.ctx},
                                                       {"tokenizer_class", "GPT2Tokenizer"},
                                                       {"chat_template", kTinyChatTemplate}});
  write_json(fs::path(dir) / "generation_config.json", json::parse(generation));
}

}  // namespace kvasir::test
