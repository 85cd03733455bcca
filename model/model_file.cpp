// model/model_file.cpp — ModelFile over a GGUF file or a safetensors folder,
// and the checks that every tensor the config implies is present with the
// right shape before anything computes with it.
#include "model/model_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/check.h"
#include "base/half.h"
#include "model/gguf.h"
#include "model/gpt_oss_experts.h"
#include "model/safetensors.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;
using Lookup = std::function<const TensorView*(const std::string&)>;

std::string shape_str(const int64_t* ne, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

// One tensor's shape against the config's (ne innermost first; unused
// trailing dims are 1).
void check_shape(const std::string& src, const std::string& name, const TensorView& t,
                 std::initializer_list<int64_t> want) {
  int64_t w[4] = {1, 1, 1, 1};
  std::copy(want.begin(), want.end(), w);
  bool ok = true;
  for (int i = 0; i < 4; ++i) ok = ok && t.ne[i] == w[i];
  KV_CHECK_CODE(ok, ErrorCode::kModelFormat, "{}: tensor '{}' has shape {} but the config implies {}",
                src, name, shape_str(t.ne, t.n_dims), shape_str(w, int(want.size())));
}

// Checks one tensor's shape; nullptr when absent and not required.
const TensorView* expect(const Lookup& look, const std::string& src, const std::string& name,
                         std::initializer_list<int64_t> want, bool required = true) {
  const TensorView* t = look(name);
  if (!t) {
    KV_CHECK_CODE(!required, ErrorCode::kModelFormat,
                  "{}: tensor '{}' is missing (the config implies it, shape {})", src, name,
                  shape_str(want.begin(), int(want.size())));
    return nullptr;
  }
  check_shape(src, name, *t, want);
  return t;
}

// Norm weights and biases are small: decode them all and refuse NaN/Inf,
// which would otherwise turn every activation after them into NaN silently.
void check_finite(const std::string& src, const std::string& name, const TensorView& t) {
  const int64_t n = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  for (int64_t i = 0; i < n; ++i) {
    const float v = float_element(t, i);
    KV_CHECK_CODE(std::isfinite(v), ErrorCode::kModelFormat,
                  "{}: tensor '{}': element {} is {} (NaN/Inf in a weight)", src, name, i, v);
  }
}

void check_small(const std::string& src, const std::string& name, const TensorView* t) {
  if (!t) return;
  KV_CHECK_CODE(t->type == DType::F32 || t->type == DType::F16 || t->type == DType::BF16,
                ErrorCode::kModelFormat,
                "{}: tensor '{}' is {}: norm weights and biases must be F32, F16 or BF16", src,
                name, dtype_name(t->type));
  check_finite(src, name, *t);
}

std::vector<float> row_scales(const Lookup& look, const std::string& src, const std::string& name) {
  const TensorView* w = look(name);
  KV_CHECK(w, "{}: tensor '{}' is missing", src, name);
  KV_CHECK(w->type == DType::F8_E4M3, "{}: tensor '{}' is {}, not F8_E4M3", src, name,
           dtype_name(w->type));
  const std::string sname = name + "_scale";
  const TensorView* s = look(sname);
  KV_CHECK(s, "{}: tensor '{}' is F8_E4M3 but its scale '{}' is missing", src, name, sname);
  KV_CHECK(s->type == DType::F32 || s->type == DType::F16 || s->type == DType::BF16,
           "{}: tensor '{}' is {}: FP8 scales must be F32, F16 or BF16", src, sname,
           dtype_name(s->type));
  const int64_t n = s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3], rows = w->rows();
  KV_CHECK(n == 1 || (n == rows && (s->ne[0] == rows || s->ne[1] == rows)),
           "{}: tensor '{}' has shape {}: an FP8 scale is one value per tensor or one per row "
           "of '{}' ({} rows); block-wise scales are not supported",
           src, sname, shape_str(s->ne, s->n_dims), name, rows);
  std::vector<float> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float v = float_element(*s, n == 1 ? 0 : r);
    KV_CHECK(std::isfinite(v) && v >= 0.f, "{}: tensor '{}': element {} is {}", src, sname,
             n == 1 ? 0 : r, v);
    out[size_t(r)] = v;
  }
  return out;
}

