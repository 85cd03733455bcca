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
#include "model/config_internal.h"
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

}  // namespace

void check_expert_counts(const std::string& src, const std::string& n_key, int64_t n,
                         const std::string& k_key, int64_t k) {
  KV_CHECK_CODE(n >= 1 && n <= kMaxExperts, ErrorCode::kModelFormat,
                "{}: '{}' is {}, must be in [1, {}]", src, n_key, n, kMaxExperts);
  KV_CHECK_CODE(k >= 1 && k <= n, ErrorCode::kModelFormat,
                "{}: '{}' is {}: each token must use 1 to '{}' = {} experts", src, k_key, k, n_key,
                n);
}

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
  c.rope_scaling_local = false;
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

}  // namespace kvasir
