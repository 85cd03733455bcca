#include "tests/support/tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/fp8.h"
#include "base/half.h"
#include "model/gpt_oss_experts.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quant.h"

namespace kvasir::test {
namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Normal values from a stream seeded by (seed, name): Box-Muller.
std::vector<float> normal(uint64_t seed, const std::string& name, size_t n, float mean, float std) {
  uint64_t s = seed * 0x100000001b3ull;
  for (char c : name) s = (s ^ uint8_t(c)) * 0x100000001b3ull;
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double u1 = (double(splitmix(s) >> 11) + 1.0) * 0x1p-53;  // (0, 1]
    const double u2 = double(splitmix(s) >> 11) * 0x1p-53;
    out[i] = mean + std * float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2));
  }
  return out;
}

void utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xe0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
}

std::vector<float> reorder(const std::vector<float>& w, int64_t n_head, int64_t hd, int64_t cols,
                           bool forward) {
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < hd / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t adjacent = h * hd + 2 * i + j, half = h * hd + j * (hd / 2) + i;
        const int64_t dst = forward ? adjacent : half, src = forward ? half : adjacent;
        std::memcpy(&out[size_t(dst * cols)], &w[size_t(src * cols)], size_t(cols) * 4);
      }
  return out;
}

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  KV_CHECK(out.good(), "cannot write {}", p.string());
}

}  // namespace

namespace {

int64_t head_dim_of(const TinySpec& s) {
  return s.head_dim > 0 ? s.head_dim : s.hidden / s.heads;
}
bool is_qwen3(const TinySpec& s) {
  return s.arch == "qwen3" || s.arch == "qwen3moe";
}
bool has_biases(const TinySpec& s) {
  return s.arch == "qwen2" || s.arch == "qwen2moe" || s.arch == "gpt-oss";
}
bool is_gpt_oss(const TinySpec& s) {
  return s.arch == "gpt-oss";
}
bool is_mixtral(const TinySpec& s) {
  return s.arch == "llama" && s.experts > 0;
}
// Llama and Mistral (Mixtral too) store q/k permuted in GGUF; the Qwens do not.
bool permutes(const TinySpec& s) {
  return s.arch == "llama" || s.arch == "mistral";
}

}  // namespace

TinySpec tiny_family(const std::string& family) {
  TinySpec s;
  s.arch = family == "mixtral" ? "llama" : family;
  if (family == "qwen3") s.head_dim = 24;
  if (family == "qwen3moe") {
    s.experts = 7;
    s.experts_used = 3;
    s.expert_ffn = 32;
  } else if (family == "qwen2moe") {
    s.experts = 5;
    s.experts_used = 2;
    s.expert_ffn = 32;
    s.shared_ffn = 64;
    s.norm_topk = false;
  } else if (family == "mixtral") {
    s.experts = 4;
    s.experts_used = 2;
  } else if (family == "gpt-oss") {
    s.experts = 4;
    s.experts_used = 2;
    s.expert_ffn = 32;
    s.head_dim = 16;
    s.rope_theta = 150000;
    s.matrix_type = DType::BF16;
    s.experts_mxfp4 = true;
    s.sliding_window = 5;
    s.yarn_factor = 32;
    s.yarn_original_context = 64;
  }
  KV_CHECK(family == "llama" || family == "qwen3" || s.experts > 0,
           "tiny model: no family '{}' (llama, qwen3, qwen3moe, qwen2moe, mixtral, gpt-oss)",
           family);
  return s;
}