// A matrix that is FP8 needs the model to say so and a well-formed scale; a
// scale beside a matrix that is not FP8 is a malformed file.
void check_fp8(const ModelConfig& c, const Lookup& look, const std::string& src,
               const std::string& name) {
  const TensorView* w = look(name);
  if (!w) return;
  if (w->type != DType::F8_E4M3) {
    KV_CHECK(!look(name + "_scale"), "{}: tensor '{}_scale' is given but '{}' is {}, not F8_E4M3",
             src, name, name, dtype_name(w->type));
    return;
  }
  KV_CHECK(c.fp8_weights,
           "{}: tensor '{}' is F8_E4M3 but config.json has no FP8 quantization_config", src, name);
  row_scales(look, src, name);
}

void check_fp8_all(const ModelConfig& c, const Lookup& look, const std::string& src) {
  check_fp8(c, look, src, "token_embd.weight");
  check_fp8(c, look, src, "output.weight");
  for (int l = 0; l < c.n_layers; ++l)
    for (const char* m :
         {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
          "ffn_gate_inp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"})
      check_fp8(c, look, src, fmt::format("blk.{}.{}.weight", l, m));
}

// An expert stack: `n` experts of shape [cols, rows] each, or an error
// naming the tensor. Given by the reader (a GGUF 3-D tensor sliced, or a
// folder's per-expert matrices).
using ExpertLookup = std::function<const std::vector<TensorView>*(
    const std::string& name, int64_t cols, int64_t rows, int32_t n)>;

struct TensorChecks {
  const ModelConfig& c;
  const Lookup& look;
  const ExpertLookup& experts;
  const std::string& src;

  void norm(const std::string& name, int64_t n) const {
    check_small(src, name, expect(look, src, name, {n}));
  }
  void attention(const std::string& b) const {
    const int64_t h = c.hidden, q = int64_t(c.n_heads) * c.head_dim,
                  kv = int64_t(c.n_kv_heads) * c.head_dim;
    norm(b + "attn_norm.weight", h);
    expect(look, src, b + "attn_q.weight", {h, q});
    expect(look, src, b + "attn_k.weight", {h, kv});
    expect(look, src, b + "attn_v.weight", {h, kv});
    expect(look, src, b + "attn_output.weight", {q, h});
    if (c.qkv_bias) {
      norm(b + "attn_q.bias", q);
      norm(b + "attn_k.bias", kv);
      norm(b + "attn_v.bias", kv);
    }
    if (c.qk_norm) {
      norm(b + "attn_q_norm.weight", c.head_dim);
      norm(b + "attn_k_norm.weight", c.head_dim);
    }
    if (c.post_norms) norm(b + "post_attention_norm.weight", h);
    if (c.gpt_oss) {
      norm(b + "attn_output.bias", h);
      norm(b + "attn_sinks.weight", c.n_heads);
    }
  }
  void ffn(const std::string& b) const {
    const int64_t h = c.hidden;
    // gpt-oss's pre-FFN norm carries the checkpoint's name for it.
    norm(b + (c.gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), h);
    if (c.post_norms) norm(b + "post_ffw_norm.weight", h);
    if (!c.moe()) {
      expect(look, src, b + "ffn_gate.weight", {h, c.ffn});
      expect(look, src, b + "ffn_up.weight", {h, c.ffn});
      expect(look, src, b + "ffn_down.weight", {c.ffn, h});
      return;
    }
    // The stacks first: a count that disagrees with the file's experts is
    // reported on the expert tensors, not on the router.
    experts(b + "ffn_gate_exps.weight", h, c.expert_ffn, c.n_experts);
    experts(b + "ffn_up_exps.weight", h, c.expert_ffn, c.n_experts);
    experts(b + "ffn_down_exps.weight", c.expert_ffn, h, c.n_experts);
    expect(look, src, b + "ffn_gate_inp.weight", {h, c.n_experts});
    if (c.gpt_oss) {
      norm(b + "ffn_gate_inp.bias", c.n_experts);
      check_small(src, b + "ffn_gate_exps.bias",
                  expect(look, src, b + "ffn_gate_exps.bias", {c.expert_ffn, c.n_experts}));
      check_small(src, b + "ffn_up_exps.bias",
                  expect(look, src, b + "ffn_up_exps.bias", {c.expert_ffn, c.n_experts}));
      check_small(src, b + "ffn_down_exps.bias",
                  expect(look, src, b + "ffn_down_exps.bias", {h, c.n_experts}));
    }
    if (c.shared_expert_ffn > 0) {
      expect(look, src, b + "ffn_gate_inp_shexp.weight", {h});
      expect(look, src, b + "ffn_gate_shexp.weight", {h, c.shared_expert_ffn});
      expect(look, src, b + "ffn_up_shexp.weight", {h, c.shared_expert_ffn});
      expect(look, src, b + "ffn_down_shexp.weight", {c.shared_expert_ffn, h});
    }
  }
};

