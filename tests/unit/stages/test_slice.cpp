// The facts of a slice both backends use (stages/slice.h): the RoPE table
// with and without rope_freqs.weight, bit for bit what the CPU executor's
// constructor and the CUDA executor's load computed before they shared it
// (both copied below as the reference), the tensor names of a layer, and the
// KV bytes per block.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#include "base/check.h"
#include "stages/slice.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;

// What SliceExecutor's constructor computed (stages/forward.cpp before the
// table moved to stages/slice.cpp): config and inverse frequencies.
std::vector<float> cpu_before(const ModelConfig& c, const TensorView* freqs,
                              cpu::RopeConfig* cfg_out) {
  cpu::RopeConfig rope_;
  std::vector<float> inv_freq_;
  rope_.head_dim = c.head_dim;
  rope_.rot_dim = c.head_dim;
  rope_.theta = c.rope_theta;
  rope_.style =
      c.rope_layout == RopeLayout::kAdjacent ? cpu::RopeStyle::kAdjacent : cpu::RopeStyle::kHalf;
  rope_.llama3_factor = c.rope_llama3_factor;
  rope_.llama3_low_freq_factor = c.rope_llama3_low_freq_factor;
  rope_.llama3_high_freq_factor = c.rope_llama3_high_freq_factor;
  rope_.llama3_original_context = c.rope_llama3_original_context;
  rope_.linear_factor = c.rope_linear_factor;
  if (c.rope_freqs_tensor) {
    rope_.llama3_factor = 0.f;
    inv_freq_ = cpu::rope_inv_freq(rope_);
    const int64_t half = int64_t(inv_freq_.size());
    const float* f = static_cast<const float*>(freqs->data);
    for (int64_t i = 0; i < half; ++i) inv_freq_[size_t(i)] /= f[i];
  } else {
    inv_freq_ = cpu::rope_inv_freq(rope_);
  }
  *cfg_out = rope_;
  return inv_freq_;
}

