// stages/slice.h — what a stage holds (a slice of a model's layers) and the
// facts about it that every backend uses, computed in one place: the names
// of its tensors, the RoPE inverse-frequency table, the KV bytes per block.
// The CPU slice executor (stages/forward.h) and the CUDA executor
// (stages/cuda/executor.h) both read them from here, so the two cannot
// drift apart (a GPU that ignored Llama-3's rope_freqs.weight did).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/tensor.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/rope.h"
#include "model/config.h"
#include "model/model_file.h"

namespace kvasir {

struct SliceSpec {
  int first_layer = 0;
  int last_layer = 0;  // inclusive
  bool head = false;   // embeds token ids
  bool tail = false;   // final norm + output head
  // An expert group's leader (docs/expert-groups.md): the experts of its MoE
  // layers it holds, inclusive (the group's lowest range, from 0); the rest
  // are its members' (SliceExecutor::set_peers). -1: every expert.
  int experts_first = -1, experts_last = -1;
  // An expert group's member: the slice is only the experts above (no
  // attention, norms, router or shared expert; preload_slice).
  bool experts_only = false;
};

struct KvSpec {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  DType type = DType::F16;  // F16 or F32 on the CPU
  // > 0: the sliding-window layers' own pool (a sliding group,
  // docs/scheduler.md): they hold this many blocks and read each row's
  // sliding table (ForwardRow::block_table_swa). 0: every layer holds
  // n_blocks and reads the one table (the masking path).
  int32_t n_blocks_swa = 0;
};

// --- Tensor names (GGUF's; model/ maps a safetensors folder's to them) ----

inline constexpr const char* kTokenEmbdTensor = "token_embd.weight";
inline constexpr const char* kOutputNormTensor = "output_norm.weight";
inline constexpr const char* kOutputTensor = "output.weight";
inline constexpr const char* kRopeFreqsTensor = "rope_freqs.weight";

// The output head's tensor: output.weight, or token_embd.weight when the
// model ties its embeddings.
const char* output_tensor_name(const ModelConfig& c);

// The tensors of one layer: "blk.N.attn_q.weight", ... Which exist depends
// on the config: the three biases where ModelConfig::qkv_bias is set
// (Qwen2), the q/k norms where qk_norm is (Qwen3, Gemma 3), the post-norms
// where post_norms is (Gemma 3); a MoE layer
// (ModelConfig::moe()) has the router and the three expert stacks instead
// of ffn_gate/up/down (read per expert: ModelFile::find_experts), and the
// shared expert where shared_expert_ffn > 0 (Qwen2-MoE).
struct LayerTensorNames {
  std::string attn_norm, ffn_norm;
  std::string attn_q, attn_k, attn_v, attn_output;
  std::string ffn_gate, ffn_up, ffn_down;
  std::string attn_q_bias, attn_k_bias, attn_v_bias;
  std::string attn_q_norm, attn_k_norm;
  std::string ffn_gate_inp;                               // router [hidden] -> [n_experts]
  std::string ffn_gate_exps, ffn_up_exps, ffn_down_exps;  // expert stacks
  std::string ffn_gate_inp_shexp;                         // shared expert's gate [hidden]
  std::string ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;
  std::string post_attn_norm, post_ffn_norm;  // Gemma 3's norms of the blocks' outputs
  // gpt-oss: sinks [n_heads], the output's and the router's biases, the
  // experts' biases [n_experts, ffn or hidden] (2-D, not stacks of matrices).
  std::string attn_sinks, attn_output_bias, ffn_gate_inp_bias;
  std::string ffn_gate_exps_bias, ffn_up_exps_bias, ffn_down_exps_bias;

  // Every single-tensor name above, in that order (weights, biases, norms,
  // router, shared expert, post-norms, gpt-oss's); not the expert stacks.
  std::vector<std::string> all() const;
  // The three expert stacks.
  std::vector<std::string> expert_stacks() const;
};
LayerTensorNames layer_tensor_names(int layer);

// gpt-oss's expert extras on a layer's experts (any range of them): the
// biases (F32 [n_experts, ffn or hidden], checked) and the clamped SwiGLU.
// Nothing for the other families. Throws kvasir::Error (kModelFormat) naming
// a missing or misshapen tensor.
void map_expert_extras(const ModelFile& model, const LayerTensorNames& n, cpu::MoeExperts& e);

// --- RoPE ---------------------------------------------------------------

// A model's rotary embedding: the rotation (kernels/cpu/rope.h's config:
// layout, dimensions, position divisor for linear scaling) and the inverse
// frequencies, one per rotated pair ([head_dim / 2]), with the model's
// frequency scaling applied:
//   - a rope_freqs.weight tensor (Llama-3 GGUF files, as llama.cpp's
//     converter writes them): theta^(-2i/d) divided by its per-pair
//     divisors and no other llama3 scaling (llama.cpp's rule; config's
//     llama3_factor is then 0);
//   - else llama3 or YaRN scaling from the metadata, as cpu::rope_inv_freq
//     computes it (YaRN's magnitude factor: ModelConfig::attention_scale).
// Linear scaling is not in the table: cpu::rope (and the CUDA kernel)
// divide positions by config.linear_factor.
struct RopeTable {
  cpu::RopeConfig config;
  std::vector<float> inv_freq;
};

// rope_freqs: the model's rope_freqs.weight, required when
// c.rope_freqs_tensor and ignored otherwise. Throws kvasir::Error
// (kModelFormat) when it is missing, is not F32 with head_dim / 2 values,
// or holds a divisor that is not finite and positive; kInvalidArgument for
// a rotation config cpu::rope_inv_freq refuses.
RopeTable rope_table(const ModelConfig& c, const TensorView* rope_freqs);
// The same, with rope_freqs.weight looked up in `model`.
RopeTable rope_table(const ModelFile& model);
// The sliding-window layers' table: rope_theta_local, and the model's
// scaling only where ModelConfig::rope_scaling_local says they take it
// (gpt-oss: yes; Gemma 3: its global layers alone are scaled).
RopeTable local_rope_table(const ModelFile& model);
RopeTable local_rope_table(const ModelConfig& c, const TensorView* rope_freqs);

// --- KV -------------------------------------------------------------------

// Bytes of one element of a CPU stage's KV cache: 2 (F16) or 4 (F32).
// Throws kvasir::Error for any other type.
uint64_t kv_elem_bytes(DType t);
// KV bytes per block of this slice's layers (kv_block_bytes, model/config.h).
uint64_t slice_kv_block_bytes(const ModelConfig& c, const SliceSpec& s, const KvSpec& kv);
// The slice's sliding-window layers (ModelConfig::layer_slides).
int32_t sliding_layers(const ModelConfig& c, const SliceSpec& s);

}  // namespace kvasir