void check_tensors(const ModelConfig& c, const Lookup& look, const ExpertLookup& experts,
                   const std::string& src) {
  const int64_t h = c.hidden;
  expect(look, src, "token_embd.weight", {h, c.vocab});
  check_small(src, "output_norm.weight", expect(look, src, "output_norm.weight", {h}));
  expect(look, src, "output.weight", {h, c.vocab}, !c.tied_embeddings);
  expect(look, src, "rope_freqs.weight", {c.head_dim / 2}, false);
  const TensorChecks checks{c, look, experts, src};
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    checks.attention(b);
    checks.ffn(b);
  }
  check_fp8_all(c, look, src);
}

// A GGUF expert stack [cols, rows, n] as n views of [cols, rows]: expert e
// is the e-th contiguous slice (ggml's layout for mul_mat_id).
std::vector<TensorView> slice_experts(const TensorView& t) {
  const int64_t n = t.ne[2];
  std::vector<TensorView> out(static_cast<size_t>(n));
  const uint64_t bytes = t.nbytes / uint64_t(n);  // the reader checked nbytes against ne
  for (int64_t e = 0; e < n; ++e) {
    TensorView& v = out[size_t(e)];
    v.type = t.type;
    v.n_dims = 2;
    v.ne[0] = t.ne[0];
    v.ne[1] = t.ne[1];
    v.data = static_cast<const uint8_t*>(t.data) + uint64_t(e) * bytes;
    v.nbytes = bytes;
  }
  return out;
}

class GgufModel final : public ModelFile {
 public:
  GgufModel(const std::string& path, std::unique_ptr<GgufFile> f)
      : ModelFile(path), f_(std::move(f)), cfg_(config_from_gguf(*f_)) {
    const Lookup look = [this](const std::string& n) { return lookup(n); };
    const ExpertLookup experts = [&](const std::string& n, int64_t cols, int64_t rows,
                                     int32_t count) {
      const TensorView* t = expect(look, path, n, {cols, rows, count});
      return &(experts_[n] = slice_experts(*t));
    };
    check_tensors(cfg_, look, experts, path);
  }
  const ModelConfig& config() const override { return cfg_; }
  const GgufFile* gguf() const override { return f_.get(); }
  void release_pages(const TensorView& t) const override { f_->release_pages(t.data, t.nbytes); }

 protected:
  const TensorView* lookup(const std::string& name) const override {
    const GgufTensor* t = f_->find_tensor(name);
    return t ? &t->view : nullptr;
  }
  const std::vector<TensorView>* lookup_experts(const std::string& name) const override {
    const auto it = experts_.find(name);
    return it == experts_.end() ? nullptr : &it->second;
  }

 private:
  std::unique_ptr<GgufFile> f_;
  ModelConfig cfg_;
  std::map<std::string, std::vector<TensorView>> experts_;  // sliced at open
};

nlohmann::json read_json(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  KV_CHECK(!ec, "{}: cannot read: {}", p.string(), ec.message());
  KV_CHECK(size <= (uint64_t(64) << 20), "{}: {} bytes, too large for a JSON config", p.string(),
           size);
  std::ifstream in(p, std::ios::binary);
  std::string text(size, '\0');
  KV_CHECK(in.read(text.data(), std::streamsize(size)), "{}: cannot read", p.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    KV_FAIL("{}: not valid JSON: {}", p.string(), e.what());
  }
}

// The shard files of a folder: from model.safetensors.index.json's weight_map
// when present, else every *.safetensors file.
std::vector<std::string> shard_names(const fs::path& dir,
                                     std::map<std::string, std::string>* weight_map) {
  std::vector<std::string> names;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const nlohmann::json j = read_json(index);
    const auto it = j.is_object() ? j.find("weight_map") : j.end();
    KV_CHECK(it != j.end() && it->is_object(), "{}: 'weight_map' must be an object",
             index.string());
    for (const auto& [tensor, file] : it->items()) {
      KV_CHECK(file.is_string(), "{}: weight_map['{}'] must be a file name", index.string(),
               tensor);
      const auto f = file.get<std::string>();
      KV_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
               "{}: weight_map['{}'] is '{}', not a file name inside the folder", index.string(),
               tensor, f);
      (*weight_map)[tensor] = f;
      if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") names.push_back(e.path().filename().string());
  }
  KV_CHECK(!names.empty(), "{}: no *.safetensors files", dir.string());
  std::sort(names.begin(), names.end());
  return names;
}

