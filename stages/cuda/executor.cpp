#include "stages/cuda/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/moe_ffn.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope_kv_append.h"
#include "kernels/cuda/swiglu.h"
#include "stages/cuda/executor_util.h"
#include "stages/slice.h"

namespace kvasir::cuda {
namespace {

constexpr size_t kGemmWorkspace = 32ull << 20;  // cuBLASLt's recommendation for Hopper
constexpr size_t kAttnWorkspaceCap = 256ull << 20;
constexpr int32_t kKvElemBytes = 2;  // KV blocks are bf16

using detail::batch_error;
using detail::cuda_status;
using detail::model_error;

// A CUDA IPC boundary's failure (device_boundary.h reports it as a text).
Status boundary_status(const std::string& why, const char* prefix = "") {
  if (why.empty()) return Status();
  return Status(ErrorCode::kDevice, prefix + why);
}

template <class T>
Status host_alloc(uint64_t bytes, T** out) {
  return cuda_status(cudaMallocHost(reinterpret_cast<void**>(out), bytes), "cudaMallocHost");
}

}  // namespace

CudaSliceExecutor::~CudaSliceExecutor() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (void* p : allocs_) cudaFree(p);
  if (h_ints_) cudaFreeHost(h_ints_);
  if (h_err_) cudaFreeHost(h_err_);
  for (void* h :
       {static_cast<void*>(h_samp_), static_cast<void*>(h_tok_), static_cast<void*>(h_flags_),
        static_cast<void*>(h_lp_), static_cast<void*>(h_mask_)})
    if (h) cudaFreeHost(h);
  if (lt_) cublasLtDestroy(lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

Status CudaSliceExecutor::dev_alloc_bytes(uint64_t bytes, const char* what, void** out) {
  *out = nullptr;
  void* p = nullptr;
  KV_RETURN_IF_ERROR(cuda_status(cudaMalloc(&p, bytes ? bytes : 1), what));
  allocs_.push_back(p);
  *out = p;
  return Status();
}

Status CudaSliceExecutor::open(const KvasirCudaStageConfig& cfg,
                               std::unique_ptr<CudaSliceExecutor>* out) {
  std::unique_ptr<CudaSliceExecutor> e(new CudaSliceExecutor);
  KV_RETURN_IF_ERROR(e->load(cfg));
  *out = std::move(e);
  return Status();
}

// --- Load -----------------------------------------------------------------

Status CudaSliceExecutor::load(const KvasirCudaStageConfig& cfg) {
  KV_RETURN_IF_ERROR(init_device(cfg));
  KV_RETURN_IF_ERROR(open_model());
  KV_RETURN_IF_ERROR(upload_weights());
  KV_RETURN_IF_ERROR(upload_rope());
  KV_RETURN_IF_ERROR(alloc_scratch());
  return measure_capacity();
}

// The config's ranges; the device, the stream and cuBLASLt.
Status CudaSliceExecutor::init_device(const KvasirCudaStageConfig& cfg) {
  cfg_ = cfg;
  if (cfg.max_tokens < 1 || cfg.max_tokens > (1 << 20) || cfg.max_rows < 1 ||
      cfg.max_rows > cfg.max_tokens || cfg.max_table < 1 || cfg.block_size < 1 ||
      cfg.inflight < 1 || !(cfg.gpu_memory_utilization > 0 && cfg.gpu_memory_utilization <= 1))
    return Status(ErrorCode::kInvalidArgument, "stage config out of range");
  if (cfg.weight_quant != KVASIR_CUDA_QUANT_NONE && cfg.weight_quant != KVASIR_CUDA_QUANT_FP8)
    return error_status(ErrorCode::kInvalidArgument, "weight_quant {} unknown", cfg.weight_quant);
  // After exec, before any other CUDA call of this process: this stage's device.
  KV_RETURN_IF_ERROR(cuda_status(cudaSetDevice(cfg.device), "cudaSetDevice"));
  cudaDeviceProp prop{};
  KV_RETURN_IF_ERROR(
      cuda_status(cudaGetDeviceProperties(&prop, cfg.device), "cudaGetDeviceProperties"));
  fp8_ok_ = prop.major * 10 + prop.minor >= 89;
  if (cfg.weight_quant == KVASIR_CUDA_QUANT_FP8 && !fp8_ok_)
    return error_status(ErrorCode::kInvalidArgument,
                        "cuda.quantize = \"fp8\" needs FP8 tensor cores (compute capability "
                        "8.9+); cuda:{} ({}) is {}.{}",
                        cfg.device, prop.name, prop.major, prop.minor);
  KV_RETURN_IF_ERROR(
      cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS)
    return Status(ErrorCode::kDevice, "cublasLtCreate failed");
  return Status();
}

// The model file, the slice's layer range, and what the kernels support.
Status CudaSliceExecutor::open_model() {
  try {
    model_ = ModelFile::open(cfg_.model_path);
  } catch (const Error& e) {
    return model_error(e.message());
  }
  mc_ = model_->config();
  const ModelConfig& c = mc_;
  if (cfg_.first_layer < 0 || cfg_.first_layer > cfg_.last_layer || cfg_.last_layer >= c.n_layers)
    return error_status(ErrorCode::kInvalidArgument, "layers {}-{} outside the model's 0-{}",
                        cfg_.first_layer, cfg_.last_layer, c.n_layers - 1);
  // Mixture of experts: Mixtral-style only (llama with experts: no shared
  // expert, no q/k norm, bf16 experts), within the MoE kernels' limits.
  if (c.moe() && (c.arch != "llama" || c.shared_expert_ffn > 0 || c.qk_norm || c.fp8_weights ||
                  c.n_experts > kMoeMaxExperts || c.n_experts_used < 1 ||
                  c.n_experts_used > std::min(c.n_experts, kMoeMaxTopK) || c.expert_ffn < 1))
    return model_error(fmt::format(
        "{} is a mixture-of-experts model ({} experts, top {}{}{}{}): the CUDA backend runs "
        "Mixtral-style ones only (llama, at most {} experts, top {}; run its stages on cpu)",
        c.arch, c.n_experts, c.n_experts_used, c.shared_expert_ffn > 0 ? ", a shared expert" : "",
        c.qk_norm ? ", per-head q/k RMSNorm" : "", c.fp8_weights ? ", FP8 experts" : "",
        kMoeMaxExperts, kMoeMaxTopK));
  if (c.qk_norm)
    return model_error(fmt::format(
        "{}: per-head q/k RMSNorm (Qwen3) is not implemented on the CUDA backend yet (run its "
        "stages on cpu)",
        c.arch));
  if (c.qkv_bias)
    return model_error("q/k/v biases (Qwen2) are not implemented on the CUDA backend yet");
  if (c.head_dim < 1 || c.head_dim > 256 || c.head_dim % 2 || c.n_heads % c.n_kv_heads)
    return error_status(ErrorCode::kModelFormat, "head_dim {} / heads {}/{} not supported",
                        c.head_dim, c.n_heads, c.n_kv_heads);
  return Status();
}

// The RoPE frequencies: the CPU executor's table (stages/slice.h), the
// rope_freqs.weight divisors included.
Status CudaSliceExecutor::upload_rope() {
  std::vector<float> inv;
  try {
    inv = rope_table(*model_).inv_freq;
  } catch (const Error& e) {
    return e.status();
  }
  KV_RETURN_IF_ERROR(dev_alloc(inv.size() * 4, "inv_freq", &inv_freq_));
  return cuda_status(cudaMemcpy(inv_freq_, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice),
                     "inv_freq");
}

// Scratch for max_tokens rows, the GEMM and attention workspaces, the
// tail's buffers and the batch arrays.
Status CudaSliceExecutor::alloc_scratch() {
  const ModelConfig& c = mc_;
  const uint64_t H = uint64_t(c.hidden), QD = uint64_t(c.n_heads) * uint64_t(c.head_dim),
                 KD = uint64_t(c.n_kv_heads) * uint64_t(c.head_dim), FF = uint64_t(c.ffn);
  const uint64_t T = uint64_t(cfg_.max_tokens), R = uint64_t(cfg_.max_rows);
  KV_RETURN_IF_ERROR(dev_alloc(T * H * 4, "x", &x_));
  KV_RETURN_IF_ERROR(dev_alloc(T * std::max(H, FF) * 2, "xn", &xn_));
  KV_RETURN_IF_ERROR(dev_alloc(T * (QD + 2 * KD) * 4, "qkv", &qkv_));
  KV_RETURN_IF_ERROR(dev_alloc(T * QD * 4, "q", &q_));
  KV_RETURN_IF_ERROR(dev_alloc(T * QD * 2, "att", &att_));
  if (!c.moe()) {  // the dense FFN's; a MoE model's `ffn` is unused
    KV_RETURN_IF_ERROR(dev_alloc(T * 2 * FF * 4, "gate/up out", &gu_));
    KV_RETURN_IF_ERROR(dev_alloc(uint64_t(kGemvMaxRows) * FF * 2, "swiglu out", &swi_));
  } else {
    const uint64_t E = uint64_t(c.n_experts), K = uint64_t(c.n_experts_used);
    KV_RETURN_IF_ERROR(dev_alloc(T * E * 4, "router logits", &router_logits_));
    KV_RETURN_IF_ERROR(dev_alloc(T * K * 4, "expert ids", &moe_ids_));
    KV_RETURN_IF_ERROR(dev_alloc(T * K * 4, "expert weights", &moe_weights_));
    moe_ws_bytes_ =
        moe_ffn_workspace_bytes(int64_t(T), c.n_experts_used, c.n_experts, c.hidden, c.expert_ffn);
    if (moe_ws_bytes_ == 0)
      return error_status(ErrorCode::kInvalidArgument,
                          "MoE: max_tokens {} x top {} of {} experts (hidden {}, width {}) is "
                          "beyond the MoE kernels' limits",
                          T, c.n_experts_used, c.n_experts, c.hidden, c.expert_ffn);
    KV_RETURN_IF_ERROR(dev_alloc(moe_ws_bytes_, "MoE workspace", &moe_ws_));
  }
  if (n_fp8_ > 0) {
    // Activations quantised per row for the E4M3 GEMMs, and the product of
    // those that accumulate into the residual (o, down: n = hidden); the
    // others rescale their f32 output in place.
    const uint64_t widest = std::max({H, QD, FF});
    fp8_.a_bytes = T * widest;
    fp8_.a_scale_bytes = T * 4;
    fp8_.prod_bytes = T * H * 4;
    KV_RETURN_IF_ERROR(dev_alloc(fp8_.a_bytes, "FP8 activations", &fp8_.a));
    KV_RETURN_IF_ERROR(dev_alloc(fp8_.a_scale_bytes, "FP8 activation scales", &fp8_.a_scale));
    KV_RETURN_IF_ERROR(dev_alloc(fp8_.prod_bytes, "FP8 product", &fp8_.prod));
  }
  gemm_ws_bytes_ = kGemmWorkspace;
  KV_RETURN_IF_ERROR(dev_alloc(gemm_ws_bytes_, "cuBLASLt workspace", &gemm_ws_));
  attn_ws_bytes_ =
      std::min(kAttnWorkspaceCap,
               paged_attention_workspace_bytes(
                   // the largest batch that still splits (rows x heads < 2048),
                   // not max_rows: sized for max_rows it is 0 for wide plans
                   int32_t(std::max<int64_t>(
                       1, std::min<int64_t>(int64_t(R), 2047 / std::max(1, c.n_heads)))),
                   c.n_heads, c.head_dim,
                   int32_t(std::min<int64_t>(int64_t(cfg_.max_table) * cfg_.block_size, 1 << 24))));
  KV_RETURN_IF_ERROR(dev_alloc(attn_ws_bytes_, "attention workspace", &attn_ws_));
  KV_RETURN_IF_ERROR(dev_alloc(4, "error flag", &d_err_));
  if (cfg_.tail) KV_RETURN_IF_ERROR(alloc_tail_scratch());
  return alloc_batch_arrays();
}

// The tail's: last rows, logits, and device sampling with pinned staging.
Status CudaSliceExecutor::alloc_tail_scratch() {
  const uint64_t H = uint64_t(mc_.hidden), R = uint64_t(cfg_.max_rows);
  KV_RETURN_IF_ERROR(dev_alloc(R * H * 4, "last rows", &last_));
  KV_RETURN_IF_ERROR(dev_alloc(R * uint64_t(mc_.vocab) * 4, "logits", &logits_));
  KV_RETURN_IF_ERROR(dev_alloc(R * sizeof(GpuSamplingRow), "sampling", &d_samp_));
  KV_RETURN_IF_ERROR(dev_alloc(R * 4, "sampled ids", &d_tok_));
  KV_RETURN_IF_ERROR(dev_alloc(R * 4, "sampling flags", &d_flags_));
  KV_RETURN_IF_ERROR(dev_alloc(R * 4, "sampled logprobs", &d_lp_));
  KV_RETURN_IF_ERROR(host_alloc(R * sizeof(GpuSamplingRow), &h_samp_));
  KV_RETURN_IF_ERROR(host_alloc(R * 4, &h_tok_));
  KV_RETURN_IF_ERROR(host_alloc(R * 4, &h_flags_));
  KV_RETURN_IF_ERROR(host_alloc(R * 4, &h_lp_));
  mask_words_ = int32_t((uint64_t(mc_.vocab) + 31) / 32);
  KV_RETURN_IF_ERROR(dev_alloc(R * uint64_t(mask_words_) * 4, "token masks", &d_mask_));
  KV_RETURN_IF_ERROR(host_alloc(R * uint64_t(mask_words_) * 4, &h_mask_));
  sel_row_.assign(size_t(R), 0);
  return Status();
}

Status CudaSliceExecutor::alloc_batch_arrays() {
  const uint64_t T = uint64_t(cfg_.max_tokens), R = uint64_t(cfg_.max_rows);
  // q_start[R+1] | pos0[R] | tables[R*max_table] | pos[T] | tokens[T] | gather[R]
  n_ints_ = (R + 1) + R + R * uint64_t(cfg_.max_table) + T + T + R;
  KV_RETURN_IF_ERROR(dev_alloc(n_ints_ * 4, "batch arrays", &d_ints_));
  KV_RETURN_IF_ERROR(host_alloc(n_ints_ * 4, &h_ints_));
  return host_alloc(4, &h_err_);
}

// Capacity: a share of what is free now that weights and scratch are up.
Status CudaSliceExecutor::measure_capacity() {
  size_t free_b = 0, total_b = 0;
  KV_RETURN_IF_ERROR(cuda_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
  kv_block_bytes_ = kv_block_bytes(mc_, int32_t(layers_.size()), cfg_.block_size, kKvElemBytes);
  const double budget = double(free_b) * cfg_.gpu_memory_utilization;
  capacity_ = kv_block_bytes_ ? int64_t(budget / double(kv_block_bytes_)) : 0;
  capacity_ = std::min<int64_t>(capacity_, int64_t(1) << 30);
  if (cfg_.cuda_graphs) capacity_ = std::max<int64_t>(0, capacity_ - 1);  // the sink block
  return Status();
}

// --- KV and boundaries ----------------------------------------------------

Status CudaSliceExecutor::allocate_kv(int32_t n_blocks) {
  if (n_blocks < 1 || n_blocks > capacity_)
    return error_status(ErrorCode::kInvalidArgument, "{} KV blocks asked, {} fit", n_blocks,
                        capacity_);
  const ModelConfig& c = mc_;
  // With decode graphs one block more: the sink of the padding rows, which
  // no sequence owns (decode_graph_plan.h).
  const int32_t physical = n_blocks + (cfg_.cuda_graphs ? 1 : 0);
  const uint64_t per = uint64_t(physical) * uint64_t(c.n_kv_heads) * uint64_t(cfg_.block_size) *
                       uint64_t(c.head_dim) * kKvElemBytes;
  for (Layer& L : layers_) {
    KV_RETURN_IF_ERROR(dev_alloc(per, "KV blocks", &L.kv.k));
    KV_RETURN_IF_ERROR(dev_alloc(per, "KV blocks", &L.kv.v));
    KV_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(L.kv.k, 0, per, stream_), "KV memset"));
    KV_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(L.kv.v, 0, per, stream_), "KV memset"));
    L.kv.n_blocks = physical;
  }
  n_blocks_ = n_blocks;
  sink_block_ = cfg_.cuda_graphs ? n_blocks : -1;
  const int64_t cap = std::min<int64_t>(int64_t(cfg_.max_table) * cfg_.block_size, 1 << 24);
  graph_limits_ = DecodeGraphLimits{cfg_.max_rows, int32_t(cap), c.n_heads,
                                    int32_t(kAttnSplitBelowPairs), kAttnPartition};
  return cuda_status(cudaStreamSynchronize(stream_), "KV memset");
}

