// hf_from_gguf IN.gguf OUT_F32.gguf OUT_DIR — a dense Llama-family GGUF
// model (the default SmolLM2) written twice with the same dequantised
// weights: as an all-F32 GGUF file (every metadata value copied) and as
// the Hugging Face folder transformers would write for it (config.json,
// an F32 model.safetensors with q/k rows back in rotate-half order,
// tokenizer.json, tokenizer_config.json with the chat template,
// generation_config.json). The two then hold one model, so the daemon must
// give the same greedy text from either (tests/integration/test_hf_folder.sh).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "base/check.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/model_file.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quant.h"
#include "tests/support/tiny_model.h"

namespace kvasir::test {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// One metadata value as the writer stores it (arrays by their raw span).
void copy_value(GgufWriter& w, const std::string& key, const GgufValue& v) {
  switch (v.type) {
    case GgufType::STRING:
      w.add_string(key, std::get<std::string_view>(v.v));
      return;
    case GgufType::ARRAY: {
      const GgufArray& a = std::get<GgufArray>(v.v);
      if (a.elem == GgufType::STRING) {
        w.add_string_array(key, {a.strings.begin(), a.strings.end()});
        return;
      }
      w.add_raw(key, GgufType::ARRAY,
                GgufWriter::encode_array(a.elem, a.count, Bytes(a.data, a.data + a.nbytes)));
      return;
    }
    case GgufType::BOOL:
      w.add_bool(key, v.as_bool(key));
      return;
    case GgufType::F32:
      w.add_f32(key, float(v.as_float(key)));
      return;
    case GgufType::F64:
      w.add_f64(key, v.as_float(key));
      return;
    case GgufType::U32:
      w.add_u32(key, uint32_t(v.as_uint(key)));
      return;
    case GgufType::I32:
      w.add_i32(key, int32_t(v.as_int(key)));
      return;
    case GgufType::U64:
      w.add_u64(key, v.as_uint(key));
      return;
    case GgufType::I64:
      w.add_i64(key, v.as_int(key));
      return;
    default:
      KV_FAIL("{}: metadata type {} is not copied", key, GgufFile::type_name(v.type));
  }
}

Bytes f32_bytes(const std::vector<float>& x) {
  Bytes b(x.size() * 4);
  std::memcpy(b.data(), x.data(), b.size());
  return b;
}

// The HF name of a dense Llama tensor's GGUF name.
std::string hf_name(const std::string& g) {
  static const std::map<std::string, std::string> kTop = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  if (auto it = kTop.find(g); it != kTop.end()) return it->second;
  std::smatch m;
  static const std::regex kRe(R"(blk\.(\d+)\.(\w+)\.weight)");
  KV_CHECK(std::regex_match(g, m, kRe) && kLayer.count(m[2].str()),
           "tensor {} has no Hugging Face name here (dense Llama only)", g);
  return "model.layers." + m[1].str() + "." + kLayer.at(m[2].str()) + ".weight";
}

json config_json(const ModelConfig& c) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", c.hidden},
          {"intermediate_size", c.ffn},
          {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.n_kv_heads},
          {"head_dim", c.head_dim},
          {"num_hidden_layers", c.n_layers},
          {"vocab_size", c.vocab},
          {"max_position_embeddings", c.context_length},
          {"rope_theta", c.rope_theta},
          {"rms_norm_eps", c.rms_eps},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", c.tied_embeddings},
          {"torch_dtype", "float32"}};
}