// A folder's tensor under the name the engine uses: its GGUF name, or for
// one expert's matrix its stack's GGUF name and "#E". Llama's
// post_attention_layernorm is the pre-FFN norm; in gpt-oss it is that too
// but GGUF names it post_attention_norm (model_file.h), and in Gemma 3 it
// is the norm of attention's output (pre_feedforward_layernorm being the
// pre-FFN one).
std::optional<std::string> engine_key(const std::string& hf, const ModelConfig& c) {
  if (auto g = hf_to_gguf_name(hf)) {
    if ((c.gpt_oss || c.post_norms) && hf.ends_with(".post_attention_layernorm.weight"))
      g->replace(g->size() - 16, 16, ".post_attention_norm.weight");
    return g;
  }
  if (auto e = hf_expert_name(hf)) return e->gguf + "#" + std::to_string(e->expert);
  return std::nullopt;
}

class SafetensorsModel final : public ModelFile {
 public:
  explicit SafetensorsModel(const std::string& path) : ModelFile(path) {
    const fs::path dir(path);
    const fs::path cfg_path = dir / "config.json";
    KV_CHECK(fs::exists(cfg_path), "{}: a safetensors folder needs config.json", path);
    fs::path norm = dir.lexically_normal();
    if (norm.filename().empty()) norm = norm.parent_path();  // "folder/" → "folder"
    cfg_ = config_from_hf_json(read_json(cfg_path), cfg_path.string(), norm.filename().string());

    std::map<std::string, std::string> weight_map, origin;
    for (const std::string& file : shard_names(dir, &weight_map)) {
      shards_.push_back(SafetensorsFile::open((dir / file).string()));
      for (const SafeTensor& t : shards_.back()->tensors()) {
        if (take_gpt_oss_part(path, t)) continue;
        const auto key = engine_key(t.name, cfg_);
        if (!key) continue;  // not used by the engine (e.g. rotary_emb.inv_freq)
        auto [it, fresh] = origin.emplace(*key, file);
        KV_CHECK(fresh, "{}: tensor '{}' appears in both {} and {}", path, t.name, it->second,
                 file);
        add(path, t);
      }
    }
    for (const auto& [tensor, file] : weight_map) {
      const auto key = engine_key(tensor, cfg_);
      if (!key) continue;
      const auto it = origin.find(*key);
      KV_CHECK(it != origin.end() && it->second == file,
               "{}: the index puts tensor '{}' in {}, but that file does not hold it", path, tensor,
               file);
    }
    if (cfg_.gpt_oss) repack_gpt_oss(path);
    const Lookup look = [this](const std::string& n) { return lookup(n); };
    const ExpertLookup experts = [&](const std::string& n, int64_t cols, int64_t rows,
                                     int32_t count) { return gather(path, n, cols, rows, count); };
    check_tensors(cfg_, look, experts, path);
  }
  const ModelConfig& config() const override { return cfg_; }