Status CudaSliceExecutor::attach(ipc::CudaBoundaryTable* table, int32_t import_link,
                                 int32_t export_link, const volatile uint32_t* stop) {
  BoundarySpec s;
  s.device = cfg_.device;
  s.n_slots = cfg_.inflight;
  s.bytes = uint64_t(cfg_.max_tokens) * uint64_t(mc_.hidden) * 4;
  // Export first: the next stage may be waiting for these records while this
  // one waits for the previous stage's.
  if (export_link >= 0)
    KV_RETURN_IF_ERROR(boundary_status(bounds_.export_link(table, export_link, s), "export: "));
  if (import_link >= 0)
    KV_RETURN_IF_ERROR(
        boundary_status(bounds_.import_link(table, import_link, s, stop), "import: "));
  return Status();
}

// --- One batch ------------------------------------------------------------

Status CudaSliceExecutor::gemm(const __nv_bfloat16* a, const Weight& w, void* d, bool out_bf16,
                               int64_t m, int64_t n, int64_t k, float beta, const char* what) {
  GemmArgs g;
  g.handle = lt_;
  g.a = a;
  g.b = w.w;
  g.b_type = w.fp8 ? GemmWeight::kE4M3 : GemmWeight::kBF16;
  g.b_scale = w.scale;
  g.fp8 = fp8_;
  // Without a residual to add, an E4M3 GEMM rescales its f32 output in place.
  if (beta == 0.f && !out_bf16) g.fp8.prod = nullptr;
  g.d = d;
  g.out_type = out_bf16 ? GemmOut::kBF16 : GemmOut::kF32;
  g.m = m;
  g.n = n;
  g.k = k;
  g.beta = beta;
  g.workspace = gemm_ws_;
  g.workspace_bytes = gemm_ws_bytes_;
  cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
  g.cublas_status = &cs;
  cudaError_t e = launch_gemm(g, stream_);
  if (e == cudaSuccess) return Status();
  return error_status(ErrorCode::kDevice, "GEMM {} [{}x{}x{}]{}: {} (cuBLASLt status {})", what, m,
                      n, k, w.fp8 ? " E4M3" : "", cudaGetErrorString(e), int(cs));
}

