// stages/cuda/executor_tail.cpp — the CUDA executor's last-stage work: the
// final norm, the output head on the rows that sample (or every row's
// logits), grammar masks, sampling and the tokens' log-probabilities
// (docs/cuda.md). The forward through the layers is executor.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/cuda/gather_rows.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/token_logprob.h"
#include "kernels/cuda/token_mask.h"
#include "stages/cuda/executor.h"
#include "stages/cuda/executor_util.h"

namespace kvasir::cuda {

using detail::batch_error;
using detail::cuda_status;

Status CudaSliceExecutor::finish_sampling(const KvasirCudaBatch& b) {
  if (!dev_sampled_) return Status();
  int32_t k = 0;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    if (!b.rows[r].want_logits) continue;
    const int32_t sel = k++;
    if (!b.sample[r].on_device) continue;
    if (h_flags_[sel] & kSampleAllMasked)
      return batch_error(fmt::format("row {}: every logit is NaN or -inf", r));  // as on the host
    if (h_flags_[sel] & kSampleBadParams)
      return batch_error(fmt::format("row {}: sampling controls out of range", r));
    b.token_out[r] = h_tok_[sel];
    b.logprob_out[r] = h_lp_[sel];
  }
  return Status();
}

// --- The tail -------------------------------------------------------------

Status CudaSliceExecutor::tail(const KvasirCudaBatch& b, int64_t T, int32_t* h_gather,
                               int32_t* d_gather) {
  dev_sampled_ = false;
  if (!b.logits) return batch_error("batch: the tail needs a logits buffer");
  if (b.all_logits) return tail_all_logits(b, T);
  int32_t n_sel = 0;
  KV_RETURN_IF_ERROR(select_rows(b, h_gather, n_sel));
  if (n_sel == 0) return Status();
  if (dev_sampled_ && (!b.token_out || !b.logprob_out))
    return batch_error("batch: device sampling without token/logprob outputs");
  KV_RETURN_IF_ERROR(project_rows(T, n_sel, h_gather, d_gather));
  if (!dev_sampled_)  // every row on the host: the logits, packed, as they are
    return cuda_status(cudaMemcpyAsync(b.logits, logits_, size_t(n_sel) * size_t(mc_.vocab) * 4,
                                       cudaMemcpyDeviceToHost, stream_),
                       "logits download");
  return sample_rows(b, n_sel);
}

// The final norm's arguments but for the rows (x, n_rows).
RmsNormArgs CudaSliceExecutor::final_norm() const {
  RmsNormArgs n;
  n.weight = out_norm_;
  n.dim = int32_t(mc_.hidden);
  n.eps = mc_.rms_eps;
  n.out = xn_;
  return n;
}

// Every token's logits, max_rows at a time through the logits buffer.
Status CudaSliceExecutor::tail_all_logits(const KvasirCudaBatch& b, int64_t T) {
  const int64_t H = mc_.hidden, R = cfg_.max_rows, V = mc_.vocab;
  RmsNormArgs n = final_norm();
  for (int64_t s = 0; s < T; s += R) {
    const int64_t m = std::min(R, T - s);
    n.x = x_ + s * H;
    n.n_rows = m;
    KV_RETURN_IF_ERROR(cuda_status(launch_rmsnorm(n, stream_), "final rmsnorm"));
    KV_RETURN_IF_ERROR(
        gemm(xn_, Weight{output_, nullptr, false}, logits_, false, m, V, H, 0.f, "output"));
    KV_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(b.logits + s * V, logits_, size_t(m * V) * 4,
                                                   cudaMemcpyDeviceToHost, stream_),
                                   "logits download"));
  }
  return Status();
}

// The last token of each sampled row into h_gather, and each one's device
// sampling controls into h_samp_ (rows the host samples get neutral ones).
Status CudaSliceExecutor::select_rows(const KvasirCudaBatch& b, int32_t* h_gather, int32_t& n_sel) {
  int32_t n_dev = 0;
  int64_t t = 0;
  n_sel = 0;
  masked_ = false;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    t += b.rows[r].n_tokens;
    if (!b.rows[r].want_logits) continue;
    if (b.sample && b.sample[r].on_device) {
      // Checked on the host too: the kernel would sample a bad row greedily.
      const KvasirCudaSample& sp = b.sample[r];
      if (!(std::isfinite(sp.temperature) && sp.temperature >= 0.f) ||
          !(sp.top_p > 0.f && sp.top_p <= 1.f) || !(sp.min_p >= 0.f && sp.min_p <= 1.f) ||
          sp.top_k < 0)
        return batch_error(fmt::format("row {}: sampling controls out of range", r));
      GpuSamplingRow& row = h_samp_[n_sel];
      row.temperature = sp.temperature;
      row.top_p = sp.top_p;
      row.min_p = sp.min_p;
      row.top_k = sp.top_k;
      row.seed = sp.seed;
      row.position = sp.position;
      KV_RETURN_IF_ERROR(stage_mask(b, r, n_sel));
      ++n_dev;
    } else {
      h_samp_[n_sel] = GpuSamplingRow{};  // sampled (greedy) but unused: the host samples it
      std::fill_n(h_mask_ + int64_t(n_sel) * mask_words_, mask_words_, ~uint32_t(0));
    }
    sel_row_[size_t(n_sel)] = r;
    h_gather[n_sel++] = int32_t(t - 1);
  }
  dev_sampled_ = n_dev > 0;
  return Status();
}

