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

namespace {

constexpr const char* kArchs[] = {"llama",    "mistral",  "qwen2",  "qwen3",
                                  "qwen3moe", "qwen2moe", "gemma3", "gpt-oss"};

bool known_arch(const std::string& a) {
  for (const char* k : kArchs)
    if (a == k) return true;
  return false;
}

// Architectures whose every layer is a mixture of experts.
bool moe_arch(const std::string& a) {
  return a == "qwen3moe" || a == "qwen2moe" || a == "gpt-oss";
}

// The expert counts as the file gives them, refused naming the file's keys:
// n experts (1..kMaxExperts), k of them used per token (1..n).
void check_expert_counts(const std::string& src, const std::string& n_key, int64_t n,
                         const std::string& k_key, int64_t k) {
  KV_CHECK_CODE(n >= 1 && n <= kMaxExperts, ErrorCode::kModelFormat,
                "{}: '{}' is {}, must be in [1, {}]", src, n_key, n, kMaxExperts);
  KV_CHECK_CODE(k >= 1 && k <= n, ErrorCode::kModelFormat,
                "{}: '{}' is {}: each token must use 1 to '{}' = {} experts", src, k_key, k, n_key,
                n);
}

}  // namespace

void ModelConfig::validate(const std::string& src) const {
  KV_CHECK(known_arch(arch),
           "{}: architecture '{}' is not supported (llama, mistral, qwen2, qwen3, qwen3moe, "
           "qwen2moe, gemma3, gpt-oss)",
           src, arch);
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
  KV_CHECK(std::isfinite(rope_yarn_factor) && rope_yarn_factor >= 0.f,
           "{}: rope_yarn_factor is {}, must be finite and >= 0", src, rope_yarn_factor);
  if (rope_yarn_factor > 0.f) {
    range("rope_yarn_original_context", rope_yarn_original_context, 1, 1 << 30);
    positive("rope_yarn_beta_fast", rope_yarn_beta_fast);
    positive("rope_yarn_beta_slow", rope_yarn_beta_slow);
    KV_CHECK(std::isfinite(rope_yarn_ext_factor) && rope_yarn_ext_factor >= 0.f &&
                 rope_yarn_ext_factor <= 1.f,
             "{}: rope_yarn_ext_factor is {}, must be in [0, 1]", src, rope_yarn_ext_factor);
  }
  range("sliding_window", sliding_window, 0, 1 << 30);
  range("sliding_pattern", sliding_pattern, 0, 4096);
  positive("rope_theta_local", rope_theta_local);
  positive("embed_scale", embed_scale);
  KV_CHECK(std::isfinite(attn_scale) && attn_scale >= 0.f, "{}: attn_scale is {}", src, attn_scale);
  KV_CHECK(std::isfinite(final_logit_softcap) && final_logit_softcap >= 0.f,
           "{}: final_logit_softcap is {}, must be finite and >= 0", src, final_logit_softcap);
  validate_experts(src);
}