// One layer over T tokens (the batch's, or a decode graph's padded rows).
Status CudaSliceExecutor::run_layer(const Layer& L, const GpuAttnBatch& ab, int64_t T) {
  const ModelConfig& c = mc_;
  const int64_t H = c.hidden, QD = int64_t(c.n_heads) * c.head_dim,
                KD = int64_t(c.n_kv_heads) * c.head_dim;
  // Attention block: x += Wo · attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x))
  RmsNormArgs n1;
  n1.x = x_;
  n1.weight = L.attn_norm;
  n1.n_rows = T;
  n1.dim = int32_t(H);
  n1.eps = c.rms_eps;
  n1.out = xn_;
  KV_RETURN_IF_ERROR(cuda_status(launch_rmsnorm(n1, stream_), "rmsnorm"));
  KV_RETURN_IF_ERROR(gemm(xn_, L.qkv, qkv_, false, T, QD + 2 * KD, H, 0.f, "qkv"));
  RopeKvAppendArgs r;
  r.qkv = qkv_;
  r.q_out = q_;
  r.kv = L.kv;
  r.batch = ab;
  r.pos = d_pos_;
  r.inv_freq = inv_freq_;
  r.n_heads = c.n_heads;
  r.rot_dim = c.head_dim;
  r.layout = c.rope_layout == kvasir::RopeLayout::kAdjacent ? cuda::RopeLayout::kAdjacent
                                                            : cuda::RopeLayout::kHalf;
  r.linear_factor = c.rope_linear_factor > 0 ? c.rope_linear_factor : 1.f;
  r.error = d_err_;
  KV_RETURN_IF_ERROR(cuda_status(launch_rope_kv_append(r, stream_), "rope + kv_append"));
  PagedAttentionArgs pa;
  pa.kv = L.kv;
  pa.batch = ab;
  pa.q = q_;
  pa.n_heads = c.n_heads;
  pa.scale = 1.0f / std::sqrt(float(c.head_dim));
  pa.out = att_;
  pa.workspace = attn_ws_;
  pa.workspace_bytes = attn_ws_bytes_;
  pa.error = d_err_;
  KV_RETURN_IF_ERROR(cuda_status(launch_paged_attention(pa, stream_), "paged_attention"));
  KV_RETURN_IF_ERROR(gemm(att_, L.o, x_, false, T, H, QD, 1.f, "o (+residual)"));
  RmsNormArgs n2 = n1;
  n2.weight = L.ffn_norm;
  KV_RETURN_IF_ERROR(cuda_status(launch_rmsnorm(n2, stream_), "rmsnorm"));
  return ffn(L, T);
}