// Gathers the selected rows, final norm, output GEMM into logits_.
Status CudaSliceExecutor::project_rows(int64_t T, int32_t n_sel, const int32_t* h_gather,
                                       int32_t* d_gather) {
  const int64_t H = mc_.hidden, V = mc_.vocab;
  GatherRowsArgs ga;
  ga.x = x_;
  ga.rows = d_gather;
  ga.n_in = int32_t(T);
  ga.n_out = n_sel;
  ga.dim = int32_t(H);
  ga.out = last_;
  ga.error = d_err_;
  RmsNormArgs n = final_norm();
  n.x = last_;
  n.n_rows = n_sel;
  KV_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(d_gather, h_gather, size_t(n_sel) * 4, cudaMemcpyHostToDevice, stream_),
      "gather upload"));
  KV_RETURN_IF_ERROR(cuda_status(launch_gather_rows(ga, stream_), "gather_rows"));
  KV_RETURN_IF_ERROR(cuda_status(launch_rmsnorm(n, stream_), "final rmsnorm"));
  return gemm(xn_, Weight{output_, nullptr, false}, logits_, false, n_sel, V, H, 0.f, "output");
}

// Samples every gathered row (host rows' results are not used), takes the
// chosen tokens' raw logprobs, and copies only the host rows' logits.
Status CudaSliceExecutor::sample_rows(const KvasirCudaBatch& b, int32_t n_sel) {
  const int64_t V = mc_.vocab;
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
  auto down = [&](void* dst, const void* src, const char* what) {
    return cuda_status(
        cudaMemcpyAsync(dst, src, size_t(n_sel) * 4, cudaMemcpyDeviceToHost, stream_), what);
  };
  KV_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(d_samp_, h_samp_, size_t(n_sel) * sizeof(GpuSamplingRow),
                                  cudaMemcpyHostToDevice, stream_),
                  "sampling upload"));
  KV_RETURN_IF_ERROR(apply_masks(n_sel));
  KV_RETURN_IF_ERROR(cuda_status(launch_sample(sa, stream_), "sample"));
  KV_RETURN_IF_ERROR(cuda_status(launch_token_logprob(la, stream_), "token logprob"));
  KV_RETURN_IF_ERROR(down(h_tok_, d_tok_, "sampled ids"));
  KV_RETURN_IF_ERROR(down(h_flags_, d_flags_, "sampling flags"));
  KV_RETURN_IF_ERROR(down(h_lp_, d_lp_, "sampled logprobs"));
  for (int32_t k = 0; k < n_sel; ++k) {
    const int32_t r = sel_row_[size_t(k)];
    if (b.sample[r].on_device) continue;
    KV_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(b.logits + int64_t(k) * V, logits_ + int64_t(k) * V,
                                    size_t(V) * 4, cudaMemcpyDeviceToHost, stream_),
                    "logits download"));
  }
  return Status();
}

// Packed row `sel` (batch row r, sampled on the device): its token mask, or
// all ones, into the pinned staging.
Status CudaSliceExecutor::stage_mask(const KvasirCudaBatch& b, int32_t r, int32_t sel) {
  uint32_t* dst = h_mask_ + int64_t(sel) * mask_words_;
  const uint32_t* m = b.sample[r].mask;
  if (!m) {
    std::fill_n(dst, mask_words_, ~uint32_t(0));
    return Status();
  }
  if (b.mask_words < mask_words_)
    return batch_error(
        fmt::format("row {}: a token mask of {} words for {} tokens", r, b.mask_words, mc_.vocab));
  std::copy_n(m, mask_words_, dst);
  masked_ = true;
  return Status();
}

// Structured outputs: the masked rows' refused logits to -inf before the
// sampler and the logprobs see them (the host sampler's order too).
Status CudaSliceExecutor::apply_masks(int32_t n_sel) {
  if (!masked_) return Status();
  const size_t bytes = size_t(n_sel) * size_t(mask_words_) * 4;
  KV_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(d_mask_, h_mask_, bytes, cudaMemcpyHostToDevice, stream_), "mask upload"));
  TokenMaskArgs ma;
  ma.logits = logits_;
  ma.masks = d_mask_;
  ma.n_rows = n_sel;
  ma.vocab = int32_t(mc_.vocab);
  ma.words = mask_words_;
  return cuda_status(launch_apply_token_mask(ma, stream_), "token mask");
}

}  // namespace kvasir::cuda