void ModelConfig::validate_experts(const std::string& src) const {
  auto range = [&](const char* field, int64_t v, int64_t lo, int64_t hi) {
    KV_CHECK_CODE(v >= lo && v <= hi, ErrorCode::kModelFormat, "{}: {} is {}, must be in [{}, {}]",
                  src, field, v, lo, hi);
  };
  KV_CHECK_CODE(n_experts > 0 || !moe_arch(arch), ErrorCode::kModelFormat,
                "{}: architecture '{}' needs experts (n_experts is {})", src, arch, n_experts);
  KV_CHECK_CODE(n_experts == 0 || arch == "llama" || moe_arch(arch), ErrorCode::kModelFormat,
                "{}: {} experts in a '{}' model: Kvasir runs experts in llama (Mixtral), "
                "qwen3moe, qwen2moe and gpt-oss",
                src, n_experts, arch);
  if (n_experts == 0) {
    range("n_experts_used", n_experts_used, 0, 0);
    range("shared_expert_ffn", shared_expert_ffn, 0, 0);
    return;
  }
  range("n_experts", n_experts, 1, kMaxExperts);
  range("n_experts_used", n_experts_used, 1, n_experts);
  range("expert_ffn", expert_ffn, 1, 1 << 22);
  range("shared_expert_ffn", shared_expert_ffn, 0, 1 << 22);
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

// The experts of a MoE file, as llama.cpp reads them: `<arch>.expert_count`
// and `expert_used_count`; each expert's width from
// `expert_feed_forward_length` (qwen3moe / qwen2moe; default
// feed_forward_length / used, llama.cpp's rule) or feed_forward_length
// (llama, i.e. Mixtral); Qwen2-MoE's shared expert from
// `expert_shared_feed_forward_length` (default feed_forward_length). The
// weights are normalised after top-k for qwen3moe and Mixtral, not for
// qwen2moe (llama.cpp's norm_w, fixed per architecture).
void read_experts(const GgufKeys& g, ModelConfig& c) {
  const std::string& path = g.f.path();
  c.n_experts = g.opt_i32(g.k("expert_count")).value_or(0);
  if (c.n_experts == 0) {
    KV_CHECK_CODE(!moe_arch(c.arch), ErrorCode::kModelFormat,
                  "{}: metadata '{}' is missing or 0: a {} model needs experts", path,
                  g.k("expert_count"), c.arch);
    return;
  }
  KV_CHECK_CODE(c.arch == "llama" || moe_arch(c.arch), ErrorCode::kModelFormat,
                "{}: metadata '{}' is {} in a '{}' model: Kvasir runs experts in llama "
                "(Mixtral), qwen3moe, qwen2moe and gpt-oss",
                path, g.k("expert_count"), c.n_experts, c.arch);
  const auto used = g.opt_i32(g.k("expert_used_count"));
  KV_CHECK_CODE(used.has_value(), ErrorCode::kModelFormat,
                "{}: metadata '{}' is missing ({} experts)", path, g.k("expert_used_count"),
                c.n_experts);
  c.n_experts_used = *used;
  check_expert_counts(path, g.k("expert_count"), c.n_experts, g.k("expert_used_count"),
                      c.n_experts_used);
  if (const auto groups = g.opt_i32(g.k("expert_group_count")))
    KV_CHECK_CODE(*groups <= 1, ErrorCode::kModelFormat,
                  "{}: metadata '{}' is {}: grouped expert selection is not supported", path,
                  g.k("expert_group_count"), *groups);
  if (c.arch == "llama") {
    c.expert_ffn = c.ffn;
  } else {
    c.expert_ffn = g.opt_i32(g.k("expert_feed_forward_length"))
                       .value_or(c.n_experts_used > 0 ? c.ffn / c.n_experts_used : 0);
  }
  c.expert_norm_topk = c.arch != "qwen2moe";
  if (c.arch == "qwen2moe")
    c.shared_expert_ffn = g.opt_i32(g.k("expert_shared_feed_forward_length")).value_or(c.ffn);
}

// head_dim from the key length, else the rotary dimension, else hidden /
// heads; the value length and the rotary dimension must agree with it.
void read_head_dim(const GgufKeys& g, ModelConfig& c) {
  const std::string& path = g.f.path();
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
}

// The vocabulary size: `<arch>.vocab_size`, else the tokenizer's token list,
// else the embedding's rows.
void read_vocab(const GgufKeys& g, ModelConfig& c) {
  const std::string& path = g.f.path();
  const GgufFile& f = g.f;
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
}

// YaRN as llama.cpp reads it: the factor and the original context are
// required; beta_fast 32, beta_slow 1 and ext_factor 1 unless the file says
// otherwise. llama.cpp's other YaRN knobs (log_mul, the attention factor)
// would change the magnitude factor: refused, naming the key.
void read_yarn(const GgufKeys& g, std::optional<float> factor, ModelConfig& c) {
  const std::string& path = g.f.path();
  KV_CHECK_CODE(factor && *factor >= 1.f, ErrorCode::kModelFormat,
                "{}: rope scaling type 'yarn' needs '{}' >= 1", path, g.k("rope.scaling.factor"));
  const auto orig = g.opt_i32(g.k("rope.scaling.original_context_length"));
  KV_CHECK_CODE(orig && *orig > 0, ErrorCode::kModelFormat,
                "{}: rope scaling type 'yarn' needs '{}'", path,
                g.k("rope.scaling.original_context_length"));
  c.rope_yarn_factor = *factor;
  c.rope_yarn_original_context = *orig;
  c.rope_yarn_beta_fast = g.opt_f32(g.k("rope.scaling.yarn_beta_fast")).value_or(32.f);
  c.rope_yarn_beta_slow = g.opt_f32(g.k("rope.scaling.yarn_beta_slow")).value_or(1.f);
  c.rope_yarn_ext_factor = g.opt_f32(g.k("rope.scaling.yarn_ext_factor")).value_or(1.f);
  for (const char* key : {"rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_attn_factor",
                          "rope.scaling.attn_factor"}) {
    const auto v = g.opt_f32(g.k(key));
    const float neutral = std::string(key).find("log") != std::string::npos ? 0.f : 1.f;
    KV_CHECK_CODE(!v || *v == neutral, ErrorCode::kModelFormat,
                  "{}: metadata '{}' is {}: only {} is supported", path, g.k(key), v.value_or(0.f),
                  neutral);
  }
}

// RoPE scaling: linear, llama3 (or a rope_freqs tensor alone), yarn, or none.
void read_rope_scaling(const GgufKeys& g, ModelConfig& c) {
  const std::string& path = g.f.path();
  const GgufFile& f = g.f;
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
  } else if (stype == "yarn") {
    read_yarn(g, factor, c);
  } else if (stype != "none") {
    KV_FAIL("{}: metadata '{}' is '{}': only linear, llama3 and yarn rope scaling are supported",
            path, g.k("rope.scaling.type"), stype);
  }
}