std::vector<TinyTensor> make_tiny_weights(const TinySpec& s) {
  const int64_t hd = head_dim_of(s), q = int64_t(s.heads) * hd, kv = int64_t(s.kv_heads) * hd;
  std::vector<TinyTensor> out;
  auto add = [&](std::string hf, std::string gg, std::vector<int64_t> shape, bool norm, float std,
                 int expert = -1, bool keep_f32 = false) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    auto data =
        norm && std == 0 ? normal(s.seed, hf, n, 1.f, 0.05f) : normal(s.seed, hf, n, 0.f, std);
    out.push_back(
        {std::move(hf), std::move(gg), std::move(shape), std::move(data), norm, expert, keep_f32});
  };
  auto fan = [](int64_t in) { return 0.5f / std::sqrt(float(in)); };
  // A SwiGLU FFN of width f: HF names prefix + {gate,up,down}, GGUF names g + {gate,up,down} +
  // suffix.
  auto ffn = [&](const std::string& h, const std::string& g, const char* const names[3],
                 const std::string& suffix, int64_t f, int expert) {
    add(h + names[0], g + "ffn_gate" + suffix, {f, s.hidden}, false, fan(s.hidden), expert);
    add(h + names[1], g + "ffn_up" + suffix, {f, s.hidden}, false, fan(s.hidden), expert);
    add(h + names[2], g + "ffn_down" + suffix, {s.hidden, f}, false, fan(f), expert);
  };
  static const char* const kProj[3] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
  static const char* const kW[3] = {"w1.weight", "w3.weight", "w2.weight"};
  add("model.embed_tokens.weight", "token_embd.weight", {s.vocab, s.hidden}, false, 0.05f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    const std::string g = "blk." + std::to_string(l) + ".";
    add(h + "input_layernorm.weight", g + "attn_norm.weight", {s.hidden}, true, 0);
    add(h + "self_attn.q_proj.weight", g + "attn_q.weight", {q, s.hidden}, false, fan(s.hidden));
    add(h + "self_attn.k_proj.weight", g + "attn_k.weight", {kv, s.hidden}, false, fan(s.hidden));
    add(h + "self_attn.v_proj.weight", g + "attn_v.weight", {kv, s.hidden}, false, fan(s.hidden));
    if (has_biases(s)) {
      add(h + "self_attn.q_proj.bias", g + "attn_q.bias", {q}, true, 0.02f);
      add(h + "self_attn.k_proj.bias", g + "attn_k.bias", {kv}, true, 0.02f);
      add(h + "self_attn.v_proj.bias", g + "attn_v.bias", {kv}, true, 0.02f);
    }
    if (is_qwen3(s)) {
      add(h + "self_attn.q_norm.weight", g + "attn_q_norm.weight", {hd}, true, 0);
      add(h + "self_attn.k_norm.weight", g + "attn_k_norm.weight", {hd}, true, 0);
    }
    add(h + "self_attn.o_proj.weight", g + "attn_output.weight", {s.hidden, q}, false, fan(q));
    if (is_gpt_oss(s)) {
      add(h + "self_attn.o_proj.bias", g + "attn_output.bias", {s.hidden}, true, 0.02f);
      add(h + "self_attn.sinks", g + "attn_sinks.weight", {s.heads}, true, 1.f);
    }
    add(h + "post_attention_layernorm.weight",
        g + (is_gpt_oss(s) ? "post_attention_norm.weight" : "ffn_norm.weight"), {s.hidden}, true,
        0);
    if (s.experts == 0) {
      ffn(h + "mlp.", g, kProj, ".weight", s.ffn, -1);
      continue;
    }
    const std::string moe = is_mixtral(s) ? h + "block_sparse_moe." : h + "mlp.";
    add(moe + "gate.weight", g + "ffn_gate_inp.weight", {s.experts, s.hidden}, false,
        4.f * fan(s.hidden), -1, true);
    const int64_t ef = is_mixtral(s) ? s.ffn : s.expert_ffn;
    if (is_gpt_oss(s)) {  // the router's and the experts' biases, F32 as GGUF stores them
      add(moe + "gate.bias", g + "ffn_gate_inp.bias", {s.experts}, true, 0.5f);
      add(moe + "experts.gate_proj_bias", g + "ffn_gate_exps.bias", {s.experts, ef}, true, 0.1f);
      add(moe + "experts.up_proj_bias", g + "ffn_up_exps.bias", {s.experts, ef}, true, 0.1f);
      add(moe + "experts.down_proj_bias", g + "ffn_down_exps.bias", {s.experts, s.hidden}, true,
          0.1f);
    }
    for (int e = 0; e < s.experts; ++e)
      ffn(moe + "experts." + std::to_string(e) + ".", g, is_mixtral(s) ? kW : kProj, "_exps.weight",
          ef, e);
    if (s.arch == "qwen2moe") {
      ffn(h + "mlp.shared_expert.", g, kProj, "_shexp.weight", s.shared_ffn, -1);
      add(h + "mlp.shared_expert_gate.weight", g + "ffn_gate_inp_shexp.weight", {1, s.hidden},
          false, fan(s.hidden), -1, true);
    }
  }
  add("model.norm.weight", "output_norm.weight", {s.hidden}, true, 0);
  if (!s.tied) add("lm_head.weight", "output.weight", {s.vocab, s.hidden}, false, fan(s.hidden));
  return out;
}

