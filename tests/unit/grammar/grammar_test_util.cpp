// tests/unit/grammar/grammar_test_util.cpp — tokenizers, the random walk and
// the JSON Schema validator of the grammar tests.
#include "grammar_test_util.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <regex>
#include <stdexcept>

#include "model/gguf.h"

namespace kvasir::grammar::testing {
namespace {

std::unique_ptr<TestVocab> load(std::string name, const std::string& path) {
  auto v = std::make_unique<TestVocab>();
  v->name = std::move(name);
  auto file = GgufFile::open(path);
  v->tokenizer = Tokenizer::from_gguf(*file);
  v->vocab = Vocabulary::from_tokenizer(*v->tokenizer);
  return v;
}

std::string src(const std::string& rel) {
  return std::string(KVASIR_SOURCE_DIR) + "/" + rel;
}

bool has_punctuation(const std::string& bytes) {
  return bytes.find_first_of("{}[],:\"") != std::string::npos;
}

}  // namespace

std::string model_path() {
  return src("models/SmolLM2-135M-Instruct.Q4_1.gguf");
}

const TestVocab* default_vocab() {
  static const std::unique_ptr<TestVocab> v =
      std::filesystem::exists(model_path()) ? load("smollm2", model_path()) : nullptr;
  return v.get();
}

const std::vector<const TestVocab*>& tiny_vocabs() {
  static const std::vector<std::unique_ptr<TestVocab>> owned = [] {
    std::vector<std::unique_ptr<TestVocab>> o;
    for (const char* n : {"llama3", "qwen2", "spm"})
      o.push_back(load(std::string("tiny_") + n, src("tests/data/tokenizer/tiny_") + n + ".gguf"));
    return o;
  }();
  static const std::vector<const TestVocab*> views = [] {
    std::vector<const TestVocab*> v;
    for (const auto& o : owned) v.push_back(o.get());
    return v;
  }();
  return views;
}

int walk_scale() {
  const char* env = std::getenv("KVASIR_GRAMMAR_WALKS");
  return std::max(1, env != nullptr ? std::atoi(env) : 1);
}

std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& mask, int32_t vocab_size) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_size; ++id)
    if ((mask[id / 32] >> (id % 32)) & 1) ids.push_back(id);
  return ids;
}

Walk random_walk(Matcher& m, const Vocabulary& v, uint64_t seed, size_t cap) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coin(0, 1);
  auto pick = [&](const std::vector<int32_t>& from) {
    return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
  };
  Walk w;
  std::vector<uint32_t> mask(m.mask_words());
  std::vector<int32_t> stops, punct, any;
  while (!m.is_terminated() && w.ids.size() < cap) {
    m.fill_next_token_bitmask(mask);
    stops.clear(), punct.clear(), any.clear();
    for (int32_t id : allowed_ids(mask, v.size())) {
      const std::string& b = v.token_bytes(id);
      (b.empty() ? stops : has_punctuation(b) ? punct : any).push_back(id);
    }
    if (stops.empty() && punct.empty() && any.empty()) {
      w.error = "no token is allowed";
      return w;
    }
    const int32_t refused = std::uniform_int_distribution<int32_t>(0, v.size() - 1)(rng);
    if (!((mask[refused / 32] >> (refused % 32)) & 1) && m.accept(refused)) {
      w.error = "token " + std::to_string(refused) + " is masked out but was accepted";
      return w;
    }
    int32_t id;
    if (!stops.empty() && (coin(rng) < 0.7 || (punct.empty() && any.empty())))
      id = pick(stops);
    else if (!punct.empty() && (any.empty() || coin(rng) < 0.5))
      id = pick(punct);
    else
      id = pick(any);
    if (!m.accept(id)) {
      w.error = "token " + std::to_string(id) + " is allowed by the mask but was refused";
      return w;
    }
    w.ids.push_back(id);
    w.text += v.token_bytes(id);
  }
  w.terminated = m.is_terminated();
  return w;
}

}  // namespace kvasir::grammar::testing
