// model/config.cpp — ModelConfig from GGUF metadata or HF config.json, and its
// validation. Every value read from a file is range-checked before it becomes
// an int32 the rest of the engine sizes buffers with.
#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/check.h"
#include "model/gguf.h"

namespace kvasir {

void ModelConfig::validate(const std::string& src) const {
  KV_CHECK(arch == "llama" || arch == "mistral" || arch == "qwen2",
           "{}: architecture '{}' is not supported (llama, mistral, qwen2)", src, arch);
  auto range = [&](const char* field, int64_t v, int64_t lo, int64_t hi) {
    KV_CHECK(v >= lo && v <= hi, "{}: {} is {}, must be in [{}, {}]", src, field, v, lo, hi);
  };
  range("n_layers", n_layers, 1, 4096);
  range("hidden", hidden, 1, 1 << 20);
  range("n_heads", n_heads, 1, 4096);
  range("n_kv_heads", n_kv_heads, 1, n_heads);
  KV_CHECK(n_heads % n_kv_heads == 0, "{}: n_kv_heads {} does not divide n_heads {}", src,
           n_kv_heads, n_heads);
  range("head_dim", head_dim, 2, 4096);
  KV_CHECK(head_dim % 2 == 0, "{}: head_dim {} must be even (rotary pairs)", src, head_dim);
  range("n_heads * head_dim", int64_t(n_heads) * head_dim, 1, 1 << 22);
  range("ffn", ffn, 1, 1 << 22);
  range("vocab", vocab, 1, 1 << 24);
  range("context_length", context_length, 1, 1 << 30);
  auto positive = [&](const char* field, float v) {
    KV_CHECK(std::isfinite(v) && v > 0.f, "{}: {} is {}, must be finite and > 0", src, field, v);
  };
  positive("rope_theta", rope_theta);
  positive("rms_eps", rms_eps);
  KV_CHECK(rms_eps < 1.f, "{}: rms_eps is {}, must be < 1", src, rms_eps);
  positive("rope_linear_factor", rope_linear_factor);
  KV_CHECK(std::isfinite(rope_llama3_factor) && rope_llama3_factor >= 0.f,
           "{}: rope_llama3_factor is {}, must be finite and >= 0", src, rope_llama3_factor);
  if (rope_llama3_factor > 0.f) {
    positive("rope_llama3_low_freq_factor", rope_llama3_low_freq_factor);
    positive("rope_llama3_high_freq_factor", rope_llama3_high_freq_factor);
    KV_CHECK(rope_llama3_high_freq_factor > rope_llama3_low_freq_factor,
             "{}: rope_llama3_high_freq_factor {} must exceed rope_llama3_low_freq_factor {}", src,
             rope_llama3_high_freq_factor, rope_llama3_low_freq_factor);
    range("rope_llama3_original_context", rope_llama3_original_context, 1, 1 << 30);
  }
}

uint64_t kv_block_bytes(const ModelConfig& m, int32_t n_layers, int32_t block_size,
                        int32_t elem_bytes) {
  return uint64_t(n_layers) * 2 * uint64_t(m.n_kv_heads) * uint64_t(block_size) *
         uint64_t(m.head_dim) * uint64_t(elem_bytes);
}

// ---------------------------------------------------------------- GGUF

namespace {

struct GgufKeys {
  const GgufFile& f;
  std::string arch;