std::vector<float> permute_qk(const std::vector<float>& w, int64_t n_head, int64_t head_dim,
                              int64_t cols) {
  return reorder(w, n_head, head_dim, cols, true);
}
std::vector<float> unpermute_qk(const std::vector<float>& w, int64_t n_head, int64_t head_dim,
                                int64_t cols) {
  return reorder(w, n_head, head_dim, cols, false);
}

const char* const kTinyChatTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::vector<std::string> gpt2_byte_tokens() {
  // bytes_to_unicode(): printable bytes map to themselves, the rest to 256+n.
  std::vector<std::string> out(256);
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    utf8(out[b], printable ? b : 256 + n++);
  }
  return out;
}

std::vector<float> llama3_rope_factors(const TinySpec& s) {
  const int hd = s.hidden / s.heads;
  const float low_wavelen = float(s.llama3_original_context) / s.llama3_low;
  const float high_wavelen = float(s.llama3_original_context) / s.llama3_high;
  std::vector<float> out;
  for (int i = 0; i < hd; i += 2) {
    const float freq = 1.f / std::pow(s.rope_theta, float(i) / float(hd));
    const float wavelen = 2.f * float(M_PI) / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.f);
    } else if (wavelen > low_wavelen) {
      out.push_back(s.llama3_factor);
    } else {
      const float smooth = (float(s.llama3_original_context) / wavelen - s.llama3_low) /
                           (s.llama3_high - s.llama3_low);
      out.push_back(1.f / ((1.f - smooth) / s.llama3_factor + smooth));
    }
  }
  return out;
}

