// tests/support/tiny_model.h — a tiny random Llama, written both as a GGUF
// file and as a Hugging Face safetensors folder from the same weights.
//
// The GGUF file is written the way llama.cpp's converter writes one: q and k
// rows permuted from rotate-half to adjacent-pair order, so a forward with
// kAdjacent RoPE on the GGUF equals a forward with kHalf RoPE on the folder.
// It also carries a byte-level BPE tokenizer (256 GPT-2 byte tokens, no
// merges, then specials) so tokenizer and end-to-end tests can run on it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace kvasir::test {

struct TinySpec {
  int layers = 2, hidden = 64, heads = 4, kv_heads = 2, ffn = 96, vocab = 272, ctx = 512;
  float rope_theta = 10000;
  uint64_t seed = 1;
  DType matrix_type = DType::F32;  // GGUF matrices and token_embd; norms stay F32
  bool tied = false;               // no output.weight / lm_head.weight
  int st_shards = 1;               // safetensors files (> 1 writes model.safetensors.index.json)
  // "llama", "qwen2" (q/k/v biases, no q/k permutation in GGUF), "qwen3"
  // (per-head q/k norms, no permutation), "qwen3moe" (qwen3 with experts),
  // "qwen2moe" (experts, a gated shared expert, q/k/v biases); "llama" with
  // experts > 0 is Mixtral (MixtralForCausalLM in the folder).
  std::string arch = "llama";
  int head_dim = 0;  // 0: hidden / heads (the GGUF says attention.key_length when set)
  // Experts (MoE when experts > 0): each of width expert_ffn (Mixtral: ffn),
  // experts_used per token; qwen2moe's shared expert of width shared_ffn.
  int experts = 0, experts_used = 0, expert_ffn = 0, shared_ffn = 0;
  // The folder's norm_topk_prob (Qwen MoE). A GGUF file has no such key
  // (qwen3moe renormalises, qwen2moe does not): set it false for qwen2moe
  // when both forms must hold the same model.
  bool norm_topk = true;
  // Matrices are quantised to this type and back before they are written
  // (F32: untouched). With matrix_type F32 this gives a model whose f32
  // weights are exactly those of a quantised one.
  DType prequantize = DType::F32;
  // Llama-3 RoPE scaling (factor 0: none). The folder's config.json carries
  // rope_scaling {rope_type llama3, ...}; the GGUF carries, as llama.cpp's
  // converter writes it, a rope_freqs.weight tensor [head_dim / 2] of
  // frequency divisors and no scaling metadata.
  float llama3_factor = 0.f, llama3_low = 1.f, llama3_high = 4.f;
  int llama3_original_context = 8192;
  // Safetensors only: the layer matrices (q, k, v, o, gate, up, down; not the
  // embeddings or the output head) as an FP8 checkpoint stores them,
  // F8_E4M3 codes from base/fp8.h plus a weight_scale tensor:
  //   kFp8PerTensor  one F32 scale of shape [] ("fp8" quantization_config),
  //   kFp8PerChannel a BF16 scale per row, shape [rows, 1] (compressed-tensors).
  // fp8_dequantized writes instead, as F32 and without quantization_config,
  // the values those codes and scales stand for (scale · code): the same
  // model unquantised.
  enum Fp8 { kFp8None = 0, kFp8PerTensor = 1, kFp8PerChannel = 2 };
  // Safetensors only: every tensor, norms and biases included, in this type
  // (F32, F16 or BF16), as a checkpoint stores them; with st_round_only the
  // values are rounded through it but written as F32 (the same model).
  DType st_type = DType::F32;
  bool st_round_only = false;
  Fp8 st_fp8 = kFp8None;
  bool fp8_dequantized = false;
  // gpt-oss: the sliding window of its even layers, YaRN (factor 0: none)
  // and the expert stacks in MXFP4 (else matrix_type). Its folder holds the
  // GGUF file's values and MXFP4 bytes as the checkpoint lays them out
  // (GptOssForCausalLM; st_type and st_fp8 do not apply).
  int sliding_window = 0;
  float yarn_factor = 0.f;
  int yarn_original_context = 0;
  bool experts_mxfp4 = false;
};