 protected:
  const TensorView* lookup(const std::string& name) const override {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  const std::vector<TensorView>* lookup_experts(const std::string& name) const override {
    const auto it = experts_.find(name);
    return it == experts_.end() ? nullptr : &it->second;
  }

 private:
  // One tensor of a shard, by its engine name (an expert's into its stack).
  void add(const std::string& path, const SafeTensor& t) {
    if (const auto e = hf_expert_name(t.name)) {
      KV_CHECK_CODE(e->expert < cfg_.n_experts, ErrorCode::kModelFormat,
                    "{}: tensor '{}' is expert {}, but config.json has {} experts", path, t.name,
                    e->expert, cfg_.n_experts);
      parts_[e->gguf][e->expert] = {t.name, t.view};
      return;
    }
    const std::string name = *engine_key(t.name, cfg_);
    tensors_[name] = widened(name, t.view);
  }
  // A part of a gpt-oss expert stack (safetensors.h), kept for
  // repack_gpt_oss; false for any other tensor.
  bool take_gpt_oss_part(const std::string& path, const SafeTensor& t) {
    const auto part = cfg_.gpt_oss ? hf_gpt_oss_expert_part(t.name) : std::nullopt;
    if (!part) return false;
    KV_CHECK_CODE(part->kind != GptOssExpertPart::kUnquantised, ErrorCode::kModelFormat,
                  "{}: tensor '{}': gpt-oss experts are read in MXFP4 (_blocks and _scales), not "
                  "dequantised",
                  path, t.name);
    KV_CHECK_CODE(part->layer < cfg_.n_layers, ErrorCode::kModelFormat,
                  "{}: tensor '{}' is past the config's {} layers", path, t.name, cfg_.n_layers);
    const TensorView*& slot = gpt_oss_parts_[part->layer][part->kind];
    KV_CHECK_CODE(!slot, ErrorCode::kModelFormat, "{}: tensor '{}' appears twice", path, t.name);
    slot = &t.view;
    return true;
  }
  // Every layer's expert stacks into GGUF's MXFP4 form, as the per-expert
  // parts and the bias stacks check_tensors and the executors read.
  void repack_gpt_oss(const std::string& path) {
    const ModelConfig& c = cfg_;
    gpt_oss_.resize(size_t(c.n_layers));  // sized once: the views below point into it
    for (int32_t l = 0; l < c.n_layers; ++l) {
      auto& p = gpt_oss_parts_[l];
      const GptOssExpertSources src{
          p[GptOssExpertPart::kGateUpBlocks], p[GptOssExpertPart::kGateUpScales],
          p[GptOssExpertPart::kGateUpBias], p[GptOssExpertPart::kDownBlocks],
          p[GptOssExpertPart::kDownScales]};
      GptOssExperts& x = gpt_oss_[size_t(l)] = repack_gpt_oss_experts(
          src, c.n_experts, c.hidden, c.expert_ffn, fmt::format("{}: layer {}", path, l));
      const std::string b = fmt::format("blk.{}.", l);
      stack(b + "ffn_gate_exps.weight", x.gate, c.hidden, c.expert_ffn);
      stack(b + "ffn_up_exps.weight", x.up, c.hidden, c.expert_ffn);
      stack(b + "ffn_down_exps.weight", x.down, c.expert_ffn, c.hidden);
      tensors_[b + "ffn_gate_exps.bias"] = f32_view(x.gate_bias, c.expert_ffn, c.n_experts);
      tensors_[b + "ffn_up_exps.bias"] = f32_view(x.up_bias, c.expert_ffn, c.n_experts);
    }
  }
  // An expert-major MXFP4 stack as per-expert [cols, rows] parts.
  void stack(const std::string& name, const std::vector<uint8_t>& bytes, int64_t cols,
             int64_t rows) {
    const uint64_t each = bytes.size() / uint64_t(cfg_.n_experts);
    for (int32_t e = 0; e < cfg_.n_experts; ++e) {
      TensorView v;
      v.type = DType::MXFP4;
      v.n_dims = 2;
      v.ne[0] = cols, v.ne[1] = rows;
      v.data = bytes.data() + uint64_t(e) * each;
      v.nbytes = each;
      parts_[name][e] = {name, v};
    }
  }
  static TensorView f32_view(const std::vector<float>& v, int64_t cols, int64_t rows) {
    TensorView t;
    t.type = DType::F32;
    t.n_dims = 2;
    t.ne[0] = cols, t.ne[1] = rows;
    t.data = v.data();
    t.nbytes = v.size() * 4;
    return t;
  }
  // Norm weights, biases and sinks as the executors read them: F32. A
  // checkpoint stores them as its matrices are (BF16 nearly always), so
  // those are widened once here: a few KiB a layer. Gemma's norms scale by
  // 1 + w and its checkpoints store w: they become GGUF's 1 + w here too.
  TensorView widened(const std::string& name, const TensorView& v) {
    const bool norm = name.ends_with("norm.weight");
    const bool small = norm || name.ends_with(".bias") || name.ends_with("_sinks.weight");
    const float add = norm && cfg_.arch == "gemma3" ? 1.f : 0.f;
    if (!small || (add == 0.f && v.type != DType::F16 && v.type != DType::BF16)) return v;
    KV_CHECK_CODE(v.type == DType::F32 || v.type == DType::F16 || v.type == DType::BF16,
                  ErrorCode::kModelFormat, "tensor {} is {}: norms are read as F32, F16 or BF16",
                  name, dtype_name(v.type));
    const int64_t n = v.cols() * v.rows();
    std::vector<float>& f = widened_[name];
    f.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) f[size_t(i)] = float_element(v, i) + add;
    TensorView w = v;
    w.type = DType::F32;
    w.data = f.data();
    w.nbytes = uint64_t(n) * 4;
    return w;
  }
  // The stack `name`: experts 0..count-1, each present with shape [cols, rows].
  const std::vector<TensorView>* gather(const std::string& path, const std::string& name,
                                        int64_t cols, int64_t rows, int32_t count) {
    const auto& parts = parts_[name];
    std::vector<TensorView> v;
    for (int32_t e = 0; e < count; ++e) {
      const auto it = parts.find(e);
      KV_CHECK_CODE(it != parts.end(), ErrorCode::kModelFormat,
                    "{}: expert {} of '{}' is missing (the config has {} experts of shape [{}, {}])",
                    path, e, name, count, cols, rows);
      check_shape(path, it->second.first, it->second.second, {cols, rows});
      KV_CHECK_CODE(it->second.second.type != DType::F8_E4M3, ErrorCode::kModelFormat,
                    "{}: tensor '{}' is F8_E4M3: FP8 expert weights are not supported", path,
                    it->second.first);
      v.push_back(it->second.second);
    }
    return &(experts_[name] = std::move(v));
  }

