// model/safetensors.h — a Hugging Face .safetensors reader over mmap.
//
// Layout: u64 little-endian header length N | N bytes of JSON | data.
// The JSON maps each tensor name to {dtype, shape, data_offsets: [begin, end]}
// (offsets relative to the data area, which starts at 8 + N), plus an optional
// "__metadata__" object of strings, which is ignored.
//
// Checked: N against the file and a 100 MiB cap; the JSON (parse errors,
// duplicate names, field types); dtype (F32, F16, BF16, F8_E4M3, U8 — others
// refused by name); shape (≤ 4 dims, non-negative); begin ≤ end ≤ data size and
// end - begin == product(shape) × element size, all with overflow checks.
// Tensor data need not be aligned: safetensors does not promise it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/tensor.h"
#include "model/mapped_file.h"

namespace kvasir {

struct SafeTensor {
  std::string name;            // as stored (Hugging Face name)
  std::vector<int64_t> shape;  // as stored: outermost first
  TensorView view;             // ne[] innermost first, like GGUF
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

  // Throws kvasir::Error naming the file, the tensor and the fault.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafeTensor>& tensors() const { return tensors_; }
  const SafeTensor* find(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  std::vector<SafeTensor> tensors_;
  std::map<std::string, size_t> index_;
};

// Hugging Face Llama-family tensor name → GGUF name (model_file.h lists them);
// an FP8 weight's "<hf weight>.weight_scale" → "<gguf weight>.weight_scale";
// nullopt for a name Kvasir does not use (e.g. rotary_emb.inv_freq, and FP8
// checkpoints' input_scale, k_scale, v_scale: activations are scaled per
// token at run time, the KV cache stays bf16).
std::optional<std::string> hf_to_gguf_name(std::string_view hf);

// One expert's matrix of a Hugging Face MoE checkpoint → the GGUF name of the
// stacked tensor it belongs to and its expert index:
//   model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight   (Qwen MoE)
//   model.layers.N.block_sparse_moe.experts.E.w{1,3,2}.weight (Mixtral)
// → blk.N.ffn_{gate,up,down}_exps.weight, E. nullopt for any other name.
struct HfExpertName {
  std::string gguf;
  int32_t expert = 0;
};
std::optional<HfExpertName> hf_expert_name(std::string_view hf);

// gpt-oss's expert stacks (one tensor per layer for all experts):
//   model.layers.N.mlp.experts.gate_up_proj_{blocks,scales,bias}
//   model.layers.N.mlp.experts.down_proj_{blocks,scales}
// MXFP4 as U8 blocks [E, rows, cols / 32, 16] (two FP4 codes a byte, the
// even element in the low nibble) and E8M0 scales [E, rows, cols / 32];
// gate_up interleaves gate and up, row 2i gate i, row 2i + 1 up i (also
// its bias [E, 2 * ffn]). model_file.cpp repacks them into GGUF's MXFP4
// stacks. kUnquantised: the same stacks dequantised (not read).
struct GptOssExpertPart {
  enum Kind { kGateUpBlocks, kGateUpScales, kGateUpBias, kDownBlocks, kDownScales, kUnquantised };
  int32_t layer = 0;
  Kind kind = kGateUpBlocks;
};
std::optional<GptOssExpertPart> hf_gpt_oss_expert_part(std::string_view hf);

}  // namespace kvasir
