// stages/cuda/executor_weights.cpp — CudaSliceExecutor's weight upload: the
// slice's tensors to bf16 or FP8 E4M3 on the device (executor.h says which).
//
// A layer's matrices are stacked as its GEMMs read them (q/k/v, gate/up);
// a stacked matrix is FP8 when the device has FP8 tensor cores (8.9+), its
// sizes are multiples of 16, and either every part is FP8 in the file or
// the stage quantises (weight_quant = FP8). An FP8 part goes up as its
// codes and per-row scales (model_file.h fp8_row_scales); another part of
// an FP8 matrix is uploaded as bf16 and quantised on the device, row by row
// (kernels/cuda/fp8_quant.h). FP8 tensors of a bf16 matrix are widened on
// the host (base/fp8.h decode times the row's scale, rounded to bf16).
// A Mixtral-style MoE layer: its router as a bf16 matrix and each expert
// stack (gate, up, down) as one contiguous bf16 [n_experts][rows][cols]
// buffer, never FP8.
#include <cuda_bf16.h>

#include <algorithm>

#include "base/check.h"
#include "base/fp8.h"
#include "base/log.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/dequant.h"
#include "kernels/cuda/fp8_quant.h"
#include "stages/cuda/executor.h"
#include "stages/cuda/executor_util.h"
#include "stages/slice.h"

namespace kvasir::cuda {
namespace {

using detail::cuda_status;
using detail::model_error;

bool device_dequant_type(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
         t == DType::Q4_0 || t == DType::Q4_1;
}

// An FP8 weight's per-row scales, or the model-format error naming it.
Status row_scales(const ModelFile& m, const std::string& name, std::vector<float>* out) {
  try {
    *out = fp8_row_scales(m, name);
  } catch (const Error& e) {
    return model_error(e.message());
  }
  return Status();
}

// Rows are widened into a ~8 MiB bf16 staging block, copied up a block at a
// time (one cudaMemcpy per row would cost millions of calls on an 8B model).
int64_t rows_per_block(int64_t cols) {
  return std::max<int64_t>(1, (int64_t(8) << 20) / (2 * cols));
}

}  // namespace

// The slice's weights: embeddings (head), final norm and output head (tail),
// and every layer's.
Status CudaSliceExecutor::upload_weights() {
  const ModelConfig& c = mc_;
  const int64_t H = c.hidden;
  Staging st;
  if (cfg_.head) KV_RETURN_IF_ERROR(upload_weight(st, kTokenEmbdTensor, c.vocab, H, &embed_));
  if (cfg_.tail) {
    KV_RETURN_IF_ERROR(upload_norm(st, kOutputNormTensor, &out_norm_));
    KV_RETURN_IF_ERROR(upload_weight(st, output_tensor_name(c), c.vocab, H, &output_));
  }
  layers_.resize(size_t(cfg_.last_layer - cfg_.first_layer + 1));
  for (int il = cfg_.first_layer; il <= cfg_.last_layer; ++il)
    KV_RETURN_IF_ERROR(upload_layer(st, il, layers_[size_t(il - cfg_.first_layer)]));
  // Host copies above ran on the legacy stream, which the stage's
  // non-blocking stream does not wait for.
  KV_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "weight upload"));
  KV_LOG_INFO("stage", "cuda:{}: {} layer matrices FP8 E4M3, {} bf16", cfg_.device, n_fp8_,
              n_bf16_);
  return Status();
}

Status CudaSliceExecutor::upload_layer(Staging& st, int il, Layer& L) {
  const ModelConfig& c = mc_;
  const int64_t H = c.hidden, QD = int64_t(c.n_heads) * c.head_dim,
                KD = int64_t(c.n_kv_heads) * c.head_dim, FF = c.ffn;
  const LayerTensorNames n = layer_tensor_names(il);
  KV_RETURN_IF_ERROR(upload_norm(st, n.attn_norm, &L.attn_norm));
  KV_RETURN_IF_ERROR(upload_norm(st, n.ffn_norm, &L.ffn_norm));
  // q, k, v rows in one matrix (one GEMM; RoPE + KV append reads its output).
  KV_RETURN_IF_ERROR(
      upload_matrix(st, {{n.attn_q, QD}, {n.attn_k, KD}, {n.attn_v, KD}}, H, true, &L.qkv));
  KV_RETURN_IF_ERROR(upload_matrix(st, {{n.attn_output, H}}, QD, true, &L.o));
  if (c.moe()) {
    // The router (bf16, f32 out) and each expert stack contiguous, bf16
    // [n_experts][rows][cols], as kernels/cuda/moe_ffn.h reads them.
    const int64_t EF = c.expert_ffn;
    KV_RETURN_IF_ERROR(upload_matrix(st, {{n.ffn_gate_inp, c.n_experts}}, H, false, &L.router));
    KV_RETURN_IF_ERROR(upload_experts(st, n.ffn_gate_exps, EF, H, &L.gate_exps));
    KV_RETURN_IF_ERROR(upload_experts(st, n.ffn_up_exps, EF, H, &L.up_exps));
    KV_RETURN_IF_ERROR(upload_experts(st, n.ffn_down_exps, H, EF, &L.down_exps));
  } else {
    // Gate and up rows in one matrix: one GEMM, SwiGLU reads both halves.
    KV_RETURN_IF_ERROR(upload_matrix(st, {{n.ffn_gate, FF}, {n.ffn_up, FF}}, H, true, &L.gu));
    KV_RETURN_IF_ERROR(upload_matrix(st, {{n.ffn_down, H}}, FF, true, &L.down));
  }
  L.kv.block_size = cfg_.block_size;
  L.kv.n_kv_heads = c.n_kv_heads;
  L.kv.head_dim = c.head_dim;
  return Status();
}

