// stages/slice.cpp — see slice.h.
#include "stages/slice.h"

#include <cmath>

#include "base/check.h"

namespace kvasir {

const char* output_tensor_name(const ModelConfig& c) {
  return c.tied_embeddings ? kTokenEmbdTensor : kOutputTensor;
}

LayerTensorNames layer_tensor_names(int layer) {
  const std::string b = "blk." + std::to_string(layer) + ".";
  LayerTensorNames n;
  n.attn_norm = b + "attn_norm.weight";
  n.ffn_norm = b + "ffn_norm.weight";
  n.attn_q = b + "attn_q.weight";
  n.attn_k = b + "attn_k.weight";
  n.attn_v = b + "attn_v.weight";
  n.attn_output = b + "attn_output.weight";
  n.ffn_gate = b + "ffn_gate.weight";
  n.ffn_up = b + "ffn_up.weight";
  n.ffn_down = b + "ffn_down.weight";
  n.attn_q_bias = b + "attn_q.bias";
  n.attn_k_bias = b + "attn_k.bias";
  n.attn_v_bias = b + "attn_v.bias";
  n.attn_q_norm = b + "attn_q_norm.weight";
  n.attn_k_norm = b + "attn_k_norm.weight";
  n.ffn_gate_inp = b + "ffn_gate_inp.weight";
  n.ffn_gate_exps = b + "ffn_gate_exps.weight";
  n.ffn_up_exps = b + "ffn_up_exps.weight";
  n.ffn_down_exps = b + "ffn_down_exps.weight";
  n.ffn_gate_inp_shexp = b + "ffn_gate_inp_shexp.weight";
  n.ffn_gate_shexp = b + "ffn_gate_shexp.weight";
  n.ffn_up_shexp = b + "ffn_up_shexp.weight";
  n.ffn_down_shexp = b + "ffn_down_shexp.weight";
  n.post_attn_norm = b + "post_attention_norm.weight";
  n.post_ffn_norm = b + "post_ffw_norm.weight";
  n.attn_sinks = b + "attn_sinks.weight";
  n.attn_output_bias = b + "attn_output.bias";
  n.ffn_gate_inp_bias = b + "ffn_gate_inp.bias";
  n.ffn_gate_exps_bias = b + "ffn_gate_exps.bias";
  n.ffn_up_exps_bias = b + "ffn_up_exps.bias";
  n.ffn_down_exps_bias = b + "ffn_down_exps.bias";
  return n;
}

void map_expert_extras(const ModelFile& model, const LayerTensorNames& n, cpu::MoeExperts& e) {
  const ModelConfig& c = model.config();
  if (!c.gpt_oss) return;
  auto bias = [&](const std::string& name, int64_t width) {
    const TensorView& t = model.get(name);
    KV_CHECK_CODE(t.type == DType::F32 && t.ne[0] == width && t.rows() == c.n_experts,
                  ErrorCode::kModelFormat, "{}: '{}' must be F32 [{} x {}] (got {} [{} x {}])",
                  model.path(), name, c.n_experts, width, dtype_name(t.type), t.rows(), t.ne[0]);
    return static_cast<const float*>(t.data);
  };
  e.gate_bias = bias(n.ffn_gate_exps_bias, c.expert_ffn);
  e.up_bias = bias(n.ffn_up_exps_bias, c.expert_ffn);
  e.down_bias = bias(n.ffn_down_exps_bias, c.hidden);
  e.act = cpu::MoeAct::kSwigluOai;
}

std::vector<std::string> LayerTensorNames::all() const {
  return {attn_norm,
          ffn_norm,
          attn_q,
          attn_k,
          attn_v,
          attn_output,
          ffn_gate,
          ffn_up,
          ffn_down,
          attn_q_bias,
          attn_k_bias,
          attn_v_bias,
          attn_q_norm,
          attn_k_norm,
          ffn_gate_inp,
          ffn_gate_inp_shexp,
          ffn_gate_shexp,
          ffn_up_shexp,
          ffn_down_shexp,
          post_attn_norm,
          post_ffn_norm,
          attn_sinks,
          attn_output_bias,
          ffn_gate_inp_bias,
          ffn_gate_exps_bias,
          ffn_up_exps_bias,
          ffn_down_exps_bias};
}

std::vector<std::string> LayerTensorNames::expert_stacks() const {
  return {ffn_gate_exps, ffn_up_exps, ffn_down_exps};
}

RopeTable rope_table(const ModelConfig& c, const TensorView* rope_freqs) {
  RopeTable t;
  cpu::RopeConfig& rc = t.config;
  rc.head_dim = c.head_dim;
  rc.rot_dim = c.head_dim;
  rc.theta = c.rope_theta;
  rc.style =
      c.rope_layout == RopeLayout::kAdjacent ? cpu::RopeStyle::kAdjacent : cpu::RopeStyle::kHalf;
  rc.llama3_factor = c.rope_llama3_factor;
  rc.llama3_low_freq_factor = c.rope_llama3_low_freq_factor;
  rc.llama3_high_freq_factor = c.rope_llama3_high_freq_factor;
  rc.llama3_original_context = c.rope_llama3_original_context;
  rc.linear_factor = c.rope_linear_factor;
  rc.yarn_factor = c.rope_yarn_factor;
  rc.yarn_original_context = c.rope_yarn_original_context;
  rc.yarn_beta_fast = c.rope_yarn_beta_fast;
  rc.yarn_beta_slow = c.rope_yarn_beta_slow;
  rc.yarn_ext_factor = c.rope_yarn_ext_factor;
  rc.yarn_truncate = c.rope_yarn_truncate;
  if (!c.rope_freqs_tensor) {
    t.inv_freq = cpu::rope_inv_freq(rc);
    return t;
  }
  // Llama-3 GGUF files carry the scaling as per-pair frequency divisors
  // (rope_freqs.weight, written by llama.cpp's converter). llama.cpp then
  // divides theta^(-2i/d) by them and applies no other llama3 scaling, so
  // neither do we: the plain frequencies, divided.
  rc.llama3_factor = 0.f;
  t.inv_freq = cpu::rope_inv_freq(rc);
  const int64_t half = int64_t(t.inv_freq.size());
  KV_CHECK_CODE(rope_freqs != nullptr, ErrorCode::kModelFormat, "tensor '{}' is missing",
                kRopeFreqsTensor);
  KV_CHECK_CODE(
      rope_freqs->type == DType::F32 && rope_freqs->cols() == half && rope_freqs->rows() == 1,
      ErrorCode::kModelFormat, "{} must be F32 with {} values (got {} [{} x {}])", kRopeFreqsTensor,
      half, dtype_name(rope_freqs->type), rope_freqs->rows(), rope_freqs->cols());
  const float* f = static_cast<const float*>(rope_freqs->data);
  for (int64_t i = 0; i < half; ++i) {
    KV_CHECK_CODE(std::isfinite(f[i]) && f[i] > 0.f, ErrorCode::kModelFormat,
                  "{}[{}] is {}: frequency divisors must be finite and positive", kRopeFreqsTensor,
                  i, f[i]);
    t.inv_freq[size_t(i)] /= f[i];
  }
  return t;
}

RopeTable rope_table(const ModelFile& model) {
  const ModelConfig& c = model.config();
  const TensorView* freqs = c.rope_freqs_tensor ? model.find(kRopeFreqsTensor) : nullptr;
  KV_CHECK_CODE(freqs != nullptr || !c.rope_freqs_tensor, ErrorCode::kModelFormat,
                "{}: tensor '{}' is missing", model.path(), kRopeFreqsTensor);
  return rope_table(c, freqs);
}

RopeTable local_rope_table(const ModelConfig& c, const TensorView* rope_freqs) {
  ModelConfig local = c;
  local.rope_theta = c.rope_theta_local;
  if (!c.rope_scaling_local) {
    const ModelConfig unscaled;
    local.rope_linear_factor = unscaled.rope_linear_factor;
    local.rope_llama3_factor = unscaled.rope_llama3_factor;
    local.rope_yarn_factor = unscaled.rope_yarn_factor;
  }
  return rope_table(local, rope_freqs);
}

RopeTable local_rope_table(const ModelFile& model) {
  return local_rope_table(model.config(), model.find(kRopeFreqsTensor));
}

uint64_t kv_elem_bytes(DType t) {
  KV_CHECK(t == DType::F16 || t == DType::F32, "kv.dtype must be f16 or f32 (got {})",
           dtype_name(t));
  return t == DType::F16 ? 2 : 4;
}

int32_t sliding_layers(const ModelConfig& c, const SliceSpec& s) {
  int32_t n = 0;
  for (int32_t il = s.first_layer; il <= s.last_layer; ++il) n += c.layer_slides(il) ? 1 : 0;
  return n;
}

uint64_t slice_kv_block_bytes(const ModelConfig& c, const SliceSpec& s, const KvSpec& kv) {
  return kv_block_bytes(c, s.last_layer - s.first_layer + 1, kv.block_size,
                        int32_t(kv_elem_bytes(kv.type)));
}

}  // namespace kvasir