// The tiny model of one family, as the peer comparison writes it
// (tests/reference/moe/make_refs.py, tests/unit/stages/test_forward_peer.cpp):
// "llama", "qwen3" (head_dim 24), "qwen3moe" (7 experts, top 3, width 32),
// "qwen2moe" (5 experts, top 2, width 32, a shared expert of 64), "mixtral"
// (llama with 4 experts, top 2), "gpt-oss" (4 experts, top 2, width 32 in
// MXFP4, BF16 attention and embeddings, head_dim 16, sinks, biases, a
// window of 5 on the even layers, YaRN factor 32 over an original context
// of 64). Throws kvasir::Error for another name.
TinySpec tiny_family(const std::string& family);

// The rope_freqs.weight factors llama.cpp's convert_hf_to_gguf.py writes for
// s's Llama-3 scaling (f32 frequencies, as the converter computes them).
std::vector<float> llama3_rope_factors(const TinySpec& s);

// One weight in Hugging Face orientation (shape outermost first, e.g. [out, in])
// and without any permutation.
struct TinyTensor {
  std::string hf_name, gguf_name;
  std::vector<int64_t> shape;
  std::vector<float> data;
  bool is_norm = false;   // 1-D (norms, biases): always F32
  int expert = -1;        // an expert's matrix: gguf_name is its stack (3-D in GGUF)
  bool keep_f32 = false;  // the router and the shared expert's gate stay F32 in GGUF
};

// Deterministic in (seed, name): normal weights of std 0.5/sqrt(fan_in)
// (embeddings 0.05; routers 2/sqrt(fan_in), so that routing is decisive),
// norms 1 ± 0.05, biases (qwen2) std 0.02.
std::vector<TinyTensor> make_tiny_weights(const TinySpec& s);

// Rows of a [n_head * head_dim, cols] q or k weight, rotate-half → adjacent
// pairs, as convert_hf_to_gguf.py's permute(); and its inverse.
std::vector<float> permute_qk(const std::vector<float>& w, int64_t n_head, int64_t head_dim,
                              int64_t cols);
std::vector<float> unpermute_qk(const std::vector<float>& w, int64_t n_head, int64_t head_dim,
                                int64_t cols);

// The 256 GPT-2 byte-level token strings (bytes_to_unicode), in byte order, UTF-8.
std::vector<std::string> gpt2_byte_tokens();

// Tiny tokenizer ids: 256 <|endoftext|>, 257 <|im_start|> (bos), 258 <|im_end|> (eos).
constexpr int kTinyEndOfText = 256, kTinyBos = 257, kTinyEos = 258;

// The tiny tokenizer's chat template (ChatML), in the GGUF file and the folder.
extern const char* const kTinyChatTemplate;

void write_tiny_gguf(const std::string& path, const TinySpec& s);
void write_tiny_safetensors(const std::string& dir, const TinySpec& s);

// The GGUF file's tokenizer as a Hugging Face folder holds it, written into
// dir beside write_tiny_safetensors' files: tokenizer.json (byte-level BPE,
// SmolLM2's Digits + ByteLevel pre-tokenizer, no merges, the tokens past
// the bytes as special added tokens), tokenizer_config.json (bos
// <|im_start|>, eos <|im_end|>, no add_bos, the chat template) and
// generation_config.json with `generation` as its content ({} for
// none). The folder then encodes and decodes as the GGUF file does.
void write_tiny_hf_tokenizer(const std::string& dir, const TinySpec& s,
                             const std::string& generation = "{}");

// A safetensors file from raw parts, for bad-input tests: the u64 header
// length as given (not necessarily header.size()), the header text, the data.
void write_safetensors_raw(const std::string& path, uint64_t header_len, const std::string& header,
                           const std::vector<uint8_t>& data);

}  // namespace kvasir::test
