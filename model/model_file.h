// model/model_file.h — one model on disk (a GGUF file or a Hugging Face
// safetensors folder), mapped, never copied whole.
//
// Tensors are named as GGUF names them, whatever the source:
//   token_embd.weight, output_norm.weight, output.weight,
//   blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down}.weight,
//   blk.N.{attn_q,attn_k,attn_v}.bias (Qwen2), blk.N.{attn_q_norm,attn_k_norm}.weight (Qwen3),
//   blk.N.ffn_gate_inp.weight (MoE router), blk.N.{ffn_gate_shexp,ffn_up_shexp,
//   ffn_down_shexp,ffn_gate_inp_shexp}.weight (Qwen2-MoE shared expert),
//   and the expert stacks blk.N.{ffn_gate_exps,ffn_up_exps,ffn_down_exps}.weight,
//   read per expert with find_experts().
// A safetensors folder is translated to these names; its q/k rows are kept
// as stored and config().rope_layout says kHalf.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "model/config.h"

namespace kvasir {

class GgufFile;

class ModelFile {
 public:
  virtual ~ModelFile() = default;

  // Opens a .gguf file or a folder with config.json + *.safetensors.
  // Throws kvasir::Error naming the file, the field and the fault.
  static std::unique_ptr<ModelFile> open(const std::string& path);

  virtual const ModelConfig& config() const = 0;
  // The GGUF file behind this model (tokenizer metadata), or nullptr.
  virtual const GgufFile* gguf() const { return nullptr; }
  const std::string& path() const { return path_; }

  // The tensor by GGUF name; nullptr if absent. Shape and size are already
  // validated against the file. Records the name as touched.
  const TensorView* find(const std::string& name) const;
  // Same, but throws kvasir::Error if absent.
  const TensorView& get(const std::string& name) const;
  // The experts of a stacked expert tensor (blk.N.ffn_{gate,up,down}_exps.weight):
  // one 2-D view per expert, in expert order — slices of the GGUF file's
  // 3-D tensor, or the folder's per-expert matrices. Count and shapes are
  // already checked against the config. nullptr if absent. Records the name
  // as touched.
  const std::vector<TensorView>* find_experts(const std::string& name) const;
  // Same, but throws kvasir::Error (kModelFormat) if absent.
  const std::vector<TensorView>& get_experts(const std::string& name) const;
  // Drops this process's pages of t's bytes where they are the file's
  // mapping (a later read faults them back in): for an owner that keeps its
  // own copy of a weight (kernels/cpu/matmul.h keep_rows16), so the
  // process does not hold both. t must be a view this model returned;
  // nothing where its bytes are not mapped from the file.
  virtual void release_pages(const TensorView& t) const { (void)t; }
  // Names of every tensor find()/get()/find_experts() returned, for slicing tests.
  std::set<std::string> touched() const;

 protected:
  explicit ModelFile(std::string path) : path_(std::move(path)) {}
  virtual const TensorView* lookup(const std::string& name) const = 0;
  virtual const std::vector<TensorView>* lookup_experts(const std::string& name) const = 0;

 private:
  std::string path_;
  mutable std::mutex touched_mu_;
  mutable std::set<std::string> touched_;
};

// FP8 weights (DType::F8_E4M3, safetensors folders only): the scale of each
// of the weight's rows, from its tensor "<name>_scale" — one value for the
// whole tensor (shape [] or [1]) or one per row ([rows] or [rows, 1]); F32,
// BF16 or F16, finite and >= 0. Row r of the weight is scale[r] times the
// decoded codes (base/fp8.h). Throws kvasir::Error naming the tensor if the
// weight is not FP8 or its scale is missing or malformed; the model's open
// checks every FP8 weight this way.
std::vector<float> fp8_row_scales(const ModelFile& model, const std::string& name);

}  // namespace kvasir
