// stages/cuda/executor.h — one stage's slice of the model on one GPU.
//
// The GPU twin of stages/forward.h's SliceExecutor, with the kernels of
// kernels/cuda/ on one stream and the GEMMs through cuBLASLt:
//   weights: bf16 on the device, dequantised once at load (GGUF F32/F16/BF16/
//            Q8_0/Q4_0/Q4_1 on the device, K-quants on the host through the
//            CPU's dequantize_row), or FP8 E4M3 with a scale per row (an FP8
//            checkpoint's matrices, or every layer matrix with
//            weight_quant = FP8; compute capability 8.9+, else FP8 files are
//            widened to bf16); norms f32; q, k and v stacked into one
//            [(heads + 2 kv_heads) * head_dim, hidden] matrix and gate and up
//            into one [2*ffn, hidden] matrix (one GEMM each);
//   layer:   RMSNorm → QKV GEMM → RoPE + KV append (one kernel) → paged
//            attention → O GEMM accumulating into the residual (beta = 1) →
//            RMSNorm → gate/up GEMM → SwiGLU (for 1..4 rows in the gate/up
//            kernel itself) → down GEMM accumulating into the residual;
//            Mixtral-style MoE: RMSNorm → router GEMM (f32) → moe_route →
//            moe_ffn (kernels/cuda/moe_ffn.h) accumulating into the residual;
//   residual stream: f32 [max_tokens, hidden];
//   KV:      bf16 paged blocks, kernels/cuda/paged_kv_layout.h;
//   decode:  with cuda_graphs, decode-only batches run the layers as a CUDA
//            graph per shape bucket (decode_graph_plan.h, decode_graphs.h),
//            rows padded into a sink KV block past the daemon's count;
//   tail:    the sampled rows' last tokens gathered, final norm, output GEMM;
//            rows the GPU sampler covers sampled on the device, the others'
//            logits copied to the host (the agent's sampler picks the token).
// One host synchronisation per batch, where the batch is handed on.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/paged_kv_layout.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/sampling.h"
#include "model/model_file.h"
#include "stages/cuda/decode_graph_plan.h"
#include "stages/cuda/decode_graphs.h"
#include "stages/cuda/device_boundary.h"
#include "stages/cuda/plugin_abi.h"

namespace kvasir::cuda {

// Every method that can fail returns a kvasir::Status (base/status.h):
// kInvalidArgument for a config or batch out of range (a malformed batch
// fails that batch only), kModelFormat for a tensor missing or not handled,
// kOutOfMemory when device memory runs out, kDevice for a failed CUDA,
// cuBLASLt or CUDA IPC call. The plugin passes the code through its C ABI.
class CudaSliceExecutor {
 public:
  ~CudaSliceExecutor();
  // Selects the device, opens the model, uploads the slice; capacity_blocks
  // from gpu_memory_utilization of the free memory after that. *out is set
  // only when the status is ok.
  static Status open(const KvasirCudaStageConfig& cfg, std::unique_ptr<CudaSliceExecutor>* out);
  int64_t capacity_blocks() const { return capacity_; }
  // n_blocks (1..capacity) KV blocks, zeroed. Once, before forward.
  Status allocate_kv(int32_t n_blocks);
  // The device boundaries (stages/cuda/device_boundary.h): export_link >= 0
  // publishes this stage's output slots, import_link >= 0 opens the previous
  // stage's (waiting until *stop becomes non-zero). -1: a host boundary.
  Status attach(ipc::CudaBoundaryTable* table, int32_t import_link, int32_t export_link,
                const volatile uint32_t* stop);
  // One batch (plugin_abi.h's KvasirCudaBatch).
  Status forward(const KvasirCudaBatch& b);
  const ModelConfig& config() const { return mc_; }
  // The stage's one stream (the GPU benchmark records its events on it).
  cudaStream_t stream() const { return stream_; }
  // What load decided (the benchmark and the tests report it): layer
  // matrices kept or quantised to FP8, and the decode graphs made so far.
  int32_t fp8_matrices() const { return n_fp8_; }
  size_t decode_graphs() const { return graphs_.graphs(); }
  uint64_t graph_replays() const { return graphs_.replays(); }

