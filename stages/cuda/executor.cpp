#include "stages/cuda/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/dequant.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gather_rows.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/cuda/token_logprob.h"
#include "stages/slice.h"

namespace kvasir::cuda {
namespace {

constexpr size_t kGemmWorkspace = 32ull << 20;  // cuBLASLt's recommendation for Hopper
constexpr size_t kAttnWorkspaceCap = 256ull << 20;
constexpr int32_t kKvElemBytes = 2;  // KV blocks are bf16

bool ok(cudaError_t e, const char* what, Fault& f) {
  if (e == cudaSuccess) return true;
  f.status = e == cudaErrorMemoryAllocation ? KVASIR_CUDA_NO_MEMORY : KVASIR_CUDA_RUNTIME;
  f.text = fmt::format("{}: {} ({})", what, cudaGetErrorString(e), int(e));
  return false;
}

bool fail(Fault& f, int status, std::string text) {
  f.status = status;
  f.text = std::move(text);
  return false;
}

bool device_dequant_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
         t == DType::Q4_0 || t == DType::Q4_1;
}

}  // namespace

CudaSliceExecutor::~CudaSliceExecutor() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (void* p : allocs_) cudaFree(p);
  if (h_ints_) cudaFreeHost(h_ints_);
  if (h_err_) cudaFreeHost(h_err_);
  for (void* h : {static_cast<void*>(h_samp_), static_cast<void*>(h_tok_),
                  static_cast<void*>(h_flags_), static_cast<void*>(h_lp_)})
    if (h) cudaFreeHost(h);
  if (lt_) cublasLtDestroy(lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

void* CudaSliceExecutor::dev_alloc(uint64_t bytes, const char* what, Fault& f) {
  void* p = nullptr;
  if (!ok(cudaMalloc(&p, bytes ? bytes : 1), what, f)) return nullptr;
  allocs_.push_back(p);
  return p;
}

std::unique_ptr<CudaSliceExecutor> CudaSliceExecutor::open(const KvasirCudaStageConfig& cfg,
                                                           Fault& f) {
  std::unique_ptr<CudaSliceExecutor> e(new CudaSliceExecutor);
  if (!e->load(cfg, f)) return nullptr;
  return e;
}

bool CudaSliceExecutor::load(const KvasirCudaStageConfig& cfg, Fault& f) {
  cfg_ = cfg;
  if (cfg.max_tokens < 1 || cfg.max_tokens > (1 << 20) || cfg.max_rows < 1 ||
      cfg.max_rows > cfg.max_tokens || cfg.max_table < 1 || cfg.block_size < 1 ||
      cfg.inflight < 1 || !(cfg.gpu_memory_utilization > 0 && cfg.gpu_memory_utilization <= 1))
    return fail(f, KVASIR_CUDA_BAD_ARGS, "stage config out of range");
  // After exec, before any other CUDA call of this process: this stage's device.
  if (!ok(cudaSetDevice(cfg.device), "cudaSetDevice", f)) return false;
  if (!ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate", f))
    return false;
  if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS)
    return fail(f, KVASIR_CUDA_RUNTIME, "cublasLtCreate failed");
  try {
    model_ = ModelFile::open(cfg.model_path);
  } catch (const Error& e) {
    return fail(f, KVASIR_CUDA_MODEL, e.message());
  }
  mc_ = model_->config();
  const ModelConfig& c = mc_;
  if (cfg.first_layer < 0 || cfg.first_layer > cfg.last_layer || cfg.last_layer >= c.n_layers)
    return fail(f, KVASIR_CUDA_BAD_ARGS,
                fmt::format("layers {}-{} outside the model's 0-{}", cfg.first_layer,
                            cfg.last_layer, c.n_layers - 1));
  if (c.qkv_bias)
    return fail(f, KVASIR_CUDA_MODEL,
                "q/k/v biases (Qwen2) are not implemented on the CUDA backend yet");
  if (c.head_dim < 1 || c.head_dim > 256 || c.head_dim % 2 || c.n_heads % c.n_kv_heads)
    return fail(f, KVASIR_CUDA_MODEL,
                fmt::format("head_dim {} / heads {}/{} not supported", c.head_dim, c.n_heads,
                            c.n_kv_heads));

  const int64_t H = c.hidden, QD = int64_t(c.n_heads) * c.head_dim,
                KD = int64_t(c.n_kv_heads) * c.head_dim, FF = c.ffn;
  // Host staging for raw rows and for K-quant rows dequantised on the host.
  std::vector<float> row_f32;
  std::vector<__nv_bfloat16> row_bf16;

  // One tensor → bf16 [rows, cols] at dst (device). Raw GGUF bytes go up once
  // and are expanded on the device; other types row by row on the host.
  auto upload_bf16 = [&](const TensorView& t, __nv_bfloat16* dst, const char* what) -> bool {
    const int64_t rows = t.rows(), cols = t.cols();
    if (device_dequant_type(t.type)) {
      void* raw = nullptr;
      if (!ok(cudaMalloc(&raw, t.nbytes), "cudaMalloc(raw weights)", f)) return false;
      // On stream_, not the legacy stream: stream_ is non-blocking, so the
      // dequant kernel would not be ordered after a plain cudaMemcpy.
      bool good =
          ok(cudaMemcpyAsync(raw, t.data, t.nbytes, cudaMemcpyHostToDevice, stream_), what, f);
      DequantArgs a;
      a.src = raw;
      a.type = t.type;
      a.n_rows = rows;
      a.n_cols = cols;
      a.dst = dst;
      good = good && ok(launch_dequant(a, stream_), what, f) &&
             ok(cudaStreamSynchronize(stream_), what, f);
      cudaFree(raw);
      return good;
    }
    // Rows are widened into a ~8 MiB bf16 staging block, copied up a block at
    // a time (one cudaMemcpy per row would cost millions of calls on an 8B model).
    const int64_t per_block = std::max<int64_t>(1, (int64_t(8) << 20) / (2 * cols));
    row_f32.resize(size_t(cols));
    row_bf16.resize(size_t(std::min(rows, per_block) * cols));
    for (int64_t r0 = 0; r0 < rows; r0 += per_block) {
      const int64_t n = std::min(per_block, rows - r0);
      for (int64_t r = 0; r < n; ++r) {
        try {
          cpu::dequantize_row(t, r0 + r, row_f32.data());
        } catch (const Error& e) {
          return fail(f, KVASIR_CUDA_MODEL, fmt::format("{}: {}", what, e.message()));
        }
        __nv_bfloat16* out = row_bf16.data() + r * cols;
        for (int64_t i = 0; i < cols; ++i) out[i] = __float2bfloat16(row_f32[size_t(i)]);
      }
      if (!ok(cudaMemcpy(dst + r0 * cols, row_bf16.data(), size_t(n * cols) * 2,
                         cudaMemcpyHostToDevice),
              what, f))
        return false;
    }
    return true;
  };
  auto tensor = [&](const std::string& name) -> const TensorView* {
    const TensorView* t = model_->find(name);
    if (!t) fail(f, KVASIR_CUDA_MODEL, fmt::format("tensor {} missing", name));
    return t;
  };
  auto weight = [&](const std::string& name, int64_t rows, int64_t cols,
                    __nv_bfloat16* dst = nullptr) -> __nv_bfloat16* {
    const TensorView* t = tensor(name);
    if (!t) return nullptr;
    if (t->rows() != rows || t->cols() != cols) {
      fail(f, KVASIR_CUDA_MODEL,
           fmt::format("{}: shape [{}, {}], expected [{}, {}]", name, t->rows(), t->cols(), rows,
                       cols));
      return nullptr;
    }
    if (!dst) dst = static_cast<__nv_bfloat16*>(dev_alloc(uint64_t(rows * cols) * 2, "weights", f));
    if (!dst || !upload_bf16(*t, dst, name.c_str())) return nullptr;
    return dst;
  };
  auto norm = [&](const std::string& name) -> float* {
    const TensorView* t = tensor(name);
    if (!t) return nullptr;
    if (t->cols() != H || t->rows() != 1) {
      fail(f, KVASIR_CUDA_MODEL, fmt::format("{} must have {} elements", name, H));
      return nullptr;
    }
    // F32 in GGUF; F16/BF16 in safetensors folders: widened on the host.
    row_f32.resize(size_t(H));
    try {
      cpu::dequantize_row(*t, 0, row_f32.data());
    } catch (const Error& e) {
      fail(f, KVASIR_CUDA_MODEL, fmt::format("{}: {}", name, e.message()));
      return nullptr;
    }
    auto* d = static_cast<float*>(dev_alloc(uint64_t(H) * 4, "norm", f));
    if (d && !ok(cudaMemcpy(d, row_f32.data(), size_t(H) * 4, cudaMemcpyHostToDevice), "norm", f))
      return nullptr;
    return d;
  };

  if (cfg.head && !(embed_ = weight(kTokenEmbdTensor, c.vocab, H))) return false;
  if (cfg.tail) {
    if (!(out_norm_ = norm(kOutputNormTensor))) return false;
    output_ = weight(output_tensor_name(c), c.vocab, H);
    if (!output_) return false;
  }
  layers_.resize(size_t(cfg.last_layer - cfg.first_layer + 1));
  for (int il = cfg.first_layer; il <= cfg.last_layer; ++il) {
    Layer& L = layers_[size_t(il - cfg.first_layer)];
    const LayerTensorNames n = layer_tensor_names(il);
    if (!(L.attn_norm = norm(n.attn_norm)) || !(L.ffn_norm = norm(n.ffn_norm)) ||
        !(L.wq = weight(n.attn_q, QD, H)) || !(L.wk = weight(n.attn_k, KD, H)) ||
        !(L.wv = weight(n.attn_v, KD, H)) || !(L.wo = weight(n.attn_output, H, QD)) ||
        !(L.w_down = weight(n.ffn_down, H, FF)))
      return false;
    L.w_gu = static_cast<__nv_bfloat16*>(dev_alloc(uint64_t(2 * FF * H) * 2, "gate/up", f));
    if (!L.w_gu || !weight(n.ffn_gate, FF, H, L.w_gu) || !weight(n.ffn_up, FF, H, L.w_gu + FF * H))
      return false;
    L.kv.block_size = cfg.block_size;
    L.kv.n_kv_heads = c.n_kv_heads;
    L.kv.head_dim = c.head_dim;
  }

  // RoPE frequencies: the CPU executor's table (stages/slice.h), rope_freqs
  // divisors included.
  std::vector<float> inv;
  try {
    inv = rope_table(*model_).inv_freq;
  } catch (const Error& e) {
    return fail(f, KVASIR_CUDA_MODEL, e.message());
  }
  inv_freq_ = static_cast<float*>(dev_alloc(inv.size() * 4, "inv_freq", f));
  if (!inv_freq_ ||
      !ok(cudaMemcpy(inv_freq_, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice), "inv_freq", f))
    return false;

  // Scratch for max_tokens rows.
  const uint64_t T = uint64_t(cfg.max_tokens), R = uint64_t(cfg.max_rows);
  x_ = static_cast<float*>(dev_alloc(T * H * 4, "x", f));
  xn_ = static_cast<__nv_bfloat16*>(dev_alloc(T * std::max(H, FF) * 2, "xn", f));
  q_ = static_cast<float*>(dev_alloc(T * QD * 4, "q", f));
  k_ = static_cast<float*>(dev_alloc(T * KD * 4, "k", f));
  v_ = static_cast<float*>(dev_alloc(T * KD * 4, "v", f));
  att_ = static_cast<__nv_bfloat16*>(dev_alloc(T * QD * 2, "att", f));
  gu_ = static_cast<float*>(dev_alloc(T * 2 * FF * 4, "gate/up out", f));
  gemm_ws_bytes_ = kGemmWorkspace;
  gemm_ws_ = dev_alloc(gemm_ws_bytes_, "cuBLASLt workspace", f);
  attn_ws_bytes_ =
      std::min(kAttnWorkspaceCap,
               paged_attention_workspace_bytes(
                   // the largest batch that still splits (rows x heads < 2048),
                   // not max_rows: sized for max_rows it is 0 for wide plans
                   int32_t(std::max<int64_t>(
                       1, std::min<int64_t>(int64_t(R), 2047 / std::max(1, c.n_heads)))),
                   c.n_heads, c.head_dim,
                   int32_t(std::min<int64_t>(int64_t(cfg.max_table) * cfg.block_size, 1 << 24))));
  attn_ws_ = static_cast<float*>(dev_alloc(attn_ws_bytes_, "attention workspace", f));
  d_err_ = static_cast<int32_t*>(dev_alloc(4, "error flag", f));
  if (cfg.tail) {
    last_ = static_cast<float*>(dev_alloc(R * H * 4, "last rows", f));
    logits_ = static_cast<float*>(dev_alloc(R * uint64_t(c.vocab) * 4, "logits", f));
    d_samp_ = static_cast<GpuSamplingRow*>(dev_alloc(R * sizeof(GpuSamplingRow), "sampling", f));
    d_tok_ = static_cast<int32_t*>(dev_alloc(R * 4, "sampled ids", f));
    d_flags_ = static_cast<int32_t*>(dev_alloc(R * 4, "sampling flags", f));
    d_lp_ = static_cast<float*>(dev_alloc(R * 4, "sampled logprobs", f));
    if (!d_samp_ || !d_tok_ || !d_flags_ || !d_lp_ ||
        !ok(cudaMallocHost(reinterpret_cast<void**>(&h_samp_), R * sizeof(GpuSamplingRow)),
            "cudaMallocHost", f) ||
        !ok(cudaMallocHost(reinterpret_cast<void**>(&h_tok_), R * 4), "cudaMallocHost", f) ||
        !ok(cudaMallocHost(reinterpret_cast<void**>(&h_flags_), R * 4), "cudaMallocHost", f) ||
        !ok(cudaMallocHost(reinterpret_cast<void**>(&h_lp_), R * 4), "cudaMallocHost", f))
      return false;
    sel_row_.assign(size_t(R), 0);
  }
  // q_start[R+1] | pos0[R] | tables[R*max_table] | pos[T] | tokens[T] | gather[R]
  n_ints_ = (R + 1) + R + R * uint64_t(cfg.max_table) + T + T + R;
  d_ints_ = static_cast<int32_t*>(dev_alloc(n_ints_ * 4, "batch arrays", f));
  if (!x_ || !xn_ || !q_ || !k_ || !v_ || !att_ || !gu_ || !gemm_ws_ || !attn_ws_ || !d_err_ ||
      !d_ints_ || (cfg.tail && (!last_ || !logits_)))
    return false;
  if (!ok(cudaMallocHost(reinterpret_cast<void**>(&h_ints_), n_ints_ * 4), "cudaMallocHost", f) ||
      !ok(cudaMallocHost(reinterpret_cast<void**>(&h_err_), 4), "cudaMallocHost", f))
    return false;

  // Capacity: a share of what is free now that weights and scratch are up.
  size_t free_b = 0, total_b = 0;
  if (!ok(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo", f)) return false;
  kv_block_bytes_ = kv_block_bytes(c, int32_t(layers_.size()), cfg.block_size, kKvElemBytes);
  const double budget = double(free_b) * cfg.gpu_memory_utilization;
  capacity_ = kv_block_bytes_ ? int64_t(budget / double(kv_block_bytes_)) : 0;
  capacity_ = std::min<int64_t>(capacity_, int64_t(1) << 30);
  return true;
}

bool CudaSliceExecutor::allocate_kv(int32_t n_blocks, Fault& f) {
  if (n_blocks < 1 || n_blocks > capacity_)
    return fail(f, KVASIR_CUDA_BAD_ARGS,
                fmt::format("{} KV blocks asked, {} fit", n_blocks, capacity_));
  const ModelConfig& c = mc_;
  const uint64_t per = uint64_t(n_blocks) * uint64_t(c.n_kv_heads) * uint64_t(cfg_.block_size) *
                       uint64_t(c.head_dim) * 2;
  for (Layer& L : layers_) {
    L.kv.k = static_cast<__nv_bfloat16*>(dev_alloc(per, "KV blocks", f));
    L.kv.v = static_cast<__nv_bfloat16*>(dev_alloc(per, "KV blocks", f));
    if (!L.kv.k || !L.kv.v) return false;
    if (!ok(cudaMemsetAsync(L.kv.k, 0, per, stream_), "KV memset", f) ||
        !ok(cudaMemsetAsync(L.kv.v, 0, per, stream_), "KV memset", f))
      return false;
    L.kv.n_blocks = n_blocks;
  }
  n_blocks_ = n_blocks;
  return ok(cudaStreamSynchronize(stream_), "KV memset", f);
}

bool CudaSliceExecutor::attach(ipc::CudaBoundaryTable* table, int32_t import_link,
                               int32_t export_link, const volatile uint32_t* stop, Fault& f) {
  BoundarySpec s;
  s.device = cfg_.device;
  s.n_slots = cfg_.inflight;
  s.bytes = uint64_t(cfg_.max_tokens) * uint64_t(mc_.hidden) * 4;
  // Export first: the next stage may be waiting for these records while this
  // one waits for the previous stage's.
  if (export_link >= 0) {
    std::string why = bounds_.export_link(table, export_link, s);
    if (!why.empty()) return fail(f, KVASIR_CUDA_IPC, "export: " + why);
  }
  if (import_link >= 0) {
    std::string why = bounds_.import_link(table, import_link, s, stop);
    if (!why.empty()) return fail(f, KVASIR_CUDA_IPC, "import: " + why);
  }
  return true;
}

bool CudaSliceExecutor::gemm(const __nv_bfloat16* a, const __nv_bfloat16* w, void* d, bool out_bf16,
                             int64_t m, int64_t n, int64_t k, float beta, const char* what,
                             Fault& f) {
  GemmArgs g;
  g.handle = lt_;
  g.a = a;
  g.b = w;
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
  if (e == cudaSuccess) return true;
  return fail(f, KVASIR_CUDA_RUNTIME,
              fmt::format("GEMM {} [{}x{}x{}]: {} (cuBLASLt status {})", what, m, n, k,
                          cudaGetErrorString(e), int(cs)));
}

bool CudaSliceExecutor::run_layer(const Layer& L, const GpuAttnBatch& ab, int64_t T, Fault& f) {
  const ModelConfig& c = mc_;
  const int64_t H = c.hidden, QD = int64_t(c.n_heads) * c.head_dim,
                KD = int64_t(c.n_kv_heads) * c.head_dim, FF = c.ffn;
  // Attention block: x += Wo · attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x))
  RmsNormArgs n1;
  n1.x = x_;
  n1.weight = L.attn_norm;
  n1.n_rows = T;
  n1.dim = int32_t(H);
  n1.eps = c.rms_eps;
  n1.out = xn_;
  if (!ok(launch_rmsnorm(n1, stream_), "rmsnorm", f)) return false;
  if (!gemm(xn_, L.wq, q_, false, T, QD, H, 0.f, "q", f) ||
      !gemm(xn_, L.wk, k_, false, T, KD, H, 0.f, "k", f) ||
      !gemm(xn_, L.wv, v_, false, T, KD, H, 0.f, "v", f))
    return false;
  RopeArgs r;
  r.q = q_;
  r.k = k_;
  r.pos = d_pos_;
  r.inv_freq = inv_freq_;
  r.n_tokens = int32_t(T);
  r.n_q_heads = c.n_heads;
  r.n_k_heads = c.n_kv_heads;
  r.head_dim = c.head_dim;
  r.rot_dim = c.head_dim;
  r.layout = c.rope_layout == kvasir::RopeLayout::kAdjacent ? cuda::RopeLayout::kAdjacent
                                                            : cuda::RopeLayout::kHalf;
  r.linear_factor = c.rope_linear_factor > 0 ? c.rope_linear_factor : 1.f;
  if (!ok(launch_rope(r, stream_), "rope", f)) return false;
  KvAppendArgs ka;
  ka.kv = L.kv;
  ka.batch = ab;
  ka.k = k_;
  ka.v = v_;
  ka.error = d_err_;
  if (!ok(launch_kv_append(ka, stream_), "kv_append", f)) return false;
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
  if (!ok(launch_paged_attention(pa, stream_), "paged_attention", f)) return false;
  if (!gemm(att_, L.wo, x_, false, T, H, QD, 1.f, "o (+residual)", f)) return false;

  // Feed-forward block: x += Wdown · (silu(Wgate·n(x)) * Wup·n(x))
  RmsNormArgs n2 = n1;
  n2.weight = L.ffn_norm;
  if (!ok(launch_rmsnorm(n2, stream_), "rmsnorm", f)) return false;
  if (!gemm(xn_, L.w_gu, gu_, false, T, 2 * FF, H, 0.f, "gate/up", f)) return false;
  SwiGluArgs sw;
  sw.gate = gu_;
  sw.up = gu_ + FF;
  sw.n_rows = T;
  sw.n_ff = FF;
  sw.in_stride = 2 * FF;
  sw.out = xn_;
  if (!ok(launch_swiglu(sw, stream_), "swiglu", f)) return false;
  return gemm(xn_, L.w_down, x_, false, T, H, FF, 1.f, "down (+residual)", f);
}

bool CudaSliceExecutor::forward(const KvasirCudaBatch& b, Fault& f) {
  bool received = false;
  bool good = forward_impl(b, received, f);
  if (received) {
    // The input slot's credit goes back once the copy out of it completed,
    // also when the pass failed later (else its exporter would stall).
    Fault sync;
    if (!ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", sync) && good) {
      f = sync;
      good = false;
    }
    std::string why = bounds_.release(b.slot, b.batch_id);
    if (!why.empty() && good) good = fail(f, KVASIR_CUDA_IPC, why);
  } else if (!good) {
    // A pass that failed after queuing work may still be reading the pinned
    // staging arrays the next batch overwrites: let it finish first.
    cudaStreamSynchronize(stream_);
  }
  return good;
}

bool CudaSliceExecutor::forward_impl(const KvasirCudaBatch& b, bool& received, Fault& f) {
  const ModelConfig& c = mc_;
  const int64_t H = c.hidden, T = b.n_tokens, R = cfg_.max_rows, MT = cfg_.max_table;
  if (n_blocks_ < 1) return fail(f, KVASIR_CUDA_BAD_ARGS, "forward before allocate_kv");
  if (b.n_rows < 0 || b.n_rows > R || (b.n_rows > 0 && !b.rows))
    return fail(f, KVASIR_CUDA_BATCH, fmt::format("batch: {} rows (plan: {})", b.n_rows, R));
  if (T < 0 || T > cfg_.max_tokens)
    return fail(
        f, KVASIR_CUDA_BATCH,
        fmt::format("batch: {} tokens exceed the plan's max_tokens {}", T, cfg_.max_tokens));
  // Host arrays: q_start[R+1] | pos0[R] | tables[R][MT] | pos[T] | tokens[T] | gather[R]
  int32_t* q_start = h_ints_;
  int32_t* pos0 = q_start + (R + 1);
  int32_t* tables = pos0 + R;
  int32_t* pos = tables + R * MT;
  int32_t* tokens = pos + cfg_.max_tokens;
  int32_t* gather = tokens + cfg_.max_tokens;
  int32_t* d_q_start = d_ints_;
  int32_t* d_pos0 = d_q_start + (R + 1);
  int32_t* d_tables = d_pos0 + R;
  d_pos_ = d_tables + R * MT;
  int32_t* d_tokens = d_pos_ + cfg_.max_tokens;
  int32_t* d_gather = d_tokens + cfg_.max_tokens;

  // Every bound is checked here, on the host, before any kernel runs.
  int64_t t = 0, max_ctx = 0;
  q_start[0] = 0;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    const KvasirCudaRow& row = b.rows[r];
    if (row.n_tokens < 1 || row.pos0 < 0 || row.n_table < 0 || row.n_table > MT ||
        (row.n_table > 0 && !row.block_table))
      return fail(f, KVASIR_CUDA_BATCH, fmt::format("batch row {}: malformed", r));
    const int64_t end = int64_t(row.pos0) + row.n_tokens;
    if (end > int64_t(row.n_table) * cfg_.block_size || t + row.n_tokens > T)
      return fail(f, KVASIR_CUDA_BATCH,
                  fmt::format("batch row {}: positions up to {} do not fit its {} blocks", r,
                              end - 1, row.n_table));
    for (int32_t i = 0; i < row.n_table; ++i) {
      if (row.block_table[i] < 0 || row.block_table[i] >= n_blocks_)
        return fail(f, KVASIR_CUDA_BATCH,
                    fmt::format("batch row {}: block id {} outside 0..{}", r, row.block_table[i],
                                n_blocks_ - 1));
      tables[r * MT + i] = row.block_table[i];
    }
    for (int64_t i = row.n_table; i < MT; ++i) tables[r * MT + i] = 0;
    for (int32_t i = 0; i < row.n_tokens; ++i) pos[t + i] = row.pos0 + i;
    pos0[r] = row.pos0;
    t += row.n_tokens;
    q_start[r + 1] = int32_t(t);
    max_ctx = std::max(max_ctx, end);
  }
  if (t != T)
    return fail(f, KVASIR_CUDA_BATCH,
                fmt::format("batch: rows hold {} tokens but n_tokens is {}", t, T));
  if (T == 0) return true;
  if (cfg_.head) {
    if (!b.tokens) return fail(f, KVASIR_CUDA_BATCH, "batch: the head needs token ids");
    for (int64_t i = 0; i < T; ++i) {
      if (b.tokens[i] < 0 || b.tokens[i] >= c.vocab)
        return fail(
            f, KVASIR_CUDA_BATCH,
            fmt::format("token id {} outside the vocabulary 0..{}", b.tokens[i], c.vocab - 1));
      tokens[i] = b.tokens[i];
    }
  }
  GpuKvLayer probe_kv = layers_.empty() ? GpuKvLayer{} : layers_[0].kv;
  std::string why = check_attn_batch_host(probe_kv, q_start, pos0, tables, b.n_rows, int32_t(T),
                                          int32_t(MT), int32_t(max_ctx));
  if (!why.empty()) return fail(f, KVASIR_CUDA_BATCH, "batch: " + why);

  auto up = [&](int32_t* d, const int32_t* h, int64_t n) {
    return ok(cudaMemcpyAsync(d, h, size_t(n) * 4, cudaMemcpyHostToDevice, stream_), "batch upload",
              f);
  };
  if (!up(d_q_start, q_start, b.n_rows + 1) || !up(d_pos0, pos0, b.n_rows) ||
      !up(d_tables, tables, int64_t(b.n_rows) * MT) || !up(d_pos_, pos, T) ||
      (cfg_.head && !up(d_tokens, tokens, T)) ||
      !ok(cudaMemsetAsync(d_err_, 0, 4, stream_), "error flag", f))
    return false;

  GpuAttnBatch ab;
  ab.q_start = d_q_start;
  ab.pos0 = d_pos0;
  ab.block_tables = d_tables;
  ab.n_seqs = b.n_rows;
  ab.n_tokens = int32_t(T);
  ab.max_blocks = int32_t(MT);
  ab.max_context = int32_t(max_ctx);

  // Input: embed (head), the previous GPU stage's slot, or the host boundary.
  const uint64_t bytes = uint64_t(T) * uint64_t(H) * 4;
  if (cfg_.head) {
    EmbeddingArgs e;
    e.table = embed_;
    e.tokens = d_tokens;
    e.n_tokens = int32_t(T);
    e.vocab = c.vocab;
    e.dim = int32_t(H);
    e.out = x_;
    e.error = d_err_;
    if (!ok(launch_embedding(e, stream_), "embedding", f)) return false;
  } else if (bounds_.imports()) {
    why = bounds_.receive(stream_, b.slot, b.batch_id, x_, bytes);
    if (!why.empty()) return fail(f, KVASIR_CUDA_IPC, why);
    received = true;
  } else {
    if (!b.hidden_in) return fail(f, KVASIR_CUDA_BATCH, "batch: no input boundary");
    if (!ok(cudaMemcpyAsync(x_, b.hidden_in, bytes, cudaMemcpyHostToDevice, stream_),
            "boundary upload", f))
      return false;
  }

  for (const Layer& L : layers_)
    if (!run_layer(L, ab, T, f)) return false;

  if (cfg_.tail) {
    if (!tail(b, T, gather, d_gather, f)) return false;
  } else if (bounds_.exports()) {
    why = bounds_.send(stream_, b.slot, b.batch_id, x_, bytes);
    if (!why.empty()) return fail(f, KVASIR_CUDA_IPC, why);
  } else {
    if (!b.hidden_out) return fail(f, KVASIR_CUDA_BATCH, "batch: no output boundary");
    if (!ok(cudaMemcpyAsync(b.hidden_out, x_, bytes, cudaMemcpyDeviceToHost, stream_),
            "boundary download", f))
      return false;
  }
  // The one synchronisation: where the batch is handed on.
  if (!ok(cudaMemcpyAsync(h_err_, d_err_, 4, cudaMemcpyDeviceToHost, stream_), "error flag", f) ||
      !ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", f))
    return false;
  if (*h_err_ != kErrorNone)
    return fail(f, KVASIR_CUDA_BATCH,
                fmt::format("batch: a kernel found a malformed index (code {})", *h_err_));
  return !cfg_.tail || finish_sampling(b, f);
}

bool CudaSliceExecutor::finish_sampling(const KvasirCudaBatch& b, Fault& f) {
  if (!dev_sampled_) return true;
  int32_t k = 0;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    if (!b.rows[r].want_logits) continue;
    const int32_t sel = k++;
    if (!b.sample[r].on_device) continue;
    if (h_flags_[sel] & kSampleAllMasked)
      return fail(f, KVASIR_CUDA_BATCH,
                  fmt::format("row {}: every logit is NaN or -inf", r));  // as on the host
    if (h_flags_[sel] & kSampleBadParams)
      return fail(f, KVASIR_CUDA_BATCH, fmt::format("row {}: sampling controls out of range", r));
    b.token_out[r] = h_tok_[sel];
    b.logprob_out[r] = h_lp_[sel];
  }
  return true;
}

bool CudaSliceExecutor::tail(const KvasirCudaBatch& b, int64_t T, const int32_t* h_gather,
                             int32_t* d_gather, Fault& f) {
  const ModelConfig& c = mc_;
  const int64_t H = c.hidden, R = cfg_.max_rows, V = c.vocab;
  dev_sampled_ = false;
  if (!b.logits) return fail(f, KVASIR_CUDA_BATCH, "batch: the tail needs a logits buffer");
  RmsNormArgs n;
  n.weight = out_norm_;
  n.dim = int32_t(H);
  n.eps = c.rms_eps;
  n.out = xn_;
  if (b.all_logits) {  // every token, max_rows at a time through the logits buffer
    for (int64_t s = 0; s < T; s += R) {
      const int64_t m = std::min(R, T - s);
      n.x = x_ + s * H;
      n.n_rows = m;
      if (!ok(launch_rmsnorm(n, stream_), "final rmsnorm", f) ||
          !gemm(xn_, output_, logits_, false, m, V, H, 0.f, "output", f) ||
          !ok(cudaMemcpyAsync(b.logits + s * V, logits_, size_t(m * V) * 4, cudaMemcpyDeviceToHost,
                              stream_),
              "logits download", f))
        return false;
    }
    return true;
  }
  // The last token of each sampled row.
  int32_t* g = const_cast<int32_t*>(h_gather);
  int32_t n_sel = 0, n_dev = 0;
  int64_t t = 0;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    t += b.rows[r].n_tokens;
    if (!b.rows[r].want_logits) continue;
    if (b.sample && b.sample[r].on_device) {
      // Checked on the host too: the kernel would sample a bad row greedily.
      const KvasirCudaSample& sp = b.sample[r];
      if (!(std::isfinite(sp.temperature) && sp.temperature >= 0.f) ||
          !(sp.top_p > 0.f && sp.top_p <= 1.f) || !(sp.min_p >= 0.f && sp.min_p <= 1.f) ||
          sp.top_k < 0)
        return fail(f, KVASIR_CUDA_BATCH, fmt::format("row {}: sampling controls out of range", r));
      GpuSamplingRow& row = h_samp_[n_sel];
      row.temperature = sp.temperature;
      row.top_p = sp.top_p;
      row.min_p = sp.min_p;
      row.top_k = sp.top_k;
      row.seed = sp.seed;
      row.position = sp.position;
      ++n_dev;
    } else {
      h_samp_[n_sel] = GpuSamplingRow{};  // sampled (greedy) but unused: the host samples it
    }
    sel_row_[size_t(n_sel)] = r;
    g[n_sel++] = int32_t(t - 1);
  }
  dev_sampled_ = n_dev > 0;
  if (n_sel == 0) return true;
  if (dev_sampled_ && (!b.token_out || !b.logprob_out))
    return fail(f, KVASIR_CUDA_BATCH, "batch: device sampling without token/logprob outputs");
  GatherRowsArgs ga;
  ga.x = x_;
  ga.rows = d_gather;
  ga.n_in = int32_t(T);
  ga.n_out = n_sel;
  ga.dim = int32_t(H);
  ga.out = last_;
  ga.error = d_err_;
  n.x = last_;
  n.n_rows = n_sel;
  if (!ok(cudaMemcpyAsync(d_gather, g, size_t(n_sel) * 4, cudaMemcpyHostToDevice, stream_),
          "gather upload", f) ||
      !ok(launch_gather_rows(ga, stream_), "gather_rows", f) ||
      !ok(launch_rmsnorm(n, stream_), "final rmsnorm", f) ||
      !gemm(xn_, output_, logits_, false, n_sel, V, H, 0.f, "output", f))
    return false;
  if (!dev_sampled_)  // every row on the host: the logits, packed, as they are
    return ok(cudaMemcpyAsync(b.logits, logits_, size_t(n_sel) * size_t(V) * 4,
                              cudaMemcpyDeviceToHost, stream_),
              "logits download", f);
  // Sample every gathered row (host rows' results are not used), take the
  // chosen tokens' raw logprobs, and copy only the host rows' logits.
  SampleArgs sa;
  sa.logits = logits_;
  sa.rows = d_samp_;
  sa.n_rows = n_sel;
  sa.vocab = int32_t(V);
  sa.tokens = d_tok_;
  sa.flags = d_flags_;
  TokenLogprobArgs la;
  la.logits = logits_;
  la.tokens = d_tok_;
  la.n_rows = n_sel;
  la.vocab = int32_t(V);
  la.logprobs = d_lp_;
  if (!ok(cudaMemcpyAsync(d_samp_, h_samp_, size_t(n_sel) * sizeof(GpuSamplingRow),
                          cudaMemcpyHostToDevice, stream_),
          "sampling upload", f) ||
      !ok(launch_sample(sa, stream_), "sample", f) ||
      !ok(launch_token_logprob(la, stream_), "token logprob", f) ||
      !ok(cudaMemcpyAsync(h_tok_, d_tok_, size_t(n_sel) * 4, cudaMemcpyDeviceToHost, stream_),
          "sampled ids", f) ||
      !ok(cudaMemcpyAsync(h_flags_, d_flags_, size_t(n_sel) * 4, cudaMemcpyDeviceToHost, stream_),
          "sampling flags", f) ||
      !ok(cudaMemcpyAsync(h_lp_, d_lp_, size_t(n_sel) * 4, cudaMemcpyDeviceToHost, stream_),
          "sampled logprobs", f))
    return false;
  for (int32_t k = 0; k < n_sel; ++k) {
    const int32_t r = sel_row_[size_t(k)];
    if (b.sample[r].on_device) continue;
    if (!ok(cudaMemcpyAsync(b.logits + int64_t(k) * V, logits_ + int64_t(k) * V, size_t(V) * 4,
                            cudaMemcpyDeviceToHost, stream_),
            "logits download", f))
      return false;
  }
  return true;
}

}  // namespace kvasir::cuda