void write_tiny_gguf(const std::string& path, const TinySpec& s) {
  KV_CHECK(s.vocab >= 259, "tiny model: vocab {} < 259 (256 bytes + 3 specials)", s.vocab);
  KV_CHECK(s.head_dim > 0 || s.hidden % s.heads == 0, "tiny model: heads must divide hidden");
  const int64_t hd = head_dim_of(s);
  const std::string a = s.arch;
  GgufWriter w;
  w.add_string("general.architecture", s.arch);
  w.add_string("general.name", "tiny-random");
  w.add_u32("general.alignment", 32);
  w.add_u32(a + ".block_count", uint32_t(s.layers));
  w.add_u32(a + ".context_length", uint32_t(s.ctx));
  w.add_u32(a + ".embedding_length", uint32_t(s.hidden));
  w.add_u32(a + ".feed_forward_length", uint32_t(s.ffn));
  w.add_u32(a + ".attention.head_count", uint32_t(s.heads));
  w.add_u32(a + ".attention.head_count_kv", uint32_t(s.kv_heads));
  w.add_f32(a + ".rope.freq_base", s.rope_theta);
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_u32(a + ".vocab_size", uint32_t(s.vocab));
  w.add_u32(a + ".rope.dimension_count", uint32_t(hd));
  if (s.head_dim > 0) {
    w.add_u32(a + ".attention.key_length", uint32_t(hd));
    w.add_u32(a + ".attention.value_length", uint32_t(hd));
  }
  if (s.experts > 0) {
    w.add_u32(a + ".expert_count", uint32_t(s.experts));
    w.add_u32(a + ".expert_used_count", uint32_t(s.experts_used));
    if (!is_mixtral(s)) w.add_u32(a + ".expert_feed_forward_length", uint32_t(s.expert_ffn));
    if (s.arch == "qwen2moe")
      w.add_u32(a + ".expert_shared_feed_forward_length", uint32_t(s.shared_ffn));
  }
  if (s.sliding_window > 0) w.add_u32(a + ".attention.sliding_window", uint32_t(s.sliding_window));
  if (s.yarn_factor > 0.f) {
    w.add_string(a + ".rope.scaling.type", "yarn");
    w.add_f32(a + ".rope.scaling.factor", s.yarn_factor);
    w.add_u32(a + ".rope.scaling.original_context_length", uint32_t(s.yarn_original_context));
  }

  std::vector<std::string> tokens = gpt2_byte_tokens();
  std::vector<int32_t> types(256, 1);
  for (const char* sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) tokens.push_back(sp);
  for (int i = 0; int(tokens.size()) < s.vocab; ++i)
    tokens.push_back("<extra_" + std::to_string(i) + ">");
  types.resize(tokens.size(), 3);
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "smollm");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_array("tokenizer.ggml.token_type", GgufType::I32, types);
  w.add_string_array("tokenizer.ggml.merges", {});
  w.add_u32("tokenizer.ggml.bos_token_id", kTinyBos);
  w.add_u32("tokenizer.ggml.eos_token_id", kTinyEos);
  w.add_u32("tokenizer.ggml.padding_token_id", kTinyEndOfText);
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_string("tokenizer.chat_template", kTinyChatTemplate);

  // Expert matrices are stacked per GGUF name, expert e as slice e of a 3-D
  // tensor [in, out, experts] (the converter's merge).
  std::vector<std::pair<std::string, std::vector<float>>> stacks;
  std::vector<std::vector<int64_t>> stack_ne;
  for (const TinyTensor& t : make_tiny_weights(s)) {
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    std::vector<float> data = t.data;
    if (t.gguf_name.ends_with("ffn_gate_inp_shexp.weight")) ne = {s.hidden};  // [1, h] -> [h]
    if (permutes(s) && t.gguf_name.ends_with("attn_q.weight"))
      data = permute_qk(data, s.heads, hd, s.hidden);
    if (permutes(s) && t.gguf_name.ends_with("attn_k.weight"))
      data = permute_qk(data, s.kv_heads, hd, s.hidden);
    if (t.expert >= 0) {
      if (t.expert == 0) {
        stacks.push_back({t.gguf_name, {}});
        stack_ne.push_back({ne[0], ne[1], s.experts});
      }
      auto& st = std::find_if(stacks.begin(), stacks.end(), [&](const auto& x) {
                   return x.first == t.gguf_name;
                 })->second;
      st.insert(st.end(), data.begin(), data.end());
      continue;
    }
    if (!t.is_norm && !t.keep_f32 && s.prequantize != DType::F32) {
      const std::vector<uint8_t> q = quantize(s.prequantize, data.data(), int64_t(data.size()));
      TensorView v;
      v.type = s.prequantize;
      v.n_dims = 1;
      v.ne[0] = int64_t(data.size());
      v.data = q.data();
      v.nbytes = q.size();
      data = dequantize(v);
    }
    const DType type = t.is_norm || t.keep_f32 ? DType::F32 : s.matrix_type;
    w.add_tensor(t.gguf_name, type, ne, quantize(type, data.data(), int64_t(data.size())));
  }
  const DType expert_type = s.experts_mxfp4 ? DType::MXFP4 : s.matrix_type;
  for (size_t i = 0; i < stacks.size(); ++i) {
    const std::vector<float>& data = stacks[i].second;
    w.add_tensor(stacks[i].first, expert_type, stack_ne[i],
                 quantize(expert_type, data.data(), int64_t(data.size())));
  }
  if (s.llama3_factor != 0.f) {
    const std::vector<float> f = llama3_rope_factors(s);
    w.add_tensor("rope_freqs.weight", DType::F32, {int64_t(f.size())},
                 quantize(DType::F32, f.data(), int64_t(f.size())));
  }
  w.write(path);
}