// Feed-forward block: x += Wdown · (silu(Wgate·n(x)) * Wup·n(x)). For 1..4
// rows the gate/up kernel applies SwiGLU itself (no f32 [T, 2·ffn] round
// trip, one launch less).
Status CudaSliceExecutor::ffn(const Layer& L, int64_t T) {
  if (mc_.moe()) return moe_ffn(L, T);
  const int64_t H = mc_.hidden, FF = mc_.ffn;
  GemmArgs g;
  g.a = xn_;
  g.b = L.gu.w;
  g.b_type = L.gu.fp8 ? GemmWeight::kE4M3 : GemmWeight::kBF16;
  g.b_scale = L.gu.scale;
  g.d = swi_;
  g.out_type = GemmOut::kBF16;
  g.m = T;
  g.n = 2 * FF;  // as gemv_applies sees the stacked weight
  g.k = H;
  if (gemm_skinny_enabled() && gemv_applies(g)) {
    g.n = FF;
    KV_RETURN_IF_ERROR(cuda_status(launch_gemv_swiglu(g, stream_), "gate/up + swiglu"));
    return gemm(swi_, L.down, x_, false, T, H, FF, 1.f, "down (+residual)");
  }
  KV_RETURN_IF_ERROR(gemm(xn_, L.gu, gu_, false, T, 2 * FF, H, 0.f, "gate/up"));
  SwiGluArgs sw;
  sw.gate = gu_;
  sw.up = gu_ + FF;
  sw.n_rows = T;
  sw.n_ff = FF;
  sw.in_stride = 2 * FF;
  sw.out = xn_;
  KV_RETURN_IF_ERROR(cuda_status(launch_swiglu(sw, stream_), "swiglu"));
  return gemm(xn_, L.down, x_, false, T, H, FF, 1.f, "down (+residual)");
}

