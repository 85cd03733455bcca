// model/gpt_oss_experts.h — gpt-oss's MXFP4 expert stacks as a Hugging Face
// folder stores them, repacked into the GGUF form the engine reads.
//
// The folder (safetensors.h GptOssExpertPart), per layer, E experts:
//   gate_up_proj_blocks  U8  [E, 2 * ffn, hidden / 32, 16]
//   gate_up_proj_scales  U8  [E, 2 * ffn, hidden / 32]
//   gate_up_proj_bias    F32/F16/BF16 [E, 2 * ffn]   row 2i: gate i, row 2i + 1: up i
//   down_proj_blocks     U8  [E, hidden, ffn / 32, 16]
//   down_proj_scales     U8  [E, hidden, ffn / 32]
// A block's 16 bytes hold 32 FP4 (E2M1) codes, element 2k in byte k's low
// nibble and 2k + 1 in its high one; its scale is an E8M0 exponent (bias
// 127). GGUF's MXFP4 block (base/dtype.h) is the scale byte, then 16 bytes
// with element j in byte j's low nibble and j + 16 in its high one:
// llama.cpp's converter (conversion/gpt_oss.py, repack_mxfp4) makes the
// same bytes, which tests/reference/gptoss/check_hf_mxfp4.py checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/tensor.h"

namespace kvasir {

struct GptOssExpertSources {
  const TensorView* gate_up_blocks = nullptr;
  const TensorView* gate_up_scales = nullptr;
  const TensorView* gate_up_bias = nullptr;
  const TensorView* down_blocks = nullptr;
  const TensorView* down_scales = nullptr;
};

// One layer's stacks in GGUF's form, expert-major: expert e's matrix starts
// at e * rows * (cols / 32) * 17 bytes.
struct GptOssExperts {
  std::vector<uint8_t> gate, up;  // MXFP4 [E][ffn][hidden / 32 blocks]
  std::vector<uint8_t> down;      // MXFP4 [E][hidden][ffn / 32 blocks]
  std::vector<float> gate_bias;   // [E, ffn]
  std::vector<float> up_bias;     // [E, ffn]
};

// Checks every source's dtype and shape against (experts, hidden, ffn),
// naming `where` and the part in the error (kModelFormat), then repacks.
GptOssExperts repack_gpt_oss_experts(const GptOssExpertSources& s, int32_t experts,
                                     int64_t hidden, int64_t ffn, const std::string& where);

// One 16-byte block of the folder's codes → GGUF's order (the inverse is
// gpt_oss_codes_to_folder, for writers of test folders).
void gpt_oss_codes_to_gguf(const uint8_t* folder, uint8_t* gguf);
void gpt_oss_codes_to_folder(const uint8_t* gguf, uint8_t* folder);

}  // namespace kvasir