  std::string k(const char* suffix) const { return arch + "." + suffix; }
  // Re-throws accessor errors with the file name in front.
  template <class Fn>
  auto with_path(Fn fn) const {
    try {
      return fn();
    } catch (const Error& e) {
      KV_FAIL("{}: {}", f.path(), e.message());
    }
  }
  int32_t i32(const std::string& key, const GgufValue& v) const {
    const uint64_t u = with_path([&] { return v.as_uint(key); });
    KV_CHECK(u <= uint64_t(std::numeric_limits<int32_t>::max()),
             "{}: metadata '{}' is {}, too large", f.path(), key, u);
    return int32_t(u);
  }
  int32_t req_i32(const std::string& key) const { return i32(key, f.get(key)); }
  std::optional<int32_t> opt_i32(const std::string& key) const {
    const GgufValue* v = f.find(key);
    return v ? std::optional<int32_t>(i32(key, *v)) : std::nullopt;
  }
  std::optional<float> opt_f32(const std::string& key) const {
    const GgufValue* v = f.find(key);
    if (!v) return std::nullopt;
    return float(with_path([&] { return v->as_float(key); }));
  }
  std::optional<std::string> opt_str(const std::string& key) const {
    const GgufValue* v = f.find(key);
    if (!v) return std::nullopt;
    return std::string(with_path([&] { return v->as_string(key); }));
  }
};

}  // namespace

ModelConfig config_from_gguf(const GgufFile& f) {
  const std::string& path = f.path();
  ModelConfig c;
  const GgufValue& av = f.get("general.architecture");
  GgufKeys g{f, ""};
  c.arch = std::string(g.with_path([&] { return av.as_string("general.architecture"); }));
  g.arch = c.arch;
  KV_CHECK(c.arch == "llama" || c.arch == "mistral" || c.arch == "qwen2",
           "{}: metadata 'general.architecture' is '{}': Kvasir runs llama, mistral and qwen2",
           path, c.arch);
  c.name = g.opt_str("general.name").value_or(std::filesystem::path(path).stem().string());

  c.n_layers = g.req_i32(g.k("block_count"));
  c.hidden = g.req_i32(g.k("embedding_length"));
  c.ffn = g.req_i32(g.k("feed_forward_length"));
  c.n_heads = g.req_i32(g.k("attention.head_count"));
  c.n_kv_heads = g.opt_i32(g.k("attention.head_count_kv")).value_or(c.n_heads);
  c.context_length = g.req_i32(g.k("context_length"));
  c.rope_theta = g.opt_f32(g.k("rope.freq_base")).value_or(10000.f);
  c.rms_eps = g.opt_f32(g.k("attention.layer_norm_rms_epsilon")).value_or(1e-5f);

  const auto key_len = g.opt_i32(g.k("attention.key_length"));
  const auto rot_dim = g.opt_i32(g.k("rope.dimension_count"));
  if (key_len) {
    c.head_dim = *key_len;
  } else if (rot_dim) {
    c.head_dim = *rot_dim;
  } else {
    KV_CHECK(c.n_heads > 0 && c.hidden % c.n_heads == 0, "{}: {} {} is not a multiple of {} {}",
             path, g.k("embedding_length"), c.hidden, g.k("attention.head_count"), c.n_heads);
    c.head_dim = c.hidden / c.n_heads;
  }
  if (const auto vlen = g.opt_i32(g.k("attention.value_length")))
    KV_CHECK(*vlen == c.head_dim, "{}: metadata '{}' is {}, but the key length is {}", path,
             g.k("attention.value_length"), *vlen, c.head_dim);
  if (rot_dim)
    KV_CHECK(*rot_dim == c.head_dim,
             "{}: metadata '{}' is {} but head_dim is {}: partial rotary embeddings are not "
             "supported",
             path, g.k("rope.dimension_count"), *rot_dim, c.head_dim);

  if (const auto v = g.opt_i32(g.k("vocab_size"))) {
    c.vocab = *v;
  } else if (const GgufValue* toks = f.find("tokenizer.ggml.tokens")) {
    const uint64_t n = g.with_path([&] { return toks->as_array("tokenizer.ggml.tokens").count; });
    KV_CHECK(n <= uint64_t(std::numeric_limits<int32_t>::max()),
             "{}: metadata 'tokenizer.ggml.tokens' has {} entries, too many", path, n);
    c.vocab = int32_t(n);
  } else if (const GgufTensor* e = f.find_tensor("token_embd.weight")) {
    KV_CHECK(e->view.ne[1] <= std::numeric_limits<int32_t>::max(),
             "{}: tensor 'token_embd.weight' has {} rows, too many", path, e->view.ne[1]);
    c.vocab = int32_t(e->view.ne[1]);
  } else {
    KV_FAIL(
        "{}: no vocabulary size: neither '{}' nor 'tokenizer.ggml.tokens' nor "
        "'token_embd.weight'",
        path, g.k("vocab_size"));
  }

  // RoPE scaling.
  const std::string stype = g.opt_str(g.k("rope.scaling.type")).value_or("none");
  const auto factor = g.opt_f32(g.k("rope.scaling.factor"));
  c.rope_freqs_tensor = f.find_tensor("rope_freqs.weight") != nullptr;
  if (stype == "linear") {
    const auto legacy = g.opt_f32(g.k("rope.scale_linear"));
    KV_CHECK(factor || legacy, "{}: rope scaling type 'linear' without '{}'", path,
             g.k("rope.scaling.factor"));
    c.rope_linear_factor = factor ? *factor : *legacy;
  } else if (stype == "llama3" || (stype == "none" && c.rope_freqs_tensor)) {
    if (factor) c.rope_llama3_factor = *factor;
    if (auto v = g.opt_f32(g.k("rope.scaling.low_freq_factor"))) c.rope_llama3_low_freq_factor = *v;
    if (auto v = g.opt_f32(g.k("rope.scaling.high_freq_factor")))
      c.rope_llama3_high_freq_factor = *v;
    if (auto v = g.opt_i32(g.k("rope.scaling.original_context_length")))
      c.rope_llama3_original_context = *v;
  } else if (stype != "none") {
    KV_FAIL("{}: metadata '{}' is '{}': only linear and llama3 rope scaling are supported", path,
            g.k("rope.scaling.type"), stype);
  }

  // Converters keep Qwen2 in the NeoX layout and permute llama/mistral q/k
  // rows to adjacent pairs (see docs/model-formats.md).
  c.rope_layout = c.arch == "qwen2" ? RopeLayout::kHalf : RopeLayout::kAdjacent;
  c.qkv_bias = c.arch == "qwen2";
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.validate(path);
  return c;
}

// ---------------------------------------------------------------- HF config.json

namespace {

struct JsonKeys {
  const nlohmann::json& j;
  const std::string& src;