 private:
  // A weight matrix on the device: bf16, or E4M3 codes with a scale per row.
  struct Weight {
    const void* w = nullptr;       // [rows, cols]
    const float* scale = nullptr;  // [rows], E4M3 only
    bool fp8 = false;
  };
  struct Layer {
    float* attn_norm = nullptr;  // [hidden] f32
    float* ffn_norm = nullptr;   // [hidden] f32
    Weight qkv;                  // [(n_heads + 2*n_kv_heads)*head_dim, hidden]: q, k, v rows
    Weight o;                    // [hidden, n_heads*head_dim]
    Weight gu;                   // [2*ffn, hidden]: gate rows, then up rows
    Weight down;                 // [hidden, ffn]
    GpuKvLayer kv;               // K, V [n_blocks][n_kv_heads][block_size][head_dim] bf16
    // Mixture of experts (Mixtral-style; gu and down unused): the router and
    // the expert stacks, bf16.
    Weight router;                       // [n_experts, hidden]
    __nv_bfloat16* gate_exps = nullptr;  // [n_experts][expert_ffn][hidden]
    __nv_bfloat16* up_exps = nullptr;    // [n_experts][expert_ffn][hidden]
    __nv_bfloat16* down_exps = nullptr;  // [n_experts][hidden][expert_ffn]
  };
  // One tensor of a stacked matrix: its name and rows.
  struct Part {
    std::string name;
    int64_t rows;
  };
  // How a batch's layers run: tokens (= rows + padding for a graph), the
  // attention's context bound, and whether as a decode graph.
  struct StepShape {
    int64_t tokens = 0;
    int32_t rows = 0;
    int32_t context = 0;
    bool graph = false;
  };
  // Host buffers of the weight upload (raw rows, K-quant rows widened on
  // the host), kept across tensors and freed when the load is done.
  struct Staging {
    std::vector<float> f32;
    std::vector<__nv_bfloat16> bf16;
  };
  // The batch arrays, in h_ints_ (pinned) and d_ints_ (device), one layout:
  // q_start[R+1] | pos0[R] | tables[R][max_table] | pos[T] | tokens[T] | gather[R]
  // (R = max_rows, T = max_tokens).
  struct BatchArrays {
    int32_t* q_start = nullptr;
    int32_t* pos0 = nullptr;
    int32_t* tables = nullptr;
    int32_t* pos = nullptr;
    int32_t* tokens = nullptr;
    int32_t* gather = nullptr;
  };
  CudaSliceExecutor() = default;

  // load: the steps of open.
  Status load(const KvasirCudaStageConfig& cfg);
  Status init_device(const KvasirCudaStageConfig& cfg);
  Status open_model();
  Status upload_weights();
  Status upload_layer(Staging& st, int layer, Layer& L);
  Status upload_experts(Staging& st, const std::string& name, int64_t rows, int64_t cols,
                        __nv_bfloat16** out);
  Status upload_matrix(Staging& st, const std::vector<Part>& parts, int64_t cols, bool quantizable,
                       Weight* out);
  bool matrix_fp8(const std::vector<Part>& parts, int64_t cols, bool quantizable) const;
  Status upload_part_fp8(const Part& p, int64_t cols, uint8_t* dst, float* scale);
  Status quantize_part(Staging& st, const Part& p, int64_t cols, uint8_t* dst, float* scale);
  Status upload_fp8_as_bf16(Staging& st, const TensorView& t, const std::string& name,
                            __nv_bfloat16* dst);
  Status upload_rope();
  Status alloc_scratch();
  Status alloc_tail_scratch();
  Status alloc_batch_arrays();
  Status measure_capacity();
  // Weight upload helpers.
  Status find_tensor(const std::string& name, const TensorView** out) const;
  Status upload_weight(Staging& st, const std::string& name, int64_t rows, int64_t cols,
                       __nv_bfloat16** out, __nv_bfloat16* dst = nullptr);
  Status upload_norm(Staging& st, const std::string& name, float** out);
  Status upload_bf16(Staging& st, const TensorView& t, __nv_bfloat16* dst, const char* what);
  Status upload_raw(const TensorView& t, __nv_bfloat16* dst, const char* what);
  Status dev_alloc_bytes(uint64_t bytes, const char* what, void** out);
  template <class T>
  Status dev_alloc(uint64_t bytes, const char* what, T** out) {
    void* p = nullptr;
    Status s = dev_alloc_bytes(bytes, what, &p);
    *out = static_cast<T*>(p);
    return s;
  }