// Mixture of experts (Mixtral-style), on xn_ (the FFN norm's output):
// router logits (f32) → top-k (moe_route) → the experts' SwiGLU FFNs,
// their weighted sum added into the residual (moe_ffn, accumulate) in the
// CPU's order. The router gets no error flag: a decode graph's padding
// rows are routed too, and whatever they flag must not fail the batch (a
// non-finite row gets ids 0..k-1, weights 0). moe_ffn gets it: its flags
// (an expert id out of range, a bad row position) can only mean a bug, as
// its ids come from moe_route. All on the stream, no host sync: decode
// graphs capture it as they capture the dense path.
Status CudaSliceExecutor::moe_ffn(const Layer& L, int64_t T) {
  const ModelConfig& c = mc_;
  KV_RETURN_IF_ERROR(
      gemm(xn_, L.router, router_logits_, false, T, c.n_experts, c.hidden, 0.f, "router"));
  MoeRouteArgs r;
  r.logits = router_logits_;
  r.n = T;
  r.n_experts = c.n_experts;
  r.top_k = c.n_experts_used;
  r.norm_topk = c.expert_norm_topk;
  r.ids = moe_ids_;
  r.weights = moe_weights_;
  KV_RETURN_IF_ERROR(cuda_status(launch_moe_route(r, stream_), "moe_route"));
  MoeFfnArgs m;
  m.x = xn_;
  m.ids = moe_ids_;
  m.weights = moe_weights_;
  m.n = T;
  m.top_k = c.n_experts_used;
  m.n_experts = c.n_experts;
  m.hidden = c.hidden;
  m.ffn = c.expert_ffn;
  m.gate = L.gate_exps;
  m.up = L.up_exps;
  m.down = L.down_exps;
  m.out = x_;
  m.accumulate = true;
  m.workspace = moe_ws_;
  m.workspace_bytes = moe_ws_bytes_;
  m.error = d_err_;
  return cuda_status(launch_moe_ffn(m, stream_), "moe_ffn");
}