// Every tensor, dequantised: into the F32 GGUF as stored, into the folder
// under its HF name with q/k rows un-permuted.
void write_weights(const GgufFile& in, const ModelConfig& c, GgufWriter& w,
                   const std::string& dir) {
  json header = {{"__metadata__", {{"format", "pt"}}}};
  Bytes data;
  for (const GgufTensor& t : in.tensors()) {
    std::vector<float> x = dequantize(t.view);
    const std::vector<int64_t> ne(t.view.ne, t.view.ne + t.view.n_dims);
    w.add_tensor(t.name, DType::F32, ne, f32_bytes(x));
    const int64_t cols = ne[0];
    if (t.name.ends_with("attn_q.weight")) x = unpermute_qk(x, c.n_heads, c.head_dim, cols);
    if (t.name.ends_with("attn_k.weight")) x = unpermute_qk(x, c.n_kv_heads, c.head_dim, cols);
    const Bytes b = f32_bytes(x);
    const uint64_t begin = data.size();
    data.insert(data.end(), b.begin(), b.end());
    header[hf_name(t.name)] = {{"dtype", "F32"},
                               {"shape", std::vector<int64_t>(ne.rbegin(), ne.rend())},
                               {"data_offsets", {begin, begin + b.size()}}};
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  write_safetensors_raw((fs::path(dir) / "model.safetensors").string(), text.size(), text, data);
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream(p, std::ios::binary) << j.dump(2);
}

// tokenizer.json and tokenizer_config.json from the GGUF tokenizer (a
// SmolLM2-style byte-level BPE), as the tokenizers library writes them.
void write_tokenizer(const GgufFile& in, const std::string& dir) {
  KV_CHECK(in.get("tokenizer.ggml.pre").as_string("pre") == "smollm",
           "only the smollm pre-tokenizer is written here");
  const auto& tokens = in.get("tokenizer.ggml.tokens").as_array("tokens").strings;
  const GgufArray& types = in.get("tokenizer.ggml.token_type").as_array("types");
  json vocab = json::object(), added = json::array(), merges = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[std::string(tokens[i])] = i;
    const int64_t type = types.int_at(i, "types");
    if (type == 3 || type == 4)
      added.push_back({{"id", i},
                       {"content", tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", type == 4},
                       {"special", type == 3}});
  }
  for (auto m : in.get("tokenizer.ggml.merges").as_array("merges").strings)
    merges.push_back(std::string(m));
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  write_json(fs::path(dir) / "tokenizer.json",
             {{"version", "1.0"},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers",
                 json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}}},
              {"post_processor", byte_level},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}}}});
  const uint64_t bos = in.get("tokenizer.ggml.bos_token_id").as_uint("bos");
  const uint64_t eos = in.get("tokenizer.ggml.eos_token_id").as_uint("eos");
  const GgufValue* add_bos = in.find("tokenizer.ggml.add_bos_token");
  write_json(fs::path(dir) / "tokenizer_config.json",
             {{"add_bos_token", add_bos && add_bos->as_bool("add_bos")},
              {"bos_token", tokens.at(bos)},
              {"eos_token", tokens.at(eos)},
              {"chat_template", in.get("tokenizer.chat_template").as_string("chat_template")}});
  write_json(fs::path(dir) / "generation_config.json",
             {{"bos_token_id", bos}, {"eos_token_id", eos}});
}

}  // namespace
}  // namespace kvasir::test

int main(int argc, char** argv) {
  using namespace kvasir;
  if (argc != 4) {
    std::fprintf(stderr, "usage: hf_from_gguf IN.gguf OUT_F32.gguf OUT_DIR\n");
    return 2;
  }
  try {
    auto in = GgufFile::open(argv[1]);
    const ModelConfig c = ModelFile::open(argv[1])->config();
    test::GgufWriter w;
    for (const auto& [key, value] : in->metadata())
      if (key != "general.file_type" && key != "general.alignment") test::copy_value(w, key, value);
    std::filesystem::create_directories(argv[3]);
    test::write_weights(*in, c, w, argv[3]);
    w.write(argv[2]);
    test::write_json(std::filesystem::path(argv[3]) / "config.json", test::config_json(c));
    test::write_tokenizer(*in, argv[3]);
  } catch (const Error& e) {
    std::fprintf(stderr, "hf_from_gguf: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