// An expert stack (ModelFile::find_experts: one view per expert) → one
// contiguous bf16 [n_experts][rows][cols] device buffer. FP8 experts are
// refused (open_model refuses FP8 MoE checkpoints already).
Status CudaSliceExecutor::upload_experts(Staging& st, const std::string& name, int64_t rows,
                                         int64_t cols, __nv_bfloat16** out) {
  const std::vector<TensorView>* views = model_->find_experts(name);
  if (!views) return model_error(fmt::format("expert tensor {} missing", name));
  const int64_t E = mc_.n_experts;
  if (int64_t(views->size()) != E)
    return error_status(ErrorCode::kModelFormat, "{}: {} experts, expected {}", name, views->size(),
                        E);
  __nv_bfloat16* dst = nullptr;
  KV_RETURN_IF_ERROR(dev_alloc(uint64_t(E) * uint64_t(rows) * uint64_t(cols) * 2, "experts", &dst));
  for (int64_t e = 0; e < E; ++e) {
    const TensorView& t = (*views)[size_t(e)];
    if (t.rows() != rows || t.cols() != cols)
      return error_status(ErrorCode::kModelFormat,
                          "{} expert {}: shape [{}, {}], expected [{}, {}]", name, e, t.rows(),
                          t.cols(), rows, cols);
    if (t.type == DType::F8_E4M3)
      return model_error(fmt::format(
          "{} expert {}: FP8 experts are not supported on the CUDA backend (run on cpu)", name, e));
    const std::string what = fmt::format("{} expert {}", name, e);
    KV_RETURN_IF_ERROR(upload_bf16(st, t, dst + e * rows * cols, what.c_str()));
  }
  *out = dst;
  return Status();
}

// Whether the stacked matrix of `parts` is kept as FP8 (see the top).
bool CudaSliceExecutor::matrix_fp8(const std::vector<Part>& parts, int64_t cols,
                                   bool quantizable) const {
  int64_t rows = 0;
  bool all_fp8 = true;
  for (const Part& p : parts) {
    rows += p.rows;
    const TensorView* t = model_->find(p.name);
    all_fp8 = all_fp8 && t && t->type == DType::F8_E4M3;
  }
  if (!fp8_ok_ || rows % 16 != 0 || cols % 16 != 0) return false;
  return all_fp8 || (quantizable && cfg_.weight_quant == KVASIR_CUDA_QUANT_FP8);
}