void write_safetensors_raw(const std::string& path, uint64_t header_len, const std::string& header,
                           const std::vector<uint8_t>& data) {
  Bytes b(8 + header.size() + data.size());
  std::memcpy(b.data(), &header_len, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(b.data() + 8 + header.size(), data.data(), data.size());
  GgufWriter::write_file(path, b);
}

namespace {

bool fp8_matrix(const TinyTensor& t) {
  return !t.is_norm && t.hf_name.find("_proj.weight") != std::string::npos;
}

// One tensor of the folder: its dtype, shape and bytes.
struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <class T>
std::vector<uint8_t> raw_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// t as an FP8 checkpoint stores it (TinySpec::st_fp8), or with
// fp8_dequantized the F32 values of those codes and scales.
std::vector<StEntry> fp8_entries(const TinyTensor& t, const TinySpec& s) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<uint8_t> codes(t.data.size());
  std::vector<float> scales;
  if (s.st_fp8 == TinySpec::kFp8PerTensor) {
    scales.push_back(fp8::quantize_row_e4m3(t.data.data(), int64_t(t.data.size()), codes.data()));
  } else {
    for (int64_t r = 0; r < rows; ++r)
      scales.push_back(bf16_to_f32(f32_to_bf16(fp8::quantize_row_e4m3(
          t.data.data() + r * cols, cols, codes.data() + r * cols))));  // stored as BF16
  }
  if (s.fp8_dequantized) {
    std::vector<float> v(t.data.size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = scales[scales.size() == 1 ? 0 : i / size_t(cols)] * fp8::e4m3_to_f32(codes[i]);
    return {{t.hf_name, "F32", t.shape, raw_bytes(v)}};
  }
  StEntry scale{t.hf_name + "_scale", "F32", {}, raw_bytes(scales)};
  if (s.st_fp8 == TinySpec::kFp8PerChannel) {
    std::vector<uint16_t> h;
    for (float f : scales) h.push_back(f32_to_bf16(f));
    scale = {t.hf_name + "_scale", "BF16", {rows, 1}, raw_bytes(h)};
  }
  return {{t.hf_name, "F8_E4M3", t.shape, codes}, scale};
}

// t's values in s.st_type (F16 / BF16 halves), or rounded through it as F32.
StEntry half_entry(const TinyTensor& t, const TinySpec& s) {
  const bool f16 = s.st_type == DType::F16;
  std::vector<uint16_t> h;
  for (float f : t.data) h.push_back(f16 ? f32_to_fp16(f) : f32_to_bf16(f));
  if (!s.st_round_only) return {t.hf_name, f16 ? "F16" : "BF16", t.shape, raw_bytes(h)};
  std::vector<float> v;
  for (uint16_t x : h) v.push_back(f16 ? fp16_to_f32(x) : bf16_to_f32(x));
  return {t.hf_name, "F32", t.shape, raw_bytes(v)};
}

std::vector<StEntry> st_entries(const TinyTensor& t, const TinySpec& s) {
  if (s.st_fp8 != TinySpec::kFp8None && fp8_matrix(t)) return fp8_entries(t, s);
  if (s.st_type == DType::F16 || s.st_type == DType::BF16) return {half_entry(t, s)};
  return {{t.hf_name, "F32", t.shape, raw_bytes(t.data)}};
}

// gpt-oss as its checkpoint stores it: the GGUF file's values (BF16
// matrices, F32 norms, biases, sinks and router), and the expert stacks as
// MXFP4 blocks and scales (model/gpt_oss_experts.h) made from the GGUF
// file's MXFP4 bytes, gate and up interleaved row by row.
std::vector<std::vector<StEntry>> gpt_oss_entries(const TinySpec& s) {
  std::vector<std::vector<StEntry>> out;
  std::map<std::string, std::vector<float>> stacks;  // per-expert data, expert-major
  for (const TinyTensor& t : make_tiny_weights(s)) {
    if (t.expert >= 0) {
      auto& st = stacks[t.hf_name.substr(0, t.hf_name.find(".experts.")) + "|" + t.gguf_name];
      st.insert(st.end(), t.data.begin(), t.data.end());
      continue;
    }
    std::string name = t.hf_name;
    for (const auto& [from, to] : {std::pair{".mlp.gate.weight", ".mlp.router.weight"},
                                   std::pair{".mlp.gate.bias", ".mlp.router.bias"}})
      if (name.ends_with(from)) name = name.substr(0, name.size() - std::strlen(from)) + to;
    if (name.ends_with("gate_proj_bias") || name.ends_with("up_proj_bias")) {
      stacks[name] = t.data;  // interleaved below
      continue;
    }
    if (t.is_norm || t.keep_f32) {
      out.push_back({{name, "F32", t.shape, raw_bytes(t.data)}});
    } else {
      std::vector<uint16_t> h;
      for (float f : t.data) h.push_back(f32_to_bf16(f));
      out.push_back({{name, "BF16", t.shape, raw_bytes(h)}});
    }
  }
  const int64_t E = s.experts, F = s.expert_ffn, H = s.hidden;
  // An MXFP4 stack of `rows` rows of `cols` in the folder's form.
  auto mxfp4 = [](const std::vector<float>& data, std::vector<uint8_t>& codes,
                  std::vector<uint8_t>& scales) {
    const std::vector<uint8_t> q = quantize(DType::MXFP4, data.data(), int64_t(data.size()));
    for (size_t b = 0; b < q.size() / 17; ++b) {
      scales.push_back(q[b * 17]);
      uint8_t folder[16];
      gpt_oss_codes_to_folder(&q[b * 17 + 1], folder);
      codes.insert(codes.end(), folder, folder + 16);
    }
  };
  for (int l = 0; l < s.layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".mlp";
    const std::string g = "blk." + std::to_string(l) + ".";
    const auto& gate = stacks.at(h + "|" + g + "ffn_gate_exps.weight");
    const auto& up = stacks.at(h + "|" + g + "ffn_up_exps.weight");
    std::vector<float> gu;  // [E, 2F, H]: row 2i gate i, 2i + 1 up i
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = 0; r < F; ++r) {
        const size_t at = size_t((e * F + r) * H);
        gu.insert(gu.end(), gate.begin() + long(at), gate.begin() + long(at + size_t(H)));
        gu.insert(gu.end(), up.begin() + long(at), up.begin() + long(at + size_t(H)));
      }
    std::vector<uint8_t> codes, scales, dcodes, dscales;
    mxfp4(gu, codes, scales);
    mxfp4(stacks.at(h + "|" + g + "ffn_down_exps.weight"), dcodes, dscales);
    out.push_back({{h + ".experts.gate_up_proj_blocks", "U8", {E, 2 * F, H / 32, 16}, codes},
                   {h + ".experts.gate_up_proj_scales", "U8", {E, 2 * F, H / 32}, scales},
                   {h + ".experts.down_proj_blocks", "U8", {E, H, F / 32, 16}, dcodes},
                   {h + ".experts.down_proj_scales", "U8", {E, H, F / 32}, dscales}});
    const auto& gb = stacks.at(h + ".experts.gate_proj_bias");
    const auto& ub = stacks.at(h + ".experts.up_proj_bias");
    std::vector<float> gub;
    for (size_t i = 0; i < gb.size(); ++i) gub.push_back(gb[i]), gub.push_back(ub[i]);
    out.push_back({{h + ".experts.gate_up_proj_bias", "F32", {E, 2 * F}, raw_bytes(gub)}});
  }
  return out;
}

nlohmann::json gpt_oss_config(const TinySpec& s) {
  nlohmann::json types = nlohmann::json::array();
  for (int l = 0; l < s.layers; ++l)
    types.push_back(l % 2 ? "full_attention" : "sliding_attention");
  return {{"intermediate_size", s.expert_ffn},
          {"num_local_experts", s.experts},
          {"num_experts_per_tok", s.experts_used},
          {"sliding_window", s.sliding_window},
          {"layer_types", types},
          {"attention_bias", true},
          {"swiglu_limit", 7.0},
          {"rope_scaling",
           {{"rope_type", "yarn"},
            {"factor", s.yarn_factor},
            {"beta_fast", 32.0},
            {"beta_slow", 1.0},
            // As ggml rounds the correction dims (the GGUF form's numbers);
            // the published checkpoint says false (docs/model-formats.md).
            {"truncate", true},
            {"original_max_position_embeddings", s.yarn_original_context}}},
          {"quantization_config", {{"quant_method", "mxfp4"}}},
          {"torch_dtype", "bfloat16"}};
}

nlohmann::json fp8_quantization_config(const TinySpec& s) {
  if (s.st_fp8 == TinySpec::kFp8None || s.fp8_dequantized) return nullptr;
  if (s.st_fp8 == TinySpec::kFp8PerTensor)
    return {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
  const nlohmann::json group = {
      {"targets", {"Linear"}},
      {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}}},
      {"input_activations",
       {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"ignore", {"lm_head"}},
          {"config_groups", {{"group_0", group}}}};
}

}  // namespace

