// model/safetensors.cpp — see safetensors.h for what is checked and why.
#include "model/safetensors.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace kvasir {
namespace {

struct StDType {
  const char* name;
  DType type;
  uint64_t bytes;
};
constexpr StDType kSupported[] = {{"F32", DType::F32, 4},
                                  {"F16", DType::F16, 2},
                                  {"BF16", DType::BF16, 2},
                                  {"F8_E4M3", DType::F8_E4M3, 1},
                                  {"U8", DType::U8, 1}};
constexpr const char* kKnownUnsupported[] = {"F64", "I64", "I32", "I16",  "I8",
                                             "U16", "U32", "U64", "BOOL", "F8_E5M2"};

const StDType& parse_dtype(const std::string& path, const std::string& name,
                           const nlohmann::json& d) {
  KV_CHECK(d.is_string(), "{}: tensor '{}': 'dtype' must be a string", path, name);
  const auto s = d.get<std::string>();
  for (const auto& t : kSupported)
    if (s == t.name) return t;
  for (const char* u : kKnownUnsupported)
    KV_CHECK(s != u,
             "{}: tensor '{}': dtype {} is not supported (Kvasir reads F32, F16, BF16, F8_E4M3, "
             "U8)",
             path, name, s);
  KV_FAIL("{}: tensor '{}': unknown dtype '{}'", path, name, s);
}

uint64_t json_u64(const std::string& path, const std::string& name, const char* field,
                  const nlohmann::json& v) {
  KV_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
           "{}: tensor '{}': '{}' must hold non-negative integers, found {}", path, name, field,
           v.dump());
  return v.get<uint64_t>();
}

}  // namespace

namespace {

// The JSON header (n bytes at hdr): an object naming each tensor once.
nlohmann::json parse_header(const std::string& path, const char* hdr, uint64_t n) {
  // Counts the top-level keys as they are parsed: nlohmann keeps only the last
  // of duplicate keys, so a count larger than the object's size means a duplicate.
  size_t n_keys = 0;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(
        hdr, hdr + n,
        [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json&) {
          if (depth == 1 && ev == nlohmann::json::parse_event_t::key) ++n_keys;
          return true;
        },
        /*allow_exceptions=*/true);
  } catch (const nlohmann::json::exception& e) {
    KV_FAIL("{}: header is not valid JSON: {}", path, e.what());
  }
  KV_CHECK(j.is_object(), "{}: header must be a JSON object, found {}", path, j.type_name());
  KV_CHECK(n_keys == j.size(), "{}: header names a tensor twice", path);
  return j;
}