// Parts (each [rows, cols]) stacked into one device matrix, bf16 or FP8.
Status CudaSliceExecutor::upload_matrix(Staging& st, const std::vector<Part>& parts, int64_t cols,
                                        bool quantizable, Weight* out) {
  int64_t rows = 0;
  for (const Part& p : parts) {
    const TensorView* t = nullptr;
    KV_RETURN_IF_ERROR(find_tensor(p.name, &t));
    if (t->rows() != p.rows || t->cols() != cols)
      return error_status(ErrorCode::kModelFormat, "{}: shape [{}, {}], expected [{}, {}]", p.name,
                          t->rows(), t->cols(), p.rows, cols);
    rows += p.rows;
  }
  if (!matrix_fp8(parts, cols, quantizable)) {
    __nv_bfloat16* dst = nullptr;
    KV_RETURN_IF_ERROR(dev_alloc(uint64_t(rows * cols) * 2, "weights", &dst));
    int64_t r0 = 0;
    for (const Part& p : parts) {
      KV_RETURN_IF_ERROR(upload_weight(st, p.name, p.rows, cols, nullptr, dst + r0 * cols));
      r0 += p.rows;
    }
    *out = Weight{dst, nullptr, false};
    ++n_bf16_;
    return Status();
  }
  uint8_t* dst = nullptr;
  float* scale = nullptr;
  KV_RETURN_IF_ERROR(dev_alloc(uint64_t(rows * cols), "FP8 weights", &dst));
  KV_RETURN_IF_ERROR(dev_alloc(uint64_t(rows) * 4, "FP8 scales", &scale));
  int64_t r0 = 0;
  for (const Part& p : parts) {
    if (model_->find(p.name)->type == DType::F8_E4M3)
      KV_RETURN_IF_ERROR(upload_part_fp8(p, cols, dst + r0 * cols, scale + r0));
    else
      KV_RETURN_IF_ERROR(quantize_part(st, p, cols, dst + r0 * cols, scale + r0));
    r0 += p.rows;
  }
  *out = Weight{dst, scale, true};
  ++n_fp8_;
  return Status();
}

// An FP8 tensor as the file has it: its codes and one scale per row.
Status CudaSliceExecutor::upload_part_fp8(const Part& p, int64_t cols, uint8_t* dst, float* scale) {
  const TensorView* t = nullptr;
  KV_RETURN_IF_ERROR(find_tensor(p.name, &t));
  std::vector<float> sc;
  KV_RETURN_IF_ERROR(row_scales(*model_, p.name, &sc));
  KV_RETURN_IF_ERROR(cuda_status(
      cudaMemcpy(dst, t->data, size_t(p.rows * cols), cudaMemcpyHostToDevice), p.name.c_str()));
  return cuda_status(cudaMemcpy(scale, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice),
                     p.name.c_str());
}

// Any other tensor of an FP8 matrix: bf16 on the device first, then each
// row quantised with its own scale (amax / 448).
Status CudaSliceExecutor::quantize_part(Staging& st, const Part& p, int64_t cols, uint8_t* dst,
                                        float* scale) {
  void* tmp = nullptr;
  KV_RETURN_IF_ERROR(
      cuda_status(cudaMalloc(&tmp, size_t(p.rows * cols) * 2), "cudaMalloc(quantise)"));
  Status s = upload_weight(st, p.name, p.rows, cols, nullptr, static_cast<__nv_bfloat16*>(tmp));
  // The upload may have copied on the legacy stream: finish it first.
  if (s.ok()) s = cuda_status(cudaDeviceSynchronize(), p.name.c_str());
  QuantizeRowsFp8Args q;
  q.x = static_cast<const __nv_bfloat16*>(tmp);
  q.n_rows = p.rows;
  q.n_cols = cols;
  q.q = dst;
  q.scale = scale;
  if (s.ok()) s = cuda_status(launch_quantize_rows_fp8(q, stream_), p.name.c_str());
  if (s.ok()) s = cuda_status(cudaStreamSynchronize(stream_), p.name.c_str());
  cudaFree(tmp);
  return s;
}

Status CudaSliceExecutor::find_tensor(const std::string& name, const TensorView** out) const {
  *out = model_->find(name);
  if (!*out) return model_error(fmt::format("tensor {} missing", name));
  return Status();
}

// One matrix → bf16 [rows, cols] at dst (device; allocated when null), its
// shape checked. *out (if given) gets dst.
Status CudaSliceExecutor::upload_weight(Staging& st, const std::string& name, int64_t rows,
                                        int64_t cols, __nv_bfloat16** out, __nv_bfloat16* dst) {
  const TensorView* t = nullptr;
  KV_RETURN_IF_ERROR(find_tensor(name, &t));
  if (t->rows() != rows || t->cols() != cols)
    return error_status(ErrorCode::kModelFormat, "{}: shape [{}, {}], expected [{}, {}]", name,
                        t->rows(), t->cols(), rows, cols);
  if (!dst) KV_RETURN_IF_ERROR(dev_alloc(uint64_t(rows * cols) * 2, "weights", &dst));
  if (t->type == DType::F8_E4M3)
    KV_RETURN_IF_ERROR(upload_fp8_as_bf16(st, *t, name, dst));
  else
    KV_RETURN_IF_ERROR(upload_bf16(st, *t, dst, name.c_str()));
  if (out) *out = dst;
  return Status();
}