// Every layer, eagerly or as the decode graph of the step's shape.
Status CudaSliceExecutor::run_layers(const GpuAttnBatch& ab, const StepShape& s) {
  auto body = [&]() -> Status {
    for (const Layer& L : layers_) KV_RETURN_IF_ERROR(run_layer(L, ab, s.tokens));
    return Status();
  };
  if (!s.graph) return body();
  return graphs_.run(decode_graph_key(DecodeShape{s.rows, s.context}), stream_, body);
}

Status CudaSliceExecutor::forward(const KvasirCudaBatch& b) {
  bool received = false;
  Status st = forward_impl(b, received);
  if (received) {
    // The input slot's credit goes back once the copy out of it completed,
    // also when the pass failed later (else its exporter would stall).
    Status sync = cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (!sync.ok() && st.ok()) st = sync;
    Status released = boundary_status(bounds_.release(b.slot, b.batch_id));
    if (!released.ok() && st.ok()) st = released;
  } else if (!st.ok()) {
    // A pass that failed after queuing work may still be reading the pinned
    // staging arrays the next batch overwrites: let it finish first.
    cudaStreamSynchronize(stream_);
  }
  return st;
}

// Checks the batch on the host, uploads its arrays, runs the layers, hands
// the result on; one synchronisation, at the end.
Status CudaSliceExecutor::forward_impl(const KvasirCudaBatch& b, bool& received) {
  KV_RETURN_IF_ERROR(check_batch(b));
  const BatchArrays h = batch_arrays(h_ints_), d = batch_arrays(d_ints_);
  d_pos_ = d.pos;
  // Every bound is checked here, on the host, before any kernel runs.
  int64_t max_ctx = 0;
  KV_RETURN_IF_ERROR(stage_rows(b, h, max_ctx));
  KV_RETURN_IF_ERROR(copy_blocks(b));
  const int64_t T = b.n_tokens;
  if (T == 0) return Status();
  KV_RETURN_IF_ERROR(stage_tokens(b, h));
  GpuKvLayer probe_kv = layers_.empty() ? GpuKvLayer{} : layers_[0].kv;
  probe_kv.n_blocks = n_blocks_;  // a row of the batch may not name the sink
  std::string why = check_attn_batch_host(probe_kv, h.q_start, h.pos0, h.tables, b.n_rows,
                                          int32_t(T), cfg_.max_table, int32_t(max_ctx));
  if (!why.empty()) return batch_error("batch: " + why);
  const StepShape shape = step_shape(b, max_ctx);
  if (shape.graph)
    pad_decode_rows(DecodeBatchArrays{h.q_start, h.pos0, h.tables, h.pos,
                                      cfg_.head ? h.tokens : nullptr, cfg_.max_table},
                    b.n_rows, shape.rows, sink_block_);
  KV_RETURN_IF_ERROR(upload_batch(b, h, d, shape));

  GpuAttnBatch ab;
  ab.q_start = d.q_start;
  ab.pos0 = d.pos0;
  ab.block_tables = d.tables;
  ab.n_seqs = shape.rows;
  ab.n_tokens = int32_t(shape.tokens);
  ab.max_blocks = cfg_.max_table;
  ab.max_context = shape.context;
  KV_RETURN_IF_ERROR(take_input(b, d, received));
  if (shape.tokens > T)  // padding rows: zeros in, whatever they compute is never read
    KV_RETURN_IF_ERROR(cuda_status(
        cudaMemsetAsync(x_ + T * mc_.hidden, 0, size_t(shape.tokens - T) * mc_.hidden * 4, stream_),
        "padding rows"));
  KV_RETURN_IF_ERROR(run_layers(ab, shape));
  KV_RETURN_IF_ERROR(hand_on(b, h, d));
  return finish_batch(b);
}

