// stages/cuda/executor.h — one stage's slice of the model on one GPU.
//
// The GPU twin of stages/forward.h's SliceExecutor, with the kernels of
// kernels/cuda/ on one stream and the GEMMs through cuBLASLt:
//   weights: bf16 on the device, dequantised once at load (GGUF F32/F16/BF16/
//            Q8_0/Q4_0/Q4_1 on the device, K-quants on the host through the
//            CPU's dequantize_row); norms f32; gate and up concatenated into
//            one [2*ffn, hidden] matrix (one GEMM, SwiGLU reads both halves);
//   residual stream: f32 [max_tokens, hidden], the GEMMs of Wo and Wdown
//            accumulate into it (beta = 1: the residual add is free);
//   KV:      bf16 paged blocks, kernels/cuda/paged_kv_layout.h;
//   tail:    the sampled rows' last tokens gathered, final norm, output GEMM,
//            logits copied to the host (the agent's sampler picks the token).
// One host synchronisation per batch, where the batch is handed on.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/paged_kv_layout.h"
#include "kernels/cuda/sampling.h"
#include "model/model_file.h"
#include "stages/cuda/device_boundary.h"
#include "stages/cuda/plugin_abi.h"

namespace kvasir::cuda {

// A failed call: status (KvasirCudaStatus) and text, for the C ABI.
struct Fault {
  int status = KVASIR_CUDA_OK;
  std::string text;
};

class CudaSliceExecutor {
 public:
  ~CudaSliceExecutor();
  // Selects the device, opens the model, uploads the slice; capacity_blocks
  // from gpu_memory_utilization of the free memory after that.
  static std::unique_ptr<CudaSliceExecutor> open(const KvasirCudaStageConfig& cfg, Fault& f);
  int64_t capacity_blocks() const { return capacity_; }
  bool allocate_kv(int32_t n_blocks, Fault& f);
  bool attach(ipc::CudaBoundaryTable* table, int32_t import_link, int32_t export_link,
              const volatile uint32_t* stop, Fault& f);
  bool forward(const KvasirCudaBatch& b, Fault& f);
  const ModelConfig& config() const { return mc_; }
  // The stage's one stream (the GPU benchmark records its events on it).
  cudaStream_t stream() const { return stream_; }

 private:
  struct Layer {
    float* attn_norm = nullptr;       // [hidden] f32
    float* ffn_norm = nullptr;        // [hidden] f32
    __nv_bfloat16* wq = nullptr;      // [n_heads*head_dim, hidden]
    __nv_bfloat16* wk = nullptr;      // [n_kv_heads*head_dim, hidden]
    __nv_bfloat16* wv = nullptr;      // [n_kv_heads*head_dim, hidden]
    __nv_bfloat16* wo = nullptr;      // [hidden, n_heads*head_dim]
    __nv_bfloat16* w_gu = nullptr;    // [2*ffn, hidden]: gate rows, then up rows
    __nv_bfloat16* w_down = nullptr;  // [hidden, ffn]
    GpuKvLayer kv;                    // K, V [n_blocks][n_kv_heads][block_size][head_dim] bf16
  };
  CudaSliceExecutor() = default;
  bool load(const KvasirCudaStageConfig& cfg, Fault& f);
  bool run_layer(const Layer& L, const GpuAttnBatch& ab, int64_t T, Fault& f);
  bool gemm(const __nv_bfloat16* a, const __nv_bfloat16* w, void* d, bool out_bf16, int64_t m,
            int64_t n, int64_t k, float beta, const char* what, Fault& f);
  bool forward_impl(const KvasirCudaBatch& b, bool& received, Fault& f);
  bool tail(const KvasirCudaBatch& b, int64_t T, const int32_t* h_gather, int32_t* d_gather,
            Fault& f);
  // After the batch's synchronisation: the device-sampled rows' tokens.
  bool finish_sampling(const KvasirCudaBatch& b, Fault& f);
  void* dev_alloc(uint64_t bytes, const char* what, Fault& f);

  KvasirCudaStageConfig cfg_{};
  ModelConfig mc_;
  std::unique_ptr<ModelFile> model_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  std::vector<void*> allocs_;  // every device allocation, freed at close
  std::vector<Layer> layers_;
  __nv_bfloat16* embed_ = nullptr;   // [vocab, hidden] head
  float* out_norm_ = nullptr;        // [hidden] tail
  __nv_bfloat16* output_ = nullptr;  // [vocab, hidden] tail
  float* inv_freq_ = nullptr;        // [head_dim/2]
  int64_t capacity_ = 0;
  int32_t n_blocks_ = 0;
  uint64_t kv_block_bytes_ = 0;  // all layers, K and V

  // Scratch, allocated once for max_tokens (T) rows.
  float* x_ = nullptr;            // [T, hidden] residual stream
  __nv_bfloat16* xn_ = nullptr;   // [T, max(hidden, ffn)] normalised / GEMM input
  float* q_ = nullptr;            // [T, n_heads*head_dim]
  float* k_ = nullptr;            // [T, n_kv_heads*head_dim]
  float* v_ = nullptr;            // [T, n_kv_heads*head_dim]
  __nv_bfloat16* att_ = nullptr;  // [T, n_heads*head_dim]
  float* gu_ = nullptr;           // [T, 2*ffn]
  float* last_ = nullptr;         // [max_rows, hidden] tail
  float* logits_ = nullptr;       // [max_rows, vocab] tail
  void* gemm_ws_ = nullptr;       // cuBLASLt workspace
  size_t gemm_ws_bytes_ = 0;
  float* attn_ws_ = nullptr;  // split-KV partials
  size_t attn_ws_bytes_ = 0;
  int32_t* d_err_ = nullptr;  // device error flag
  // Batch description on the device and its pinned host staging.
  int32_t* d_ints_ = nullptr;  // q_start | pos0 | tables | pos | tokens | gather rows
  int32_t* h_ints_ = nullptr;  // pinned, same layout
  uint64_t n_ints_ = 0;
  int32_t* h_err_ = nullptr;  // pinned
  int32_t* d_pos_ = nullptr;  // [T] inside d_ints_: positions of the packed tokens
  // Tail sampling on the device, per sampled row in packed order (the
  // logits_ rows): controls, chosen ids, kSample* flags, raw logprobs.
  GpuSamplingRow* d_samp_ = nullptr;  // [max_rows]
  int32_t* d_tok_ = nullptr;          // [max_rows]
  int32_t* d_flags_ = nullptr;        // [max_rows]
  float* d_lp_ = nullptr;             // [max_rows]
  GpuSamplingRow* h_samp_ = nullptr;  // pinned [max_rows]
  int32_t* h_tok_ = nullptr;          // pinned [max_rows]
  int32_t* h_flags_ = nullptr;        // pinned [max_rows]
  float* h_lp_ = nullptr;             // pinned [max_rows]
  std::vector<int32_t> sel_row_;      // packed sampled index -> batch row
  bool dev_sampled_ = false;          // this batch sampled rows on the device
  DeviceBoundaries bounds_;
};

}  // namespace kvasir::cuda