// Gemma 3 as llama.cpp reads it (src/models/gemma3.cpp): a sliding window
// from `gemma3.attention.sliding_window` over every layer but each 6th
// (`attention.sliding_window_pattern` if the file says otherwise), those
// layers rotated with `rope.freq_base_swa` (default 10,000) and the others
// with `rope.freq_base`; q·k scaled by 1/sqrt(head_dim) (27B, 62 layers:
// 1/sqrt(hidden / heads), query_pre_attn_scalar); embeddings times
// sqrt(hidden); pre- and post-norms (their weights already hold the +1 the
// converter adds); GeGLU; final soft-capping where the file sets it; NeoX
// RoPE; per-head q/k norms.
void read_gemma3(const GgufKeys& g, ModelConfig& c) {
  c.sliding_window = g.opt_i32(g.k("attention.sliding_window")).value_or(0);
  if (c.sliding_window > 0) {
    c.sliding_pattern = g.opt_i32(g.k("attention.sliding_window_pattern")).value_or(6);
    c.rope_theta_local = g.opt_f32(g.k("rope.freq_base_swa")).value_or(10000.f);
  }
  c.attn_scale = c.n_layers == 62 ? 1.f / std::sqrt(float(c.hidden / c.n_heads))
                                  : 1.f / std::sqrt(float(c.head_dim));
  c.embed_scale = std::sqrt(float(c.hidden));
  c.post_norms = true;
  c.gelu_ffn = true;
  c.qk_norm = true;
  c.rope_layout = RopeLayout::kHalf;
  c.final_logit_softcap = g.opt_f32(g.k("final_logit_softcapping")).value_or(0.f);
}