  ModelConfig cfg_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;  // keep the maps alive
  std::map<std::string, TensorView> tensors_;             // by GGUF name
  std::map<std::string, std::vector<float>> widened_;     // F16/BF16 norms, biases as F32
  // Per-expert matrices as read: stack name → expert → (HF name, view).
  std::map<std::string, std::map<int32_t, std::pair<std::string, TensorView>>> parts_;
  std::map<std::string, std::vector<TensorView>> experts_;  // checked stacks
  // gpt-oss: each layer's stack parts as read (kind → view), then repacked.
  std::map<int32_t, std::map<int, const TensorView*>> gpt_oss_parts_;
  std::vector<GptOssExperts> gpt_oss_;
};

}  // namespace

std::unique_ptr<ModelFile> ModelFile::open(const std::string& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  KV_CHECK(!ec && fs::exists(st), "{}: no such file or folder", path);
  if (fs::is_directory(st)) return std::make_unique<SafetensorsModel>(path);

  char magic[4] = {};
  {
    std::ifstream in(path, std::ios::binary);
    KV_CHECK(in.good(), "{}: cannot open", path);
    in.read(magic, 4);
  }
  if (std::memcmp(magic, "GGUF", 4) == 0)
    return std::make_unique<GgufModel>(path, GgufFile::open(path));
  KV_CHECK(fs::path(path).extension() != ".safetensors",
           "{}: open the folder that holds this file and its config.json, not the file", path);
  KV_FAIL("{}: neither a GGUF file (no 'GGUF' magic) nor a safetensors folder", path);
}

const TensorView* ModelFile::find(const std::string& name) const {
  const TensorView* t = lookup(name);
  if (t) {
    std::lock_guard lock(touched_mu_);
    touched_.insert(name);
  }
  return t;
}

const TensorView& ModelFile::get(const std::string& name) const {
  const TensorView* t = find(name);
  KV_CHECK(t, "{}: tensor '{}' is missing", path_, name);
  return *t;
}

std::vector<float> fp8_row_scales(const ModelFile& model, const std::string& name) {
  return row_scales([&](const std::string& n) { return model.find(n); }, model.path(), name);
}

const std::vector<TensorView>* ModelFile::find_experts(const std::string& name) const {
  const std::vector<TensorView>* t = lookup_experts(name);
  if (t) {
    std::lock_guard lock(touched_mu_);
    touched_.insert(name);
  }
  return t;
}

const std::vector<TensorView>& ModelFile::get_experts(const std::string& name) const {
  const std::vector<TensorView>* t = find_experts(name);
  KV_CHECK_CODE(t, ErrorCode::kModelFormat, "{}: expert tensor '{}' is missing", path_, name);
  return *t;
}

std::set<std::string> ModelFile::touched() const {
  std::lock_guard lock(touched_mu_);
  return touched_;
}

}  // namespace kvasir
