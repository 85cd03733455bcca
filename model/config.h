// model/config.h — the shape of a Llama-family decoder, read from the file.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace kvasir {

enum class RopeLayout { kAdjacent, kHalf };

// The most experts a layer may have (Qwen3-235B: 128, DeepSeek-V3: 256).
inline constexpr int32_t kMaxExperts = 1024;  // see docs/model-formats.md and kernels/cpu/rope.h

struct ModelConfig {
  // GGUF's architecture name: "llama" (Mixtral too: llama with experts),
  // "mistral", "qwen2", "qwen3", "qwen3moe", "qwen2moe", "gemma3", "gpt-oss".
  std::string arch;
  std::string name;  // general.name or the folder name
  int32_t n_layers = 0;
  int32_t hidden = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t ffn = 0;
  int32_t vocab = 0;
  int32_t context_length = 0;
  float rope_theta = 10000.f;
  RopeLayout rope_layout = RopeLayout::kAdjacent;
  // Llama 3.x rope scaling (rope_scaling.rope_type == "llama3"); factor 0 = none.
  float rope_llama3_factor = 0.f;
  float rope_llama3_low_freq_factor = 1.f;
  float rope_llama3_high_freq_factor = 4.f;
  int32_t rope_llama3_original_context = 8192;
  float rope_linear_factor = 1.f;
  // YaRN (rope.scaling.type "yarn"; kernels/cpu/rope.h); factor 0 = none.
  float rope_yarn_factor = 0.f;
  int32_t rope_yarn_original_context = 0;
  float rope_yarn_beta_fast = 32.f;
  float rope_yarn_beta_slow = 1.f;
  float rope_yarn_ext_factor = 1.f;
  bool rope_yarn_truncate = true;  // kernels/cpu/rope.h RopeConfig::yarn_truncate
  // GGUF llama3 models carry their frequency scaling precomputed as the
  // tensor rope_freqs.weight [head_dim / 2] (divisors of the inverse
  // frequencies) rather than as metadata; true when that tensor is present.
  bool rope_freqs_tensor = false;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // output head = token embedding
  bool qkv_bias = false;         // Qwen2 (and Qwen2-MoE files that carry them)
  bool qk_norm = false;          // Qwen3: RMSNorm over each head of q and k before RoPE
  // FP8 (E4M3) weight matrices, each with one scale per tensor or per output
  // row (config.json's quantization_config: quant_method fp8, fbgemm_fp8,
  // or compressed-tensors with 8-bit float weights; docs/model-formats.md).
  // The CUDA backend reads them; the CPU backend refuses such a model.
  bool fp8_weights = false;

  // Gemma 3 (docs/model-formats.md, "Gemma 3"), the defaults leaving every
  // other family as it was. With sliding_window > 0 the layers for which
  // layer_slides() holds attend to the last sliding_window positions only
  // and rotate with rope_theta_local instead of rope_theta.
  int32_t sliding_window = 0;
  // Every sliding_pattern-th layer is global (llama.cpp's set_swa_pattern:
  // layer il slides when il % n < n - 1; n 0: every layer slides).
  int32_t sliding_pattern = 0;
  float rope_theta_local = 10000.f;
  // Whether the sliding layers take the rope scaling too: gpt-oss's do,
  // Gemma 3's do not (its 4B+ scale only the global layers; llama.cpp's
  // rope_freq_scale_train_swa stays 1 for gemma3).
  bool rope_scaling_local = true;
  float attn_scale = 0.f;        // q·k scale; 0: 1/sqrt(head_dim)
  float embed_scale = 1.f;       // token embeddings are multiplied by it (Gemma: sqrt(hidden))
  bool post_norms = false;       // RMSNorm of attention's and the FFN's outputs before each add
  bool gelu_ffn = false;         // GeGLU, gelu_tanh(gate) * up, instead of SwiGLU
  float final_logit_softcap = 0.f;  // > 0: logits = cap * tanh(logits / cap)

  // gpt-oss (docs/model-formats.md, "gpt-oss"): a learned sink logit per
  // head in every softmax (blk.N.attn_sinks.weight), a bias on the attention
  // output, biases on the router and the experts, the clamped SwiGLU
  // (kernels/cpu/norm.h swiglu_oai), and the pre-FFN norm stored as
  // post_attention_norm.
  bool gpt_oss = false;

  bool layer_slides(int32_t il) const {
    if (sliding_window <= 0) return false;
    return sliding_pattern == 0 || il % sliding_pattern < sliding_pattern - 1;
  }
  // q·k's scale. YaRN's magnitude factor multiplies q and k alike, so its
  // square lands here (kernels/cpu/rope.h).
  float attention_scale() const {
    const float base = attn_scale > 0.f ? attn_scale : 1.f / std::sqrt(float(head_dim));
    const float m = rope_yarn_factor > 1.f && rope_yarn_ext_factor != 0.f
                        ? 1.f + 0.1f * std::log(rope_yarn_factor)
                        : 1.f;
    return base * m * m;
  }

  // Mixture of experts (docs/model-formats.md, "Mixture of experts"). With
  // n_experts > 0 every layer's FFN is routed: a router picks n_experts_used
  // of n_experts experts per token (softmax over all, then the top k),
  // each a SwiGLU FFN of width expert_ffn; `ffn` is then unused.
  int32_t n_experts = 0;
  int32_t n_experts_used = 0;
  int32_t expert_ffn = 0;
  // Renormalise the k chosen probabilities to sum 1 (Qwen3-MoE, Mixtral);
  // Qwen2-MoE keeps them as the softmax over all experts gave them.
  bool expert_norm_topk = false;
  // Qwen2-MoE: one shared expert of this width on every token, its output
  // scaled by sigmoid(ffn_gate_inp_shexp · x); 0 = none.
  int32_t shared_expert_ffn = 0;

  bool moe() const { return n_experts > 0; }

  // Throws kvasir::Error naming the field if the shape is inconsistent
  // (zero sizes, heads not dividing hidden, kv heads not dividing heads...).
  void validate(const std::string& source) const;
  // The expert fields alone (part of validate); kModelFormat naming the field.
  void validate_experts(const std::string& source) const;
};

// Bytes of KV cache one block takes over `n_layers` layers of `model`: a K
// and a V row of n_kv_heads x head_dim elements for each of block_size
// tokens, elem_bytes each (2 for f16 and bf16, 4 for f32). What the daemon
// divides kv.memory by, a CPU stage its kv.memory and a GPU stage its share
// of free device memory.
uint64_t kv_block_bytes(const ModelConfig& model, int32_t n_layers, int32_t block_size,
                        int32_t elem_bytes);

class GgufFile;

// From `<arch>.*` GGUF metadata (llama, mistral, qwen2, qwen3, qwen3moe,
// qwen2moe, gemma3, gpt-oss) and the tensor list (tied embeddings = no output.weight).
// Validated; throws kvasir::Error naming the file and the key.
ModelConfig config_from_gguf(const GgufFile& f);

// From a Hugging Face config.json (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM,
// Qwen2MoeForCausalLM, MixtralForCausalLM). `source` names the file in messages; `name` becomes
// ModelConfig::name. Validated; rope layout is always kHalf.
ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& source,
                                const std::string& name);

}  // namespace kvasir
