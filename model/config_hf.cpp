// model/config_hf.cpp — ModelConfig from a Hugging Face config.json, as
// transformers writes it (4.x and 5.x forms), for the families Kvasir runs.
// Every value is range-checked before it becomes an int32.
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/check.h"
#include "model/config.h"
#include "model/config_internal.h"

namespace kvasir {

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

// Hugging Face's class and model_type names → GGUF's architecture names.
struct HfArch {
  const char* cls;
  const char* model_type;
  const char* arch;
};
constexpr HfArch kHfArchs[] = {
    {"LlamaForCausalLM", "llama", "llama"},
    {"MistralForCausalLM", "mistral", "mistral"},
    {"Qwen2ForCausalLM", "qwen2", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3", "qwen3"},
    {"Qwen3MoeForCausalLM", "qwen3_moe", "qwen3moe"},
    {"Qwen2MoeForCausalLM", "qwen2_moe", "qwen2moe"},
    {"MixtralForCausalLM", "mixtral", "llama"},  // llama with experts, as in GGUF
    {"GptOssForCausalLM", "gpt_oss", "gpt-oss"},
    {"Gemma3ForCausalLM", "gemma3_text", "gemma3"},
};

// The entry of kHfArchs the config names.
const HfArch& arch_of(const JsonKeys& k) {
  if (const nlohmann::json* a = k.find("architectures")) {
    KV_CHECK(a->is_array() && !a->empty() && (*a)[0].is_string(),
             "{}: 'architectures' must be a non-empty array of strings", k.src);
    const auto name = (*a)[0].get<std::string>();
    for (const HfArch& h : kHfArchs)
      if (name == h.cls) return h;
    KV_FAIL_CODE(ErrorCode::kModelFormat,
                 "{}: 'architectures' is '{}': Kvasir runs LlamaForCausalLM, MistralForCausalLM, "
                 "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, "
                 "MixtralForCausalLM, GptOssForCausalLM and Gemma3ForCausalLM",
                 k.src, name);
  }
  const auto type = k.opt_str("model_type");
  if (type)
    for (const HfArch& h : kHfArchs)
      if (*type == h.model_type) return h;
  KV_FAIL_CODE(ErrorCode::kModelFormat,
               "{}: neither 'architectures' nor a supported 'model_type' (llama, mistral, qwen2, "
               "qwen3, qwen3_moe, qwen2_moe, mixtral, gpt_oss, gemma3_text)",
               k.src);
}

// The attention's biases and norms by family: Qwen2 always has q/k/v
// biases, Qwen2-MoE as its 'qkv_bias' says (default true); Qwen3 has
// per-head q/k norms and biases only with 'attention_bias', which also
// puts one on o_proj (not supported); Llama/Mistral take no biases.
void read_attention_extras(const JsonKeys& k, ModelConfig& c) {
  if (c.arch == "qwen2") {
    c.qkv_bias = true;
  } else if (c.arch == "gpt-oss") {
    c.qkv_bias = k.opt_bool("attention_bias").value_or(true);
  } else if (c.arch == "qwen2moe") {
    c.qkv_bias = k.opt_bool("qkv_bias").value_or(true);
  } else {
    KV_CHECK_CODE(!k.opt_bool("attention_bias").value_or(false), ErrorCode::kModelFormat,
                  "{}: 'attention_bias' is true: attention biases are not supported for {}", k.src,
                  c.arch);
  }
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe";
}

// The experts: Mixtral's 'num_local_experts' (each of 'intermediate_size',
// always renormalised); Qwen's 'num_experts' of 'moe_intermediate_size'
// with 'norm_topk_prob' (default false, as in transformers), Qwen2-MoE's
// shared expert of 'shared_expert_intermediate_size'. Every layer must be
// sparse ('decoder_sparse_step' 1, no 'mlp_only_layers').
void read_hf_experts(const JsonKeys& k, const HfArch& h, ModelConfig& c) {
  const std::string type = h.model_type;
  if (type == "mixtral") {
    c.n_experts = k.req_int("num_local_experts");
    c.n_experts_used = k.req_int("num_experts_per_tok");
    check_expert_counts(k.src, "num_local_experts", c.n_experts, "num_experts_per_tok",
                        c.n_experts_used);
    c.expert_ffn = c.ffn;
    c.expert_norm_topk = true;
    return;
  }
  if (type == "gpt_oss") {
    c.n_experts = k.req_int("num_local_experts");
    c.n_experts_used = k.req_int("num_experts_per_tok");
    check_expert_counts(k.src, "num_local_experts", c.n_experts, "num_experts_per_tok",
                        c.n_experts_used);
    c.expert_ffn = c.ffn;  // gpt-oss's intermediate_size is each expert's width
    c.expert_norm_topk = true;
    return;
  }
  if (type != "qwen3_moe" && type != "qwen2_moe") return;
  c.n_experts = k.req_int("num_experts");
  c.n_experts_used = k.req_int("num_experts_per_tok");
  check_expert_counts(k.src, "num_experts", c.n_experts, "num_experts_per_tok", c.n_experts_used);
  c.expert_ffn = k.req_int("moe_intermediate_size");
  c.expert_norm_topk = k.opt_bool("norm_topk_prob").value_or(false);
  if (type == "qwen2_moe") c.shared_expert_ffn = k.req_int("shared_expert_intermediate_size");
  const int32_t step = k.opt_int("decoder_sparse_step").value_or(1);
  KV_CHECK_CODE(step == 1, ErrorCode::kModelFormat,
                "{}: 'decoder_sparse_step' is {}: layers without experts are not supported", k.src,
                step);
  if (const nlohmann::json* dense = k.find("mlp_only_layers"))
    KV_CHECK_CODE(dense->is_array() && dense->empty(), ErrorCode::kModelFormat,
                  "{}: 'mlp_only_layers' is {}: layers without experts are not supported", k.src,
                  dense->dump());
}

// gpt-oss's config.json as transformers writes it (GptOssConfig): the
// same model as its GGUF form (read_gpt_oss): a sliding window on the
// even layers ('layer_types' must say exactly that), NeoX RoPE, the
// clamped SwiGLU with gpt-oss's constants (swiglu_limit 7), MXFP4 experts
// (quantization_config quant_method mxfp4, read by read_quantization).
void read_hf_gpt_oss(const JsonKeys& k, ModelConfig& c) {
  const auto window = k.opt_int("sliding_window");
  KV_CHECK_CODE(window && *window > 0, ErrorCode::kModelFormat,
                "{}: 'sliding_window' is missing or 0: gpt-oss alternates sliding and full layers",
                k.src);
  if (const nlohmann::json* types = k.find("layer_types")) {
    KV_CHECK_CODE(types->is_array() && int32_t(types->size()) == c.n_layers,
                  ErrorCode::kModelFormat, "{}: 'layer_types' must list the {} layers", k.src,
                  c.n_layers);
    for (int32_t il = 0; il < c.n_layers; ++il) {
      const char* want = il % 2 == 0 ? "sliding_attention" : "full_attention";
      KV_CHECK_CODE((*types)[size_t(il)] == want, ErrorCode::kModelFormat,
                    "{}: 'layer_types'[{}] is {}: gpt-oss's layers alternate, sliding first ({}), "
                    "and no other order is supported",
                    k.src, il, (*types)[size_t(il)].dump(), want);
    }
  }
  const float limit = k.opt_float("swiglu_limit").value_or(7.f);
  const float alpha = k.opt_float("swiglu_alpha").value_or(1.702f);
  KV_CHECK_CODE(limit == 7.f && alpha == 1.702f, ErrorCode::kModelFormat,
                "{}: 'swiglu_limit' {} and 'swiglu_alpha' {}: only gpt-oss's 7 and 1.702 are "
                "supported",
                k.src, limit, alpha);
  c.sliding_window = *window;
  c.sliding_pattern = 2;
  c.rope_theta_local = c.rope_theta;
  c.gpt_oss = true;
}

// rope_scaling {rope_type yarn}: Hugging Face's keys, as _compute_yarn_parameters
// reads them; the magnitude factor must be YaRN's own (0.1 ln(factor) + 1).
void read_hf_yarn(const JsonKeys& r, ModelConfig& c) {
  const auto f = r.opt_float("factor");
  KV_CHECK(f && *f >= 1.f, "{}: 'rope_scaling.factor' must be >= 1 for rope_type yarn", r.src);
  const auto orig = r.opt_int("original_max_position_embeddings");
  KV_CHECK(orig && *orig > 0,
           "{}: 'rope_scaling.original_max_position_embeddings' is missing for rope_type yarn",
           r.src);
  for (const char* key : {"mscale", "mscale_all_dim"})
    KV_CHECK(!r.find(key), "{}: 'rope_scaling.{}' is set: DeepSeek's YaRN is not supported", r.src,
             key);
  if (const auto a = r.opt_float("attention_factor"))
    KV_CHECK(std::abs(*a - (0.1f * std::log(*f) + 1.f)) < 1e-6f,
             "{}: 'rope_scaling.attention_factor' is {}: only YaRN's own 0.1 ln(factor) + 1 is "
             "supported",
             r.src, *a);
  c.rope_yarn_factor = *f;
  c.rope_yarn_original_context = *orig;
  c.rope_yarn_beta_fast = r.opt_float("beta_fast").value_or(32.f);
  c.rope_yarn_beta_slow = r.opt_float("beta_slow").value_or(1.f);
  c.rope_yarn_truncate = r.opt_bool("truncate").value_or(true);
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
  if (method == "mxfp4") {  // gpt-oss: its expert stacks, in blocks and scales
    KV_CHECK(c.arch == "gpt-oss",
             "{}: 'quantization_config.quant_method' is mxfp4: Kvasir reads MXFP4 experts in "
             "gpt-oss folders only",
             k.src);
    return;
  }
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

void read_hf_rope_entry(const JsonKeys& r, const std::string& key, ModelConfig& c);

// RoPE: transformers 5 writes 'rope_parameters' (rope_theta inside, with
// the scaling's keys), earlier versions 'rope_theta' and 'rope_scaling';
// the newer form wins where a folder has both.
void read_hf_rope(const JsonKeys& k, ModelConfig& c) {
  c.rope_theta = k.opt_float("rope_theta").value_or(10000.f);
  const char* key = k.find("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const nlohmann::json* rs = k.find(key);
  if (!rs) return;
  KV_CHECK(rs->is_object(), "{}: '{}' must be an object", k.src, key);
  read_hf_rope_entry(JsonKeys{*rs, k.src}, key, c);
}

// One RoPE object (rope_parameters, rope_scaling or one layer type's entry
// of Gemma 3's rope_parameters): its theta and its scaling.
void read_hf_rope_entry(const JsonKeys& r, const std::string& key, ModelConfig& c) {
  if (const auto theta = r.opt_float("rope_theta")) c.rope_theta = *theta;
  const std::string type = r.opt_str("rope_type").value_or(r.opt_str("type").value_or("default"));
  if (type == "linear") {
    const auto f = r.opt_float("factor");
    KV_CHECK(f, "{}: '{}.factor' is missing for rope_type linear", r.src, key);
    c.rope_linear_factor = *f;
  } else if (type == "llama3") {
    const auto f = r.opt_float("factor");
    KV_CHECK(f, "{}: '{}.factor' is missing for rope_type llama3", r.src, key);
    c.rope_llama3_factor = *f;
    c.rope_llama3_low_freq_factor = r.opt_float("low_freq_factor").value_or(1.f);
    c.rope_llama3_high_freq_factor = r.opt_float("high_freq_factor").value_or(4.f);
    c.rope_llama3_original_context = r.opt_int("original_max_position_embeddings").value_or(8192);
  } else if (type == "yarn") {
    read_hf_yarn(r, c);
  } else if (type != "default") {
    KV_FAIL("{}: '{}' type '{}' is not supported (linear, llama3, yarn)", r.src, key, type);
  }
}

// Gemma 3's layer pattern: 'layer_types' (transformers 5) must be every
// n-th layer global, the others sliding, as the GGUF form's pattern says;
// without it '_sliding_window_pattern' or 'sliding_window_pattern' (6).
int32_t gemma3_pattern(const JsonKeys& k, int32_t n_layers) {
  const nlohmann::json* types = k.find("layer_types");
  if (!types) {
    const auto p = k.opt_int("sliding_window_pattern");
    return p ? *p : k.opt_int("_sliding_window_pattern").value_or(6);
  }
  KV_CHECK_CODE(types->is_array() && int32_t(types->size()) == n_layers, ErrorCode::kModelFormat,
                "{}: 'layer_types' must list the {} layers", k.src, n_layers);
  int32_t n = 0;  // the first global layer's index + 1
  while (n < n_layers && (*types)[size_t(n)] != "full_attention") ++n;
  n = n < n_layers ? n + 1 : 0;
  for (int32_t il = 0; il < n_layers; ++il) {
    const bool slides = n == 0 || il % n < n - 1;
    const char* want = slides ? "sliding_attention" : "full_attention";
    KV_CHECK_CODE(
        (*types)[size_t(il)] == want, ErrorCode::kModelFormat,
        "{}: 'layer_types'[{}] is {}: the first full_attention layer sets the pattern, one "
        "global layer in every {}, and no other order is supported",
        k.src, il, (*types)[size_t(il)].dump(), n);
  }
  return n;
}

// Gemma 3's RoPE: transformers 5 writes 'rope_parameters' per layer type
// (the scaling on 'full_attention' only), earlier versions 'rope_theta' and
// 'rope_scaling' for the global layers and 'rope_local_base_freq'.
void read_hf_gemma3_rope(const JsonKeys& k, ModelConfig& c) {
  const nlohmann::json* rp = k.find("rope_parameters");
  if (!rp || !rp->is_object() || !rp->contains("full_attention")) {
    read_hf_rope(k, c);
    c.rope_theta_local = k.opt_float("rope_local_base_freq").value_or(10000.f);
    return;
  }
  c.rope_theta = 10000.f;
  for (const char* type : {"full_attention", "sliding_attention"}) {
    const std::string key = std::string("rope_parameters.") + type;
    const auto it = rp->find(type);
    KV_CHECK_CODE(it != rp->end() && it->is_object(), ErrorCode::kModelFormat,
                  "{}: '{}' is missing or not an object", k.src, key);
    const JsonKeys r{*it, k.src};
    if (type[0] == 'f') {
      read_hf_rope_entry(r, key, c);
      continue;
    }
    const std::string kind = r.opt_str("rope_type").value_or("default");
    KV_CHECK_CODE(kind == "default", ErrorCode::kModelFormat,
                  "{}: '{}.rope_type' is '{}': Gemma 3's sliding layers are not scaled", k.src, key,
                  kind);
    c.rope_theta_local = r.opt_float("rope_theta").value_or(10000.f);
  }
}

// Gemma 3 (Gemma3ForCausalLM, model_type gemma3_text) as transformers
// writes it: the same model as the GGUF form (read_gemma3 in config.cpp),
// with q·k scaled by 1/sqrt(query_pre_attn_scalar); its norms' weights are
// stored as w of x * (1 + w), which the folder reader turns into GGUF's 1 + w.
void read_hf_gemma3(const JsonKeys& k, ModelConfig& c) {
  const std::string act =
      k.opt_str("hidden_activation").value_or(k.opt_str("hidden_act").value_or(""));
  KV_CHECK_CODE(act == "gelu_pytorch_tanh", ErrorCode::kModelFormat,
                "{}: 'hidden_activation' is '{}': Gemma 3's FFN is gelu_pytorch_tanh", k.src, act);
  KV_CHECK_CODE(!k.find("attn_logit_softcapping"), ErrorCode::kModelFormat,
                "{}: 'attn_logit_softcapping' is set: attention soft-capping is not supported",
                k.src);
  KV_CHECK_CODE(!k.opt_bool("use_bidirectional_attention").value_or(false), ErrorCode::kModelFormat,
                "{}: 'use_bidirectional_attention' is true: Kvasir runs causal attention only",
                k.src);
  c.sliding_window = k.opt_int("sliding_window").value_or(0);
  if (c.sliding_window > 0) c.sliding_pattern = gemma3_pattern(k, c.n_layers);
  read_hf_gemma3_rope(k, c);
  const int32_t scalar = k.opt_int("query_pre_attn_scalar").value_or(c.head_dim);
  KV_CHECK_CODE(scalar > 0, ErrorCode::kModelFormat, "{}: 'query_pre_attn_scalar' must be > 0",
                k.src);
  c.attn_scale = 1.f / std::sqrt(float(scalar));
  c.embed_scale = std::sqrt(float(c.hidden));
  c.post_norms = true;
  c.gelu_ffn = true;
  c.qk_norm = true;
  c.final_logit_softcap = k.opt_float("final_logit_softcapping").value_or(0.f);
  c.rope_scaling_local = false;
  c.tied_embeddings = k.opt_bool("tie_word_embeddings").value_or(true);
}

}  // namespace

ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& src,
                                const std::string& name) {
  KV_CHECK(j.is_object(), "{}: expected a JSON object at the top level", src);
  const JsonKeys k{j, src};
  ModelConfig c;
  const HfArch& hf = arch_of(k);
  c.arch = hf.arch;
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
  c.rms_eps = k.opt_float("rms_norm_eps").value_or(1e-6f);
  c.tied_embeddings = k.opt_bool("tie_word_embeddings").value_or(false);
  if (c.arch != "gemma3") {
    const std::string act = k.opt_str("hidden_act").value_or("silu");
    KV_CHECK(act == "silu", "{}: 'hidden_act' is '{}', only silu (SwiGLU) is supported", src, act);
  }
  read_attention_extras(k, c);
  read_hf_experts(k, hf, c);
  // Attention over a sliding window equals full attention while the context
  // fits the window, so the window caps the context instead of being refused.
  // Mistral and Mixtral slide whenever 'sliding_window' is set; Qwen only
  // with 'use_sliding_window'.
  const bool mistral_like = c.arch == "mistral" || std::string(hf.model_type) == "mixtral";
  if ((c.arch != "llama" || mistral_like) &&
      k.opt_bool("use_sliding_window").value_or(mistral_like))
    if (const auto w = k.opt_int("sliding_window"); w && *w > 0 && *w < c.context_length)
      c.context_length = *w;

  if (c.arch == "gemma3")
    read_hf_gemma3(k, c);
  else
    read_hf_rope(k, c);
  if (c.arch == "gpt-oss") read_hf_gpt_oss(k, c);
  read_quantization(k, c);
  c.rope_layout = RopeLayout::kHalf;  // HF checkpoints are stored rotate-half
  c.validate(src);
  return c;
}

}  // namespace kvasir