void write_tiny_safetensors(const std::string& dir, const TinySpec& s) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::map<std::string, std::pair<const char*, const char*>> kClass = {
      {"llama", {"LlamaForCausalLM", "llama"}},
      {"qwen2", {"Qwen2ForCausalLM", "qwen2"}},
      {"qwen3", {"Qwen3ForCausalLM", "qwen3"}},
      {"qwen3moe", {"Qwen3MoeForCausalLM", "qwen3_moe"}},
      {"qwen2moe", {"Qwen2MoeForCausalLM", "qwen2_moe"}},
      {"gpt-oss", {"GptOssForCausalLM", "gpt_oss"}}};
  const auto cls = is_mixtral(s) ? std::pair{"MixtralForCausalLM", "mixtral"} : kClass.at(s.arch);
  nlohmann::json cfg = {
      {"architectures", {cls.first}},
      {"model_type", cls.second},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.ffn},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"num_hidden_layers", s.layers},
      {"vocab_size", s.vocab},
      {"max_position_embeddings", s.ctx},
      {"rope_theta", s.rope_theta},
      {"rms_norm_eps", 1e-5},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", s.tied},
      {"rope_scaling", s.llama3_factor == 0.f ? nlohmann::json(nullptr)
                                              : nlohmann::json{{"rope_type", "llama3"},
                                                               {"factor", s.llama3_factor},
                                                               {"low_freq_factor", s.llama3_low},
                                                               {"high_freq_factor", s.llama3_high},
                                                               {"original_max_position_embeddings",
                                                                s.llama3_original_context}}},
      {"torch_dtype", "float32"},
  };
  if (s.head_dim > 0) cfg["head_dim"] = s.head_dim;
  if (is_gpt_oss(s)) {
    cfg.update(gpt_oss_config(s));
  } else if (is_mixtral(s)) {
    cfg["num_local_experts"] = s.experts;
    cfg["num_experts_per_tok"] = s.experts_used;
  } else if (s.experts > 0) {
    cfg["num_experts"] = s.experts;
    cfg["num_experts_per_tok"] = s.experts_used;
    cfg["moe_intermediate_size"] = s.expert_ffn;
    cfg["norm_topk_prob"] = s.norm_topk;
    cfg["decoder_sparse_step"] = 1;
    cfg["mlp_only_layers"] = nlohmann::json::array();
    if (s.arch == "qwen2moe") cfg["shared_expert_intermediate_size"] = s.shared_ffn;
  }
  if (const nlohmann::json q = fp8_quantization_config(s); !q.is_null())
    cfg["quantization_config"] = q;
  write_text(fs::path(dir) / "config.json", cfg.dump(2));

  std::vector<std::vector<StEntry>> groups;  // a tensor's entries stay in one shard
  if (is_gpt_oss(s)) {
    groups = gpt_oss_entries(s);
  } else {
    for (const TinyTensor& t : make_tiny_weights(s)) groups.push_back(st_entries(t, s));
  }
  const int shards = std::max(1, s.st_shards);
  nlohmann::json weight_map = nlohmann::json::object();
  for (int k = 0; k < shards; ++k) {
    const std::string file = shards == 1
                                 ? "model.safetensors"
                                 : fmt::format("model-{:05}-of-{:05}.safetensors", k + 1, shards);
    nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
    Bytes data;
    for (size_t i = size_t(k); i < groups.size(); i += size_t(shards)) {
      for (const StEntry& e : groups[i]) {
        const uint64_t begin = data.size(), n = e.bytes.size();
        data.insert(data.end(), e.bytes.begin(), e.bytes.end());
        header[e.name] = {
            {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {begin, begin + n}}};
        weight_map[e.name] = file;
      }
    }
    std::string text = header.dump();
    text.resize((text.size() + 7) / 8 * 8, ' ');  // keeps the data 8-byte aligned
    write_safetensors_raw((fs::path(dir) / file).string(), text.size(), text, data);
  }
  if (shards > 1)
    write_text(fs::path(dir) / "model.safetensors.index.json",
               nlohmann::json({{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}})
                   .dump(2));
}

}  // namespace kvasir::test