// Copy-on-write: block src's K and V to block dst in every layer, queued on
// the stream before the layers (a block is contiguous in both caches).
Status CudaSliceExecutor::copy_blocks(const KvasirCudaBatch& b) {
  if (b.n_copies < 0 || b.n_copies > cfg_.max_rows ||
      (b.n_copies > 0 && (!b.copy_src || !b.copy_dst)))
    return batch_error(fmt::format("batch: {} block copies", b.n_copies));
  for (int32_t i = 0; i < b.n_copies; ++i)
    if (b.copy_src[i] < 0 || b.copy_src[i] >= n_blocks_ || b.copy_dst[i] < 0 ||
        b.copy_dst[i] >= n_blocks_ || b.copy_src[i] == b.copy_dst[i])
      return batch_error(fmt::format("batch: block copy {} -> {} outside 0..{}", b.copy_src[i],
                                     b.copy_dst[i], n_blocks_ - 1));
  for (const Layer& L : layers_) {
    const int64_t block = kv_offset(L.kv, 1, 0, 0);  // elements per block
    for (int32_t i = 0; i < b.n_copies; ++i)
      for (__nv_bfloat16* cache : {L.kv.k, L.kv.v})
        KV_RETURN_IF_ERROR(cuda_status(
            cudaMemcpyAsync(cache + b.copy_dst[i] * block, cache + b.copy_src[i] * block,
                            size_t(block) * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice,
                            stream_),
            "cudaMemcpyAsync (block copy)"));
  }
  return Status();
}

Status CudaSliceExecutor::check_batch(const KvasirCudaBatch& b) const {
  const int64_t T = b.n_tokens, R = cfg_.max_rows;
  if (n_blocks_ < 1) return Status(ErrorCode::kInvalidArgument, "forward before allocate_kv");
  if (b.n_rows < 0 || b.n_rows > R || (b.n_rows > 0 && !b.rows))
    return batch_error(fmt::format("batch: {} rows (plan: {})", b.n_rows, R));
  if (T < 0 || T > cfg_.max_tokens)
    return batch_error(
        fmt::format("batch: {} tokens exceed the plan's max_tokens {}", T, cfg_.max_tokens));
  return Status();
}

CudaSliceExecutor::BatchArrays CudaSliceExecutor::batch_arrays(int32_t* base) const {
  const int64_t R = cfg_.max_rows, MT = cfg_.max_table;
  BatchArrays a;
  a.q_start = base;
  a.pos0 = a.q_start + (R + 1);
  a.tables = a.pos0 + R;
  a.pos = a.tables + R * MT;
  a.tokens = a.pos + cfg_.max_tokens;
  a.gather = a.tokens + cfg_.max_tokens;
  return a;
}

// Rows → q_start, pos0, block tables and positions in the host arrays, each
// bound checked; max_ctx = the longest row's context.
Status CudaSliceExecutor::stage_rows(const KvasirCudaBatch& b, const BatchArrays& h,
                                     int64_t& max_ctx) const {
  const int64_t T = b.n_tokens, MT = cfg_.max_table;
  int64_t t = 0;
  max_ctx = 0;
  h.q_start[0] = 0;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    const KvasirCudaRow& row = b.rows[r];
    if (row.n_tokens < 1 || row.pos0 < 0 || row.n_table < 0 || row.n_table > MT ||
        (row.n_table > 0 && !row.block_table))
      return batch_error(fmt::format("batch row {}: malformed", r));
    const int64_t end = int64_t(row.pos0) + row.n_tokens;
    if (end > int64_t(row.n_table) * cfg_.block_size || t + row.n_tokens > T)
      return batch_error(fmt::format("batch row {}: positions up to {} do not fit its {} blocks", r,
                                     end - 1, row.n_table));
    for (int32_t i = 0; i < row.n_table; ++i) {
      if (row.block_table[i] < 0 || row.block_table[i] >= n_blocks_)
        return batch_error(fmt::format("batch row {}: block id {} outside 0..{}", r,
                                       row.block_table[i], n_blocks_ - 1));
      h.tables[r * MT + i] = row.block_table[i];
    }
    for (int64_t i = row.n_table; i < MT; ++i) h.tables[r * MT + i] = 0;
    for (int32_t i = 0; i < row.n_tokens; ++i) h.pos[t + i] = row.pos0 + i;
    h.pos0[r] = row.pos0;
    t += row.n_tokens;
    h.q_start[r + 1] = int32_t(t);
    max_ctx = std::max(max_ctx, end);
  }
  if (t != T)
    return batch_error(fmt::format("batch: rows hold {} tokens but n_tokens is {}", t, T));
  return Status();
}