// One tensor's entry: dtype, shape (its byte size within 64 bits) and
// data_offsets inside the data_size-byte data area that starts at `data`.
SafeTensor read_entry(const std::string& path, const std::string& name, const nlohmann::json& t,
                      const uint8_t* data, uint64_t data_size) {
  KV_CHECK(t.is_object(), "{}: tensor '{}': entry must be an object", path, name);
  auto field = [&](const char* key) -> const nlohmann::json& {
    auto it = t.find(key);
    KV_CHECK(it != t.end(), "{}: tensor '{}': '{}' is missing", path, name, key);
    return *it;
  };
  SafeTensor st;
  st.name = name;
  const StDType& dt = parse_dtype(path, name, field("dtype"));
  const nlohmann::json& shape = field("shape");
  KV_CHECK(shape.is_array(), "{}: tensor '{}': 'shape' must be an array", path, name);
  KV_CHECK(shape.size() <= 4, "{}: tensor '{}': {} dimensions, Kvasir reads at most 4", path, name,
           shape.size());
  // Every product of dimensions must fit int64 (TensorView::rows() multiplies
  // some of them): the product of the non-zero ones bounds them all. A zero
  // dimension makes the element count 0 but not [2^32, 2^32, 0]'s rows.
  int64_t nonzero = 1;
  for (const auto& d : shape) {
    const uint64_t v = json_u64(path, name, "shape", d);
    KV_CHECK(v <= uint64_t(std::numeric_limits<int64_t>::max()) &&
                 (v == 0 || !__builtin_mul_overflow(nonzero, int64_t(v), &nonzero)),
             "{}: tensor '{}': element count of shape {} overflows int64", path, name,
             shape.dump());
    st.shape.push_back(int64_t(v));
  }
  uint64_t elems = 1;
  for (int64_t v : st.shape) elems *= uint64_t(v);  // at most `nonzero`: no overflow
  uint64_t bytes;
  KV_CHECK(!__builtin_mul_overflow(elems, dt.bytes, &bytes),
           "{}: tensor '{}': byte size of shape {} overflows 64 bits", path, name, shape.dump());
  const nlohmann::json& offs = field("data_offsets");
  KV_CHECK(offs.is_array() && offs.size() == 2,
           "{}: tensor '{}': 'data_offsets' must be [begin, end]", path, name);
  const uint64_t begin = json_u64(path, name, "data_offsets", offs[0]);
  const uint64_t end = json_u64(path, name, "data_offsets", offs[1]);
  KV_CHECK(begin <= end, "{}: tensor '{}': data_offsets [{}, {}] are reversed", path, name, begin,
           end);
  KV_CHECK(end <= data_size,
           "{}: tensor '{}': data_offsets [{}, {}] run past the {}-byte data area", path, name,
           begin, end, data_size);
  KV_CHECK(end - begin == bytes,
           "{}: tensor '{}': data_offsets span {} bytes but shape {} of {} needs {}", path, name,
           end - begin, shape.dump(), dt.name, bytes);

  st.view.type = dt.type;
  st.view.n_dims = st.shape.empty() ? 1 : int(st.shape.size());
  for (size_t i = 0; i < st.shape.size(); ++i) st.view.ne[i] = st.shape[st.shape.size() - 1 - i];
  st.view.data = data + begin;
  st.view.nbytes = bytes;
  return st;
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->file_ = MappedFile::open(path);
  const uint8_t* base = f->file_->data();
  const uint64_t size = f->file_->size();
  KV_CHECK(size >= 8, "{}: truncated file: {} bytes, the header length alone needs 8", path, size);
  uint64_t n;
  std::memcpy(&n, base, 8);
  KV_CHECK(n <= kMaxHeaderBytes, "{}: header length is {} bytes, more than the {} allowed", path, n,
           kMaxHeaderBytes);
  KV_CHECK(n <= size - 8, "{}: header length {} runs past the end of the {}-byte file", path, n,
           size);
  const char* hdr = reinterpret_cast<const char*>(base + 8);

  const nlohmann::json j = parse_header(path, hdr, n);

  const uint8_t* data = base + 8 + n;
  const uint64_t data_size = size - 8 - n;
  f->tensors_.reserve(j.size());
  for (const auto& item : j.items()) {
    const std::string& name = item.key();
    const nlohmann::json& t = item.value();
    if (name == "__metadata__") {
      KV_CHECK(t.is_object(), "{}: '__metadata__' must be an object", path);
      continue;
    }
    SafeTensor st = read_entry(path, name, t, data, data_size);
    f->index_.emplace(name, f->tensors_.size());
    f->tensors_.push_back(std::move(st));
  }
  return f;
}

const SafeTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// "model.layers.N." + rest → (N, rest); nullopt for another prefix or a
// layer number that is not plain decimal (one spelling per layer).
std::optional<std::pair<std::string_view, std::string_view>> split_layer(std::string_view hf) {
  constexpr std::string_view prefix = "model.layers.";
  if (hf.substr(0, prefix.size()) != prefix) return std::nullopt;
  hf.remove_prefix(prefix.size());
  size_t digits = 0;
  while (digits < hf.size() && hf[digits] >= '0' && hf[digits] <= '9') ++digits;
  if (digits == 0 || digits > 6 || digits >= hf.size() || hf[digits] != '.') return std::nullopt;
  if (digits > 1 && hf[0] == '0') return std::nullopt;
  return std::make_pair(hf.substr(0, digits), hf.substr(digits + 1));
}

}  // namespace