  // forward: the steps of one batch.
  Status forward_impl(const KvasirCudaBatch& b, bool& received);
  Status check_batch(const KvasirCudaBatch& b) const;
  Status copy_blocks(const KvasirCudaBatch& b);
  BatchArrays batch_arrays(int32_t* base) const;
  Status stage_rows(const KvasirCudaBatch& b, const BatchArrays& h, int64_t& max_ctx) const;
  Status stage_tokens(const KvasirCudaBatch& b, const BatchArrays& h) const;
  StepShape step_shape(const KvasirCudaBatch& b, int64_t max_ctx) const;
  Status upload_batch(const KvasirCudaBatch& b, const BatchArrays& h, const BatchArrays& d,
                      const StepShape& s);
  Status take_input(const KvasirCudaBatch& b, const BatchArrays& d, bool& received);
  Status run_layers(const GpuAttnBatch& ab, const StepShape& s);
  Status run_layer(const Layer& L, const GpuAttnBatch& ab, int64_t T);
  Status ffn(const Layer& L, int64_t T);
  Status moe_ffn(const Layer& L, int64_t T);
  Status gemm(const __nv_bfloat16* a, const Weight& w, void* d, bool out_bf16, int64_t m, int64_t n,
              int64_t k, float beta, const char* what);
  Status hand_on(const KvasirCudaBatch& b, const BatchArrays& h, const BatchArrays& d);
  Status finish_batch(const KvasirCudaBatch& b);
  // The tail: final norm, output head, logits or device sampling.
  Status tail(const KvasirCudaBatch& b, int64_t T, int32_t* h_gather, int32_t* d_gather);
  RmsNormArgs final_norm() const;
  Status tail_all_logits(const KvasirCudaBatch& b, int64_t T);
  Status select_rows(const KvasirCudaBatch& b, int32_t* h_gather, int32_t& n_sel);
  Status project_rows(int64_t T, int32_t n_sel, const int32_t* h_gather, int32_t* d_gather);
  Status sample_rows(const KvasirCudaBatch& b, int32_t n_sel);
  Status stage_mask(const KvasirCudaBatch& b, int32_t r, int32_t sel);
  Status apply_masks(int32_t n_sel);
  // After the batch's synchronisation: the device-sampled rows' tokens.
  Status finish_sampling(const KvasirCudaBatch& b);

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
  int32_t n_blocks_ = 0;            // the daemon's; with graphs one more (the sink) is allocated
  int32_t sink_block_ = -1;         // padding rows' KV block (graphs only)
  bool fp8_ok_ = false;             // compute capability 8.9+: FP8 tensor cores
  int32_t n_fp8_ = 0, n_bf16_ = 0;  // layer matrices of each kind (stacked ones count once)
  DecodeGraphLimits graph_limits_;
  DecodeGraphs graphs_;
  uint64_t kv_block_bytes_ = 0;  // all layers, K and V

  // Scratch, allocated once for max_tokens (T) rows.
  float* x_ = nullptr;            // [T, hidden] residual stream
  __nv_bfloat16* xn_ = nullptr;   // [T, max(hidden, ffn)] normalised / GEMM input
  float* qkv_ = nullptr;          // [T, (n_heads + 2*n_kv_heads)*head_dim] the QKV GEMM's output
  float* q_ = nullptr;            // [T, n_heads*head_dim] after RoPE
  __nv_bfloat16* att_ = nullptr;  // [T, n_heads*head_dim]
  float* gu_ = nullptr;           // [T, 2*ffn]
  __nv_bfloat16* swi_ = nullptr;  // [kGemvMaxRows, ffn] the fused gate/up + SwiGLU output
  // E4M3 GEMMs with more than kGemvMaxRows rows (allocated when a layer
  // matrix is FP8): activations quantised per row, their scales, and the
  // product of the GEMMs accumulating into the residual.
  GemmFp8Scratch fp8_;
  // MoE models only: the router's logits, its choices, and the expert FFN's
  // workspace (kernels/cuda/moe_ffn.h), for max_tokens rows.
  float* router_logits_ = nullptr;  // [T, n_experts]
  int32_t* moe_ids_ = nullptr;      // [T, top_k]
  float* moe_weights_ = nullptr;    // [T, top_k]
  void* moe_ws_ = nullptr;
  size_t moe_ws_bytes_ = 0;
  float* last_ = nullptr;    // [max_rows, hidden] tail
  float* logits_ = nullptr;  // [max_rows, vocab] tail
  void* gemm_ws_ = nullptr;  // cuBLASLt workspace
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
  // Structured outputs: each packed row's token mask (all ones where none),
  // applied before the device sampler (kernels/cuda/token_mask.h).
  int32_t mask_words_ = 0;      // (vocab + 31) / 32
  uint32_t* d_mask_ = nullptr;  // [max_rows, mask_words_]
  uint32_t* h_mask_ = nullptr;  // pinned, same layout
  bool masked_ = false;         // this batch has a masked device row
  DeviceBoundaries bounds_;
};

}  // namespace kvasir::cuda