// A norm weight → f32 [hidden] on the device. F32 in GGUF; F16/BF16 in
// safetensors folders: widened on the host.
Status CudaSliceExecutor::upload_norm(Staging& st, const std::string& name, float** out) {
  const int64_t H = mc_.hidden;
  const TensorView* t = nullptr;
  KV_RETURN_IF_ERROR(find_tensor(name, &t));
  if (t->cols() != H || t->rows() != 1)
    return model_error(fmt::format("{} must have {} elements", name, H));
  st.f32.resize(size_t(H));
  try {
    cpu::dequantize_row(*t, 0, st.f32.data());
  } catch (const Error& e) {
    return model_error(fmt::format("{}: {}", name, e.message()));
  }
  float* d = nullptr;
  KV_RETURN_IF_ERROR(dev_alloc(uint64_t(H) * 4, "norm", &d));
  KV_RETURN_IF_ERROR(
      cuda_status(cudaMemcpy(d, st.f32.data(), size_t(H) * 4, cudaMemcpyHostToDevice), "norm"));
  *out = d;
  return Status();
}

// One tensor → bf16 [rows, cols] at dst (device). Raw GGUF bytes go up once
// and are expanded on the device; other types row by row on the host.
Status CudaSliceExecutor::upload_bf16(Staging& st, const TensorView& t, __nv_bfloat16* dst,
                                      const char* what) {
  if (device_dequant_type(t.type)) return upload_raw(t, dst, what);
  const int64_t rows = t.rows(), cols = t.cols(), per_block = rows_per_block(cols);
  st.f32.resize(size_t(cols));
  st.bf16.resize(size_t(std::min(rows, per_block) * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += per_block) {
    const int64_t n = std::min(per_block, rows - r0);
    for (int64_t r = 0; r < n; ++r) {
      try {
        cpu::dequantize_row(t, r0 + r, st.f32.data());
      } catch (const Error& e) {
        return model_error(fmt::format("{}: {}", what, e.message()));
      }
      __nv_bfloat16* out = st.bf16.data() + r * cols;
      for (int64_t i = 0; i < cols; ++i) out[i] = __float2bfloat16(st.f32[size_t(i)]);
    }
    KV_RETURN_IF_ERROR(cuda_status(
        cudaMemcpy(dst + r0 * cols, st.bf16.data(), size_t(n * cols) * 2, cudaMemcpyHostToDevice),
        what));
  }
  return Status();
}

// An FP8 tensor where the matrix is bf16 (no FP8 tensor cores, odd sizes,
// or the embeddings): scale[row] · value(code), rounded to bf16, on the host.
Status CudaSliceExecutor::upload_fp8_as_bf16(Staging& st, const TensorView& t,
                                             const std::string& name, __nv_bfloat16* dst) {
  std::vector<float> sc;
  KV_RETURN_IF_ERROR(row_scales(*model_, name, &sc));
  const int64_t rows = t.rows(), cols = t.cols(), per_block = rows_per_block(cols);
  const auto* codes = static_cast<const uint8_t*>(t.data);
  st.bf16.resize(size_t(std::min(rows, per_block) * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += per_block) {
    const int64_t n = std::min(per_block, rows - r0);
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* c = codes + (r0 + r) * cols;
      __nv_bfloat16* o = st.bf16.data() + r * cols;
      for (int64_t i = 0; i < cols; ++i)
        o[i] = __float2bfloat16(sc[size_t(r0 + r)] * fp8::e4m3_to_f32(c[i]));
    }
    KV_RETURN_IF_ERROR(cuda_status(
        cudaMemcpy(dst + r0 * cols, st.bf16.data(), size_t(n * cols) * 2, cudaMemcpyHostToDevice),
        name.c_str()));
  }
  return Status();
}

// A tensor of a type the device expands (launch_dequant): its raw bytes go
// up through a temporary buffer.
Status CudaSliceExecutor::upload_raw(const TensorView& t, __nv_bfloat16* dst, const char* what) {
  void* raw = nullptr;
  KV_RETURN_IF_ERROR(cuda_status(cudaMalloc(&raw, t.nbytes), "cudaMalloc(raw weights)"));
  // On stream_, not the legacy stream: stream_ is non-blocking, so the
  // dequant kernel would not be ordered after a plain cudaMemcpy.
  Status s =
      cuda_status(cudaMemcpyAsync(raw, t.data, t.nbytes, cudaMemcpyHostToDevice, stream_), what);
  DequantArgs a;
  a.src = raw;
  a.type = t.type;
  a.n_rows = t.rows();
  a.n_cols = t.cols();
  a.dst = dst;
  if (s.ok()) s = cuda_status(launch_dequant(a, stream_), what);
  if (s.ok()) s = cuda_status(cudaStreamSynchronize(stream_), what);
  cudaFree(raw);
  return s;
}

}  // namespace kvasir::cuda