  const nlohmann::json* find(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int32_t int_at(const char* key, const nlohmann::json& v) const {
    KV_CHECK(v.is_number_integer(), "{}: '{}' must be an integer, found {}", src, key,
             v.type_name());
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      KV_CHECK(u <= uint64_t(std::numeric_limits<int32_t>::max()), "{}: '{}' is {}, too large", src,
               key, u);
      return int32_t(u);
    }
    const auto i = v.get<int64_t>();
    KV_CHECK(i >= 0 && i <= std::numeric_limits<int32_t>::max(), "{}: '{}' is {}, out of range",
             src, key, i);
    return int32_t(i);
  }
  int32_t req_int(const char* key) const {
    const nlohmann::json* v = find(key);
    KV_CHECK(v, "{}: '{}' is missing", src, key);
    return int_at(key, *v);
  }
  std::optional<int32_t> opt_int(const char* key) const {
    const nlohmann::json* v = find(key);
    return v ? std::optional<int32_t>(int_at(key, *v)) : std::nullopt;
  }
  std::optional<float> opt_float(const char* key) const {
    const nlohmann::json* v = find(key);
    if (!v) return std::nullopt;
    KV_CHECK(v->is_number(), "{}: '{}' must be a number, found {}", src, key, v->type_name());
    return v->get<float>();
  }
  std::optional<bool> opt_bool(const char* key) const {
    const nlohmann::json* v = find(key);
    if (!v) return std::nullopt;
    KV_CHECK(v->is_boolean(), "{}: '{}' must be true or false, found {}", src, key, v->type_name());
    return v->get<bool>();
  }
  std::optional<std::string> opt_str(const char* key) const {
    const nlohmann::json* v = find(key);
    if (!v) return std::nullopt;
    KV_CHECK(v->is_string(), "{}: '{}' must be a string, found {}", src, key, v->type_name());
    return v->get<std::string>();
  }
};

std::string arch_of(const JsonKeys& k) {
  if (const nlohmann::json* a = k.find("architectures")) {
    KV_CHECK(a->is_array() && !a->empty() && (*a)[0].is_string(),
             "{}: 'architectures' must be a non-empty array of strings", k.src);
    const auto name = (*a)[0].get<std::string>();
    if (name == "LlamaForCausalLM") return "llama";
    if (name == "MistralForCausalLM") return "mistral";
    if (name == "Qwen2ForCausalLM") return "qwen2";
    KV_FAIL(
        "{}: 'architectures' is '{}': Kvasir runs LlamaForCausalLM, MistralForCausalLM and "
        "Qwen2ForCausalLM",
        k.src, name);
  }
  const auto type = k.opt_str("model_type");
  KV_CHECK(type && (*type == "llama" || *type == "mistral" || *type == "qwen2"),
           "{}: neither 'architectures' nor a supported 'model_type' (llama, mistral, qwen2)",
           k.src);
  return *type;
}

// One compressed-tensors config group: its weights must be 8-bit floats,
// scaled per tensor or per output channel.
void check_ct_group(const std::string& src, const std::string& group, const nlohmann::json& g) {
  const std::string f = "quantization_config.config_groups." + group + ".weights";
  const auto w = g.is_object() ? g.find("weights") : g.end();
  KV_CHECK(w != g.end() && w->is_object(), "{}: '{}' is missing", src, f);
  const JsonKeys k{*w, src};
  const auto bits = k.opt_int("num_bits");
  const auto type = k.opt_str("type").value_or("");
  const auto strategy = k.opt_str("strategy").value_or("");
  KV_CHECK(bits && *bits == 8 && type == "float",
           "{}: '{}' are {}-bit {}: Kvasir reads 8-bit float (FP8 E4M3) weights only", src, f,
           bits ? *bits : 0, type.empty() ? "(no type)" : type);
  KV_CHECK(strategy == "tensor" || strategy == "channel",
           "{}: '{}.strategy' is '{}': Kvasir reads FP8 weights scaled per tensor or per channel",
           src, f, strategy);
}

// quantization_config: FP8 checkpoints as vLLM reads them (the "fp8"
// method of AutoFP8 / llm-compressor, fbgemm_fp8, compressed-tensors
// float8); every other method is refused by name. Activation scales in the
// file (input_scale, a static activation_scheme) are not used: activations
// are scaled per token when they are quantised (docs/cuda.md).
void read_quantization(const JsonKeys& k, ModelConfig& c) {
  const nlohmann::json* q = k.find("quantization_config");
  if (!q) return;
  KV_CHECK(q->is_object(), "{}: 'quantization_config' must be an object", k.src);
  const JsonKeys qk{*q, k.src};
  const std::string method = qk.opt_str("quant_method").value_or("");
  if (method == "fp8") {
    KV_CHECK(!qk.find("weight_block_size"),
             "{}: 'quantization_config.weight_block_size' is set: block-wise FP8 weights are not "
             "supported (per-tensor or per-channel scales only)",
             k.src);
    const std::string scheme = qk.opt_str("activation_scheme").value_or("dynamic");
    KV_CHECK(scheme == "dynamic" || scheme == "static",
             "{}: 'quantization_config.activation_scheme' is '{}' (dynamic or static)", k.src,
             scheme);
    const std::string fmt = qk.opt_str("fmt").value_or("e4m3");
    KV_CHECK(fmt == "e4m3", "{}: 'quantization_config.fmt' is '{}': only e4m3 is read", k.src, fmt);
  } else if (method == "compressed-tensors") {
    const std::string format = qk.opt_str("format").value_or("");
    KV_CHECK(format == "float-quantized" || format == "naive-quantized",
             "{}: 'quantization_config.format' is '{}': Kvasir reads float-quantized (FP8) "
             "compressed-tensors checkpoints only",
             k.src, format);
    const nlohmann::json* groups = qk.find("config_groups");
    KV_CHECK(groups && groups->is_object() && !groups->empty(),
             "{}: 'quantization_config.config_groups' must be a non-empty object", k.src);
    for (const auto& [name, g] : groups->items()) check_ct_group(k.src, name, g);
  } else if (method != "fbgemm_fp8") {
    KV_FAIL(
        "{}: 'quantization_config.quant_method' is '{}': Kvasir reads FP8 checkpoints (fp8, "
        "fbgemm_fp8, compressed-tensors float8), nothing else quantised this way",
        k.src, method.empty() ? "(missing)" : method);
  }
  c.fp8_weights = true;
}

}  // namespace

ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& src,
                                const std::string& name) {
  KV_CHECK(j.is_object(), "{}: expected a JSON object at the top level", src);
  const JsonKeys k{j, src};
  ModelConfig c;
  c.arch = arch_of(k);
  c.name = name;
  c.n_layers = k.req_int("num_hidden_layers");
  c.hidden = k.req_int("hidden_size");
  c.ffn = k.req_int("intermediate_size");
  c.n_heads = k.req_int("num_attention_heads");
  c.n_kv_heads = k.opt_int("num_key_value_heads").value_or(c.n_heads);
  c.vocab = k.req_int("vocab_size");
  c.context_length = k.req_int("max_position_embeddings");
  if (const auto hd = k.opt_int("head_dim")) {
    c.head_dim = *hd;
  } else {
    KV_CHECK(c.n_heads > 0 && c.hidden % c.n_heads == 0,
             "{}: 'hidden_size' {} is not a multiple of 'num_attention_heads' {}", src, c.hidden,
             c.n_heads);
    c.head_dim = c.hidden / c.n_heads;
  }
  c.rope_theta = k.opt_float("rope_theta").value_or(10000.f);
  c.rms_eps = k.opt_float("rms_norm_eps").value_or(1e-6f);
  c.tied_embeddings = k.opt_bool("tie_word_embeddings").value_or(false);
  const std::string act = k.opt_str("hidden_act").value_or("silu");
  KV_CHECK(act == "silu", "{}: 'hidden_act' is '{}', only silu (SwiGLU) is supported", src, act);
  if (c.arch == "qwen2") {
    c.qkv_bias = true;
  } else {
    KV_CHECK(!k.opt_bool("attention_bias").value_or(false),
             "{}: 'attention_bias' is true: attention biases are not supported for {}", src,
             c.arch);
  }
  // Attention over a sliding window equals full attention while the context
  // fits the window, so the window caps the context instead of being refused.
  if (c.arch != "llama" && k.opt_bool("use_sliding_window").value_or(c.arch == "mistral"))
    if (const auto w = k.opt_int("sliding_window"); w && *w > 0 && *w < c.context_length)
      c.context_length = *w;

  if (const nlohmann::json* rs = k.find("rope_scaling")) {
    KV_CHECK(rs->is_object(), "{}: 'rope_scaling' must be an object", src);
    const JsonKeys r{*rs, src};
    std::string type = r.opt_str("rope_type").value_or(r.opt_str("type").value_or("default"));
    if (type == "linear") {
      const auto f = r.opt_float("factor");
      KV_CHECK(f, "{}: 'rope_scaling.factor' is missing for rope_type linear", src);
      c.rope_linear_factor = *f;
    } else if (type == "llama3") {
      const auto f = r.opt_float("factor");
      KV_CHECK(f, "{}: 'rope_scaling.factor' is missing for rope_type llama3", src);
      c.rope_llama3_factor = *f;
      c.rope_llama3_low_freq_factor = r.opt_float("low_freq_factor").value_or(1.f);
      c.rope_llama3_high_freq_factor = r.opt_float("high_freq_factor").value_or(4.f);
      c.rope_llama3_original_context = r.opt_int("original_max_position_embeddings").value_or(8192);
    } else if (type != "default") {
      KV_FAIL("{}: 'rope_scaling' type '{}' is not supported (linear, llama3)", src, type);
    }
  }
  read_quantization(k, c);
  c.rope_layout = RopeLayout::kHalf;  // HF checkpoints are stored rotate-half
  c.validate(src);
  return c;
}

}  // namespace kvasir