// gpt-oss as llama.cpp reads it (src/models/openai-moe.cpp): a sliding
// window (`attention.sliding_window`, 128) on the even layers, the odd ones
// global (its pattern of 2), both rotated alike unless `rope.freq_base_swa`
// says otherwise; NeoX RoPE; q·k scaled by 1/sqrt(head_dim); the softmax
// over the chosen experts' logits (llama.cpp's SOFTMAX_WEIGHT gating, equal
// to the top-k of the softmax renormalised).
void read_gpt_oss(const GgufKeys& g, ModelConfig& c) {
  const std::string& path = g.f.path();
  const auto window = g.opt_i32(g.k("attention.sliding_window"));
  KV_CHECK_CODE(window && *window > 0, ErrorCode::kModelFormat,
                "{}: metadata '{}' is missing or 0: gpt-oss alternates sliding and full layers",
                path, g.k("attention.sliding_window"));
  KV_CHECK_CODE(!g.f.find(g.k("attention.sliding_window_pattern")), ErrorCode::kModelFormat,
                "{}: metadata '{}' is set: gpt-oss's layers alternate (pattern 2) and no other "
                "pattern is supported",
                path, g.k("attention.sliding_window_pattern"));
  c.sliding_window = *window;
  c.sliding_pattern = 2;
  c.rope_theta_local = g.opt_f32(g.k("rope.freq_base_swa")).value_or(c.rope_theta);
  c.rope_layout = RopeLayout::kHalf;
  c.gpt_oss = true;
  c.expert_norm_topk = true;
  c.qkv_bias = g.f.find_tensor("blk.0.attn_q.bias") != nullptr;  // as llama.cpp: where present
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& f) {
  const std::string& path = f.path();
  ModelConfig c;
  const GgufValue& av = f.get("general.architecture");
  GgufKeys g{f, ""};
  c.arch = std::string(g.with_path([&] { return av.as_string("general.architecture"); }));
  g.arch = c.arch;
  KV_CHECK_CODE(known_arch(c.arch), ErrorCode::kModelFormat,
                "{}: metadata 'general.architecture' is '{}': Kvasir runs llama, mistral, qwen2, "
                "qwen3, qwen3moe, qwen2moe, gemma3 and gpt-oss",
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

  read_head_dim(g, c);
  read_vocab(g, c);
  read_rope_scaling(g, c);

  // Converters keep the Qwen families in the NeoX layout and permute
  // llama/mistral (Mixtral too) q/k rows to adjacent pairs (see
  // docs/model-formats.md).
  const bool qwen = c.arch.starts_with("qwen");
  c.rope_layout = qwen ? RopeLayout::kHalf : RopeLayout::kAdjacent;
  // Qwen2 always has q/k/v biases; the newer Qwen families have them where
  // the file does (llama.cpp adds any it finds).
  c.qkv_bias = c.arch == "qwen2" || (qwen && f.find_tensor("blk.0.attn_q.bias") != nullptr);
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe";
  read_experts(g, c);
  if (c.arch == "gemma3") read_gemma3(g, c);
  if (c.arch == "gpt-oss") read_gpt_oss(g, c);
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
                 "MixtralForCausalLM and GptOssForCausalLM",
                 k.src, name);
  }
  const auto type = k.opt_str("model_type");
  if (type)
    for (const HfArch& h : kHfArchs)
      if (*type == h.model_type) return h;
  KV_FAIL_CODE(ErrorCode::kModelFormat,
               "{}: neither 'architectures' nor a supported 'model_type' (llama, mistral, qwen2, "
               "qwen3, qwen3_moe, qwen2_moe, mixtral, gpt_oss)",
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

// RoPE: transformers 5 writes 'rope_parameters' (rope_theta inside, with
// the scaling's keys), earlier versions 'rope_theta' and 'rope_scaling';
// the newer form wins where a folder has both.
void read_hf_rope(const JsonKeys& k, ModelConfig& c) {
  c.rope_theta = k.opt_float("rope_theta").value_or(10000.f);
  const char* key = k.find("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const nlohmann::json* rs = k.find(key);
  if (!rs) return;
  KV_CHECK(rs->is_object(), "{}: '{}' must be an object", k.src, key);
  const JsonKeys r{*rs, k.src};
  if (const auto theta = r.opt_float("rope_theta")) c.rope_theta = *theta;
  const std::string type = r.opt_str("rope_type").value_or(r.opt_str("type").value_or("default"));
  if (type == "linear") {
    const auto f = r.opt_float("factor");
    KV_CHECK(f, "{}: '{}.factor' is missing for rope_type linear", k.src, key);
    c.rope_linear_factor = *f;
  } else if (type == "llama3") {
    const auto f = r.opt_float("factor");
    KV_CHECK(f, "{}: '{}.factor' is missing for rope_type llama3", k.src, key);
    c.rope_llama3_factor = *f;
    c.rope_llama3_low_freq_factor = r.opt_float("low_freq_factor").value_or(1.f);
    c.rope_llama3_high_freq_factor = r.opt_float("high_freq_factor").value_or(4.f);
    c.rope_llama3_original_context = r.opt_int("original_max_position_embeddings").value_or(8192);
  } else if (type == "yarn") {
    read_hf_yarn(r, c);
  } else if (type != "default") {
    KV_FAIL("{}: '{}' type '{}' is not supported (linear, llama3, yarn)", k.src, key, type);
  }
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
  const std::string act = k.opt_str("hidden_act").value_or("silu");
  KV_CHECK(act == "silu", "{}: 'hidden_act' is '{}', only silu (SwiGLU) is supported", src, act);
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

  read_hf_rope(k, c);
  if (c.arch == "gpt-oss") read_hf_gpt_oss(k, c);
  read_quantization(k, c);
  c.rope_layout = RopeLayout::kHalf;  // HF checkpoints are stored rotate-half
  c.validate(src);
  return c;
}

}  // namespace kvasir