std::optional<std::string> hf_to_gguf_name(std::string_view hf) {
  // An FP8 weight's scale follows its weight's name: <gguf name>_scale.
  constexpr std::string_view kScale = "_scale";
  if (hf.size() > kScale.size() && hf.substr(hf.size() - kScale.size()) == kScale &&
      hf.substr(0, hf.size() - kScale.size()).ends_with(".weight")) {
    const auto w = hf_to_gguf_name(hf.substr(0, hf.size() - kScale.size()));
    return w ? std::optional<std::string>(*w + std::string(kScale)) : std::nullopt;
  }
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const auto split = split_layer(hf);
  if (!split) return std::nullopt;
  const auto [layer, rest] = *split;
  static constexpr std::pair<std::string_view, std::string_view> kMap[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},  // Qwen3
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},        // Gemma 3 (model_file.cpp
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},  // renames its post-attn)
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},                       // Qwen MoE router
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},          // Mixtral router
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},  // Qwen2-MoE
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
      {"self_attn.o_proj.bias", "attn_output.bias"},  // gpt-oss
      {"self_attn.sinks", "attn_sinks.weight"},       // gpt-oss
      {"mlp.router.weight", "ffn_gate_inp.weight"},   // gpt-oss router
      {"mlp.router.bias", "ffn_gate_inp.bias"},
      {"mlp.experts.down_proj_bias", "ffn_down_exps.bias"},  // [E, hidden], as GGUF's stack
  };
  for (const auto& [from, to] : kMap)
    if (rest == from) return "blk." + std::string(layer) + "." + std::string(to);
  return std::nullopt;
}

std::optional<HfExpertName> hf_expert_name(std::string_view hf) {
  const auto split = split_layer(hf);
  if (!split) return std::nullopt;
  auto [layer, rest] = *split;
  static constexpr std::string_view kQwen = "mlp.experts.", kMixtral = "block_sparse_moe.experts.";
  // The matrix names after "experts.E.", per family.
  static constexpr std::pair<std::string_view, std::string_view> kQwenMats[] = {
      {"gate_proj.weight", "ffn_gate_exps.weight"},
      {"up_proj.weight", "ffn_up_exps.weight"},
      {"down_proj.weight", "ffn_down_exps.weight"}};
  static constexpr std::pair<std::string_view, std::string_view> kMixtralMats[] = {
      {"w1.weight", "ffn_gate_exps.weight"},
      {"w3.weight", "ffn_up_exps.weight"},
      {"w2.weight", "ffn_down_exps.weight"}};
  const std::pair<std::string_view, std::string_view>* mats;
  if (rest.substr(0, kQwen.size()) == kQwen) {
    rest.remove_prefix(kQwen.size());
    mats = kQwenMats;
  } else if (rest.substr(0, kMixtral.size()) == kMixtral) {
    rest.remove_prefix(kMixtral.size());
    mats = kMixtralMats;
  } else {
    return std::nullopt;
  }
  size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  if (digits == 0 || digits > 6 || digits >= rest.size() || rest[digits] != '.')
    return std::nullopt;
  if (digits > 1 && rest[0] == '0') return std::nullopt;
  const int32_t expert = int32_t(std::stol(std::string(rest.substr(0, digits))));
  rest.remove_prefix(digits + 1);
  for (int i = 0; i < 3; ++i)
    if (rest == mats[i].first)
      return HfExpertName{"blk." + std::string(layer) + "." + std::string(mats[i].second), expert};
  return std::nullopt;
}

std::optional<GptOssExpertPart> hf_gpt_oss_expert_part(std::string_view hf) {
  const auto split = split_layer(hf);
  if (!split) return std::nullopt;
  const auto [layer, rest] = *split;
  static constexpr std::pair<std::string_view, GptOssExpertPart::Kind> kParts[] = {
      {"mlp.experts.gate_up_proj_blocks", GptOssExpertPart::kGateUpBlocks},
      {"mlp.experts.gate_up_proj_scales", GptOssExpertPart::kGateUpScales},
      {"mlp.experts.gate_up_proj_bias", GptOssExpertPart::kGateUpBias},
      {"mlp.experts.down_proj_blocks", GptOssExpertPart::kDownBlocks},
      {"mlp.experts.down_proj_scales", GptOssExpertPart::kDownScales},
      {"mlp.experts.gate_up_proj", GptOssExpertPart::kUnquantised},
      {"mlp.experts.down_proj", GptOssExpertPart::kUnquantised}};
  for (const auto& [name, kind] : kParts)
    if (rest == name) return GptOssExpertPart{int32_t(std::stol(std::string(layer))), kind};
  return std::nullopt;
}

}  // namespace kvasir