// The head's token ids, checked against the vocabulary.
Status CudaSliceExecutor::stage_tokens(const KvasirCudaBatch& b, const BatchArrays& h) const {
  if (!cfg_.head) return Status();
  if (!b.tokens) return batch_error("batch: the head needs token ids");
  for (int64_t i = 0; i < b.n_tokens; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= mc_.vocab)
      return batch_error(
          fmt::format("token id {} outside the vocabulary 0..{}", b.tokens[i], mc_.vocab - 1));
    h.tokens[i] = b.tokens[i];
  }
  return Status();
}

// How the layers run: as they come, or as a decode graph (decode-only
// batch, graphs on, a shape decode_graph_plan.h gives).
CudaSliceExecutor::StepShape CudaSliceExecutor::step_shape(const KvasirCudaBatch& b,
                                                           int64_t max_ctx) const {
  StepShape eager{b.n_tokens, b.n_rows, int32_t(max_ctx), false};
  if (!cfg_.cuda_graphs || sink_block_ < 0 || b.n_tokens != b.n_rows) return eager;
  for (int32_t r = 0; r < b.n_rows; ++r)
    if (b.rows[r].n_tokens != 1) return eager;
  const DecodeShape g = decode_graph_shape(graph_limits_, b.n_rows, int32_t(max_ctx));
  if (g.rows == 0 || g.rows > cfg_.max_tokens) return eager;
  return StepShape{g.rows, g.rows, g.context, true};
}

// The batch arrays (with a graph's padding rows) to the device.
Status CudaSliceExecutor::upload_batch(const KvasirCudaBatch& b, const BatchArrays& h,
                                       const BatchArrays& d, const StepShape& s) {
  auto up = [&](int32_t* dst, const int32_t* src, int64_t n) {
    return cuda_status(cudaMemcpyAsync(dst, src, size_t(n) * 4, cudaMemcpyHostToDevice, stream_),
                       "batch upload");
  };
  const int64_t T = b.n_tokens;
  KV_RETURN_IF_ERROR(up(d.q_start, h.q_start, s.rows + 1));
  KV_RETURN_IF_ERROR(up(d.pos0, h.pos0, s.rows));
  KV_RETURN_IF_ERROR(up(d.tables, h.tables, int64_t(s.rows) * cfg_.max_table));
  KV_RETURN_IF_ERROR(up(d.pos, h.pos, s.tokens));
  if (cfg_.head) KV_RETURN_IF_ERROR(up(d.tokens, h.tokens, T));
  return cuda_status(cudaMemsetAsync(d_err_, 0, 4, stream_), "error flag");
}

// Input: embed (head), the previous GPU stage's slot, or the host boundary.
Status CudaSliceExecutor::take_input(const KvasirCudaBatch& b, const BatchArrays& d,
                                     bool& received) {
  const int64_t T = b.n_tokens, H = mc_.hidden;
  const uint64_t bytes = uint64_t(T) * uint64_t(H) * 4;
  if (cfg_.head) {
    EmbeddingArgs e;
    e.table = embed_;
    e.tokens = d.tokens;
    e.n_tokens = int32_t(T);
    e.vocab = mc_.vocab;
    e.dim = int32_t(H);
    e.out = x_;
    e.error = d_err_;
    return cuda_status(launch_embedding(e, stream_), "embedding");
  }
  if (bounds_.imports()) {
    KV_RETURN_IF_ERROR(boundary_status(bounds_.receive(stream_, b.slot, b.batch_id, x_, bytes)));
    received = true;
    return Status();
  }
  if (!b.hidden_in) return batch_error("batch: no input boundary");
  return cuda_status(cudaMemcpyAsync(x_, b.hidden_in, bytes, cudaMemcpyHostToDevice, stream_),
                     "boundary upload");
}

// Output: the tail's logits (or sampled ids), the next GPU stage's slot, or
// the host boundary.
Status CudaSliceExecutor::hand_on(const KvasirCudaBatch& b, const BatchArrays& h,
                                  const BatchArrays& d) {
  const int64_t T = b.n_tokens;
  const uint64_t bytes = uint64_t(T) * uint64_t(mc_.hidden) * 4;
  if (cfg_.tail) return tail(b, T, h.gather, d.gather);
  if (bounds_.exports())
    return boundary_status(bounds_.send(stream_, b.slot, b.batch_id, x_, bytes));
  if (!b.hidden_out) return batch_error("batch: no output boundary");
  return cuda_status(cudaMemcpyAsync(b.hidden_out, x_, bytes, cudaMemcpyDeviceToHost, stream_),
                     "boundary download");
}

// The one synchronisation: where the batch is handed on. Then the kernels'
// error flag and, at the tail, the device-sampled rows.
Status CudaSliceExecutor::finish_batch(const KvasirCudaBatch& b) {
  KV_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(h_err_, d_err_, 4, cudaMemcpyDeviceToHost, stream_), "error flag"));
  KV_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  if (*h_err_ != kErrorNone)
    return batch_error(fmt::format("batch: a kernel found a malformed index (code {})", *h_err_));
  return cfg_.tail ? finish_sampling(b) : Status();
}

}  // namespace kvasir::cuda