// What CudaSliceExecutor::load computed (stages/cuda/executor.cpp before).
std::vector<float> gpu_before(const ModelConfig& c, const TensorView* freqs) {
  cpu::RopeConfig rc;
  rc.head_dim = c.head_dim;
  rc.rot_dim = c.head_dim;
  rc.theta = c.rope_theta;
  rc.style = c.rope_layout == kvasir::RopeLayout::kAdjacent ? cpu::RopeStyle::kAdjacent
                                                            : cpu::RopeStyle::kHalf;
  rc.llama3_factor = c.rope_llama3_factor;
  rc.llama3_low_freq_factor = c.rope_llama3_low_freq_factor;
  rc.llama3_high_freq_factor = c.rope_llama3_high_freq_factor;
  rc.llama3_original_context = c.rope_llama3_original_context;
  rc.linear_factor = c.rope_linear_factor;
  if (c.rope_freqs_tensor) rc.llama3_factor = 0.f;
  std::vector<float> inv = cpu::rope_inv_freq(rc);
  if (c.rope_freqs_tensor) {
    const float* fr = static_cast<const float*>(freqs->data);
    for (size_t i = 0; i < inv.size(); ++i) inv[i] /= fr[i];
  }
  return inv;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same_config(const cpu::RopeConfig& a, const cpu::RopeConfig& b) {
  return a.head_dim == b.head_dim && a.rot_dim == b.rot_dim && a.theta == b.theta &&
         a.style == b.style && a.llama3_factor == b.llama3_factor &&
         a.llama3_low_freq_factor == b.llama3_low_freq_factor &&
         a.llama3_high_freq_factor == b.llama3_high_freq_factor &&
         a.llama3_original_context == b.llama3_original_context &&
         a.linear_factor == b.linear_factor;
}

TensorView f32_vector(const std::vector<float>& v) {
  TensorView t;
  t.type = DType::F32;
  t.n_dims = 1;
  t.ne[0] = int64_t(v.size());
  t.data = v.data();
  t.nbytes = v.size() * sizeof(float);
  return t;
}

ModelConfig llama(int head_dim, float theta) {
  ModelConfig c;
  c.arch = "llama";
  c.head_dim = head_dim;
  c.rope_theta = theta;
  return c;
}

// Checks rope_table against both old computations.
void expect_as_before(const ModelConfig& c, const TensorView* freqs, const char* what) {
  SCOPED_TRACE(what);
  const RopeTable t = rope_table(c, freqs);
  cpu::RopeConfig cpu_cfg;
  const std::vector<float> cpu = cpu_before(c, freqs, &cpu_cfg);
  EXPECT_TRUE(same_bits(t.inv_freq, cpu)) << "differs from the CPU executor's table";
  EXPECT_TRUE(same_bits(t.inv_freq, gpu_before(c, freqs))) << "differs from the GPU's table";
  EXPECT_TRUE(same_config(t.config, cpu_cfg)) << "differs from the CPU executor's config";
  EXPECT_EQ(t.inv_freq.size(), size_t(c.head_dim / 2));
}

TEST(SliceRope, PlainAdjacentAndHalf) {
  ModelConfig c = llama(64, 10000.f);
  expect_as_before(c, nullptr, "adjacent");
  c.rope_layout = RopeLayout::kHalf;
  c.rope_theta = 1000000.f;
  expect_as_before(c, nullptr, "half");
  const RopeTable t = rope_table(c, nullptr);
  EXPECT_EQ(t.config.style, cpu::RopeStyle::kHalf);
  EXPECT_EQ(t.inv_freq[0], 1.f);  // theta^0
}

TEST(SliceRope, LinearScalingDividesPositionsNotTheTable) {
  ModelConfig c = llama(64, 10000.f);
  const RopeTable plain = rope_table(c, nullptr);
  c.rope_linear_factor = 4.f;
  expect_as_before(c, nullptr, "linear 4");
  const RopeTable lin = rope_table(c, nullptr);
  EXPECT_TRUE(same_bits(plain.inv_freq, lin.inv_freq));
  EXPECT_EQ(lin.config.linear_factor, 4.f);
}

// The sliding layers rotate with their own base; Gemma 3 scales only its
// global layers (the 4B+: linear 8), gpt-oss both kinds (YaRN).
TEST(SliceRope, SlidingLayersTakeTheScalingOnlyWhereTheFamilyDoes) {
  ModelConfig c = llama(64, 1000000.f);
  c.rope_layout = RopeLayout::kHalf;
  c.rope_theta_local = 10000.f;
  c.rope_linear_factor = 8.f;
  c.rope_scaling_local = false;  // Gemma 3
  const RopeTable global = rope_table(c, nullptr);
  const RopeTable local = local_rope_table(c, nullptr);
  EXPECT_EQ(global.config.linear_factor, 8.f);
  EXPECT_EQ(local.config.linear_factor, 1.f);
  EXPECT_EQ(local.config.theta, 10000.f);
  EXPECT_EQ(global.config.theta, 1000000.f);

  c.rope_linear_factor = 1.f;
  c.rope_yarn_factor = 32.f;
  c.rope_yarn_original_context = 4096;
  c.rope_scaling_local = true;  // gpt-oss
  const RopeTable yarn_local = local_rope_table(c, nullptr);
  EXPECT_EQ(yarn_local.config.yarn_factor, 32.f);
  c.rope_scaling_local = false;
  EXPECT_EQ(local_rope_table(c, nullptr).config.yarn_factor, 0.f);
  EXPECT_FALSE(same_bits(yarn_local.inv_freq, local_rope_table(c, nullptr).inv_freq));
}

TEST(SliceRope, Llama3MetadataScaling) {
  ModelConfig c = llama(128, 500000.f);
  c.rope_llama3_factor = 8.f;
  c.rope_llama3_low_freq_factor = 1.f;
  c.rope_llama3_high_freq_factor = 4.f;
  c.rope_llama3_original_context = 8192;
  expect_as_before(c, nullptr, "llama3 8192");
  const RopeTable scaled = rope_table(c, nullptr);
  EXPECT_EQ(scaled.config.llama3_factor, 8.f);
  ModelConfig plain = c;
  plain.rope_llama3_factor = 0.f;
  const RopeTable unscaled = rope_table(plain, nullptr);
  EXPECT_EQ(scaled.inv_freq[0], unscaled.inv_freq[0]);    // high frequency: kept
  EXPECT_LT(scaled.inv_freq[63], unscaled.inv_freq[63]);  // low frequency: divided
}

TEST(SliceRope, RopeFreqsDivisorsReplaceLlama3Scaling) {
  // A Llama-3 GGUF file: the divisors llama.cpp's converter writes, and
  // (here on purpose) llama3 metadata too, which must then be ignored.
  test::TinySpec spec;
  spec.hidden = 256;
  spec.heads = 2;  // head_dim 128
  spec.rope_theta = 500000.f;
  spec.llama3_factor = 8.f;
  spec.llama3_original_context = 8192;
  const std::vector<float> divisors = test::llama3_rope_factors(spec);
  ASSERT_EQ(divisors.size(), 64u);
  const TensorView freqs = f32_vector(divisors);
  ModelConfig c = llama(128, 500000.f);
  c.rope_freqs_tensor = true;
  c.rope_llama3_factor = 8.f;
  expect_as_before(c, &freqs, "rope_freqs + llama3 metadata");
  const RopeTable t = rope_table(c, &freqs);
  EXPECT_EQ(t.config.llama3_factor, 0.f);
  ModelConfig plain = llama(128, 500000.f);
  const RopeTable p = rope_table(plain, nullptr);
  for (size_t i = 0; i < divisors.size(); ++i)
    EXPECT_EQ(t.inv_freq[i], p.inv_freq[i] / divisors[i]) << i;
  // And the divided table is the llama3-scaled one, to f32 rounding.
  ModelConfig meta = plain;
  meta.rope_llama3_factor = 8.f;
  const RopeTable m = rope_table(meta, nullptr);
  for (size_t i = 0; i < divisors.size(); ++i)
    EXPECT_NEAR(t.inv_freq[i], m.inv_freq[i], 1e-5f * m.inv_freq[i]) << i;
}

TEST(SliceRope, BadRopeFreqsAreRefusedAsAModelFormatError) {
  ModelConfig c = llama(8, 10000.f);
  c.rope_freqs_tensor = true;
  auto code_of = [&](const TensorView* t) {
    try {
      (void)rope_table(c, t);
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kOk;
  };
  EXPECT_EQ(code_of(nullptr), ErrorCode::kModelFormat);
  test::expect_error([&] { (void)rope_table(c, nullptr); }, {"rope_freqs.weight", "missing"});
  const std::vector<float> short_one(3, 1.f);
  const TensorView s = f32_vector(short_one);
  EXPECT_EQ(code_of(&s), ErrorCode::kModelFormat);
  test::expect_error([&] { (void)rope_table(c, &s); }, {"rope_freqs.weight", "4 values"});
  for (float bad : {0.f, -1.f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> v(4, 1.f);
    v[2] = bad;
    const TensorView t = f32_vector(v);
    EXPECT_EQ(code_of(&t), ErrorCode::kModelFormat) << bad;
    test::expect_error([&] { (void)rope_table(c, &t); }, {"rope_freqs.weight[2]", "positive"});
  }
  std::vector<float> ok(4, 2.f);
  TensorView f16 = f32_vector(ok);
  f16.type = DType::F16;
  EXPECT_EQ(code_of(&f16), ErrorCode::kModelFormat);
}

// The table as both executors read it from a model file: a tiny Llama-3
// GGUF (rope_freqs.weight) and its safetensors twin (llama3 metadata), and
// the default model where present.
TEST(SliceRope, FromModelFiles) {
  test::TempDir d;
  test::TinySpec spec;
  spec.llama3_factor = 8.f;
  spec.llama3_original_context = 32;
  test::write_tiny_gguf(d.file("l3.gguf"), spec);
  test::write_tiny_safetensors(d.file("hf"), spec);
  auto g = ModelFile::open(d.file("l3.gguf"));
  auto s = ModelFile::open(d.file("hf"));
  ASSERT_TRUE(g->config().rope_freqs_tensor);
  expect_as_before(g->config(), g->find(kRopeFreqsTensor), "tiny gguf");
  expect_as_before(s->config(), nullptr, "tiny safetensors");
  EXPECT_TRUE(same_bits(rope_table(*g).inv_freq,
                        rope_table(g->config(), g->find(kRopeFreqsTensor)).inv_freq));
  EXPECT_EQ(rope_table(*s).config.style, cpu::RopeStyle::kHalf);

  const fs::path def = fs::path(KVASIR_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(def)) GTEST_SKIP() << "default model absent: run scripts/fetch-model";
  auto m = ModelFile::open(def.string());
  expect_as_before(m->config(), m->find(kRopeFreqsTensor), "default model");
  EXPECT_TRUE(same_bits(rope_table(*m).inv_freq, gpu_before(m->config(), nullptr)));
}

TEST(SliceTensors, NamesOfALayer) {
  const LayerTensorNames n = layer_tensor_names(7);
  EXPECT_EQ(n.attn_norm, "blk.7.attn_norm.weight");
  EXPECT_EQ(n.ffn_norm, "blk.7.ffn_norm.weight");
  EXPECT_EQ(n.attn_q, "blk.7.attn_q.weight");
  EXPECT_EQ(n.attn_k, "blk.7.attn_k.weight");
  EXPECT_EQ(n.attn_v, "blk.7.attn_v.weight");
  EXPECT_EQ(n.attn_output, "blk.7.attn_output.weight");
  EXPECT_EQ(n.ffn_gate, "blk.7.ffn_gate.weight");
  EXPECT_EQ(n.ffn_up, "blk.7.ffn_up.weight");
  EXPECT_EQ(n.ffn_down, "blk.7.ffn_down.weight");
  EXPECT_EQ(n.attn_q_bias, "blk.7.attn_q.bias");
  EXPECT_EQ(n.attn_k_bias, "blk.7.attn_k.bias");
  EXPECT_EQ(n.attn_v_bias, "blk.7.attn_v.bias");
  EXPECT_EQ(n.attn_q_norm, "blk.7.attn_q_norm.weight");
  EXPECT_EQ(n.attn_k_norm, "blk.7.attn_k_norm.weight");
  EXPECT_EQ(n.ffn_gate_inp, "blk.7.ffn_gate_inp.weight");
  EXPECT_EQ(n.ffn_gate_inp_shexp, "blk.7.ffn_gate_inp_shexp.weight");
  EXPECT_EQ(n.ffn_gate_shexp, "blk.7.ffn_gate_shexp.weight");
  EXPECT_EQ(n.ffn_up_shexp, "blk.7.ffn_up_shexp.weight");
  EXPECT_EQ(n.ffn_down_shexp, "blk.7.ffn_down_shexp.weight");
  EXPECT_EQ(n.post_attn_norm, "blk.7.post_attention_norm.weight");
  EXPECT_EQ(n.post_ffn_norm, "blk.7.post_ffw_norm.weight");
  EXPECT_EQ(n.attn_sinks, "blk.7.attn_sinks.weight");
  EXPECT_EQ(n.attn_output_bias, "blk.7.attn_output.bias");
  EXPECT_EQ(n.ffn_gate_inp_bias, "blk.7.ffn_gate_inp.bias");
  EXPECT_EQ(n.ffn_gate_exps_bias, "blk.7.ffn_gate_exps.bias");
  EXPECT_EQ(n.ffn_up_exps_bias, "blk.7.ffn_up_exps.bias");
  EXPECT_EQ(n.ffn_down_exps_bias, "blk.7.ffn_down_exps.bias");
  const auto all = n.all();
  ASSERT_EQ(all.size(), 27u);
  EXPECT_EQ(all.front(), n.attn_norm);
  EXPECT_EQ(all[11], n.attn_v_bias);
  EXPECT_EQ(all[18], n.ffn_down_shexp);
  EXPECT_EQ(all[20], n.post_ffn_norm);
  EXPECT_EQ(all.back(), n.ffn_down_exps_bias);
  EXPECT_EQ(n.expert_stacks(),
            (std::vector<std::string>{"blk.7.ffn_gate_exps.weight", "blk.7.ffn_up_exps.weight",
                                      "blk.7.ffn_down_exps.weight"}));
  ModelConfig c;
  EXPECT_STREQ(output_tensor_name(c), "output.weight");
  c.tied_embeddings = true;
  EXPECT_STREQ(output_tensor_name(c), "token_embd.weight");
}

TEST(SliceKv, BytesPerBlock) {
  ModelConfig c;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  // layers x K,V x heads x block_size x head_dim x element
  EXPECT_EQ(kv_block_bytes(c, 15, 16, 2), 15ull * 2 * 3 * 16 * 64 * 2);
  EXPECT_EQ(slice_kv_block_bytes(c, SliceSpec{2, 16, false, false}, KvSpec{0, 16, DType::F16}),
            15ull * 2 * 3 * 16 * 64 * 2);
  EXPECT_EQ(slice_kv_block_bytes(c, SliceSpec{0, 0, true, true}, KvSpec{0, 32, DType::F32}),
            1ull * 2 * 3 * 32 * 64 * 4);
  EXPECT_EQ(kv_elem_bytes(DType::F16), 2u);
  EXPECT_EQ(kv_elem_bytes(DType::F32), 4u);
  test::expect_error([] { (void)kv_elem_bytes(DType::Q8_0); }, {"kv.dtype must be f16 or f32"});
}

}  // namespace
}  // namespace kvasir
