// model/hf_folder.cpp — a Hugging Face folder's tokenizer and generation
// defaults (see hf_folder.h).
#include "model/hf_folder.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/check.h"

namespace kvasir {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// DIR/NAME parsed, or null when the file is absent. Throws naming the file.
json read_json(const fs::path& dir, const char* name) {
  const fs::path p = dir / name;
  if (!fs::exists(p)) return json();
  std::ifstream in(p, std::ios::binary);
  KV_CHECK_CODE(in.good(), ErrorCode::kModelFormat, "cannot open {}", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json j = json::parse(ss.str());
    KV_CHECK_CODE(j.is_object(), ErrorCode::kModelFormat, "{}: not a JSON object", p.string());
    return j;
  } catch (const json::exception& e) {
    KV_FAIL_CODE(ErrorCode::kModelFormat, "{}: not valid JSON ({})", p.string(), e.what());
  }
}

// A number-valued key; unset when absent or null.
std::optional<double> number(const json& j, const char* key, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  KV_CHECK_CODE(it->is_number(), ErrorCode::kModelFormat, "{}: {} must be a number, not {}", file,
                key, it->dump());
  return it->get<double>();
}

// eos_token_id: one id or a list of ids.
std::vector<int32_t> eos_ids(const json& j, const std::string& file) {
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  const json list = it->is_array() ? *it : json::array({*it});
  std::vector<int32_t> ids;
  for (const json& id : list) {
    KV_CHECK_CODE(
        id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t(1) << 30),
        ErrorCode::kModelFormat, "{}: eos_token_id {} is not a token id", file, id.dump());
    ids.push_back(int32_t(id.get<int64_t>()));
  }
  return ids;
}

// A special token's text in tokenizer_config.json: a string or an
// AddedToken object {"content": ...}; "" when absent.
std::string special_text(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return "";
}

// tokenizer_config.json's bos/eos and add_* flags applied to `d`.
void apply_tokenizer_config(const json& cfg, const Tokenizer& tok, TokenizerData& d) {
  if (cfg.is_null()) return;
  if (int32_t id = tok.find_token(special_text(cfg, "bos_token")); id >= 0) d.bos = id;
  if (int32_t id = tok.find_token(special_text(cfg, "eos_token")); id >= 0) d.eos = id;
  if (auto it = cfg.find("add_bos_token"); it != cfg.end() && it->is_boolean())
    d.add_bos = it->get<bool>();
  if (auto it = cfg.find("add_eos_token"); it != cfg.end() && it->is_boolean())
    d.add_eos = it->get<bool>();
}

}  // namespace

GenerationDefaults read_generation_config(const std::string& dir) {
  GenerationDefaults g;
  const json j = read_json(dir, "generation_config.json");
  if (j.is_null()) return g;
  const std::string file = (fs::path(dir) / "generation_config.json").string();
  auto as_float = [](std::optional<double> v) {
    return v ? std::optional<float>(float(*v)) : std::nullopt;
  };
  g.temperature = as_float(number(j, "temperature", file));
  g.top_p = as_float(number(j, "top_p", file));
  g.min_p = as_float(number(j, "min_p", file));
  g.repetition_penalty = as_float(number(j, "repetition_penalty", file));
  if (auto k = number(j, "top_k", file)) {
    KV_CHECK_CODE(*k == double(int64_t(*k)) && *k >= -1 && *k < 2147483647.0,
                  ErrorCode::kModelFormat, "{}: top_k must be an integer >= -1, not {}", file, *k);
    g.top_k = int32_t(*k);
  }
  g.eos_ids = eos_ids(j, file);
  return g;
}

std::unique_ptr<Tokenizer> hf_folder_tokenizer(const std::string& dir) {
  const fs::path path = fs::path(dir) / "tokenizer.json";
  KV_CHECK_CODE(fs::exists(path), ErrorCode::kModelFormat,
                "{} is missing: a model folder needs its tokenizer", path.string());
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::from_hf_json(path.string());
  } catch (const Error& e) {  // its messages name the file
    KV_FAIL_CODE(ErrorCode::kModelFormat, "{}", e.message());
  }
  const json cfg = read_json(dir, "tokenizer_config.json");
  const GenerationDefaults gen = read_generation_config(dir);
  TokenizerData d = tok->data();
  apply_tokenizer_config(cfg, *tok, d);
  for (int32_t id : gen.eos_ids) {
    KV_CHECK_CODE(id < tok->vocab_size(), ErrorCode::kModelFormat,
                  "{}/generation_config.json: eos_token_id {} is past the vocabulary ({} tokens)",
                  dir, id, tok->vocab_size());
    d.eog_ids.push_back(id);
  }
  if (d.eos < 0 && !gen.eos_ids.empty()) d.eos = gen.eos_ids.front();
  d.name = fs::path(dir).filename().string();
  return Tokenizer::from_data(std::move(d));
}

}  // namespace kvasir
