// bench/gpu/bench_gpu.cpp — decode speed of one GPU stage holding a whole
// model (head + tail), driven through the same CudaSliceExecutor the plugin
// runs (stages/cuda/executor.h). Prints one JSON line per measurement.
//
//   bandwidth   device-to-device cudaMemcpy of 1 GiB: (read + write) / time
//   roofline    batch-1 decode tok/s if every step read all weights once at
//               that bandwidth: bandwidth / weight bytes
//   decode      N concurrent sequences (N = 1, 32, 128): a prefill of P
//               tokens each, then S decode steps of N tokens; output tok/s =
//               N * S / wall time of the decode steps
//   host share  per decode step, 1 - (CUDA event time from the first to the
//               last operation of the step on the stage's stream) / (host
//               wall time of the step): the part of a step in which the GPU
//               had not started or had already finished (batch building,
//               uploads' host side, the synchronisation, the logits copy's
//               host side). Gaps between kernels inside the span are not
//               counted (that would need CUPTI).
//
// usage: bench_gpu MODEL_DIR [--device N] [--batches 1,32,128] [--prompt P] [--steps S]
//                  [--graphs 0|1] [--quant none|fp8]
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "stages/cuda/executor.h"

using namespace kvasir;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define CK(x)                                                       \
  do {                                                              \
    cudaError_t e_ = (x);                                           \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

double copy_bandwidth(int device) {
  CK(cudaSetDevice(device));
  const size_t n = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, n));
  CK(cudaMalloc(&b, n));
  CK(cudaMemset(a, 1, n));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));  // warm-up
  const int reps = 10;
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * double(n) * reps / (double(ms) / 1e3);  // bytes read + written per second
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--device N] [--batches 1,32,128] [--prompt P] "
                 "[--steps S] [--graphs 0|1] [--quant none|fp8]\n",
                 argv[0]);
    return 2;
  }
  std::string model = argv[1];
  int device = 0, prompt = 32, steps = 64, graphs = 1;
  std::string quant = "none";
  std::vector<int> batches = {1, 32, 128};
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--device")
      device = std::atoi(v.c_str());
    else if (k == "--prompt")
      prompt = std::atoi(v.c_str());
    else if (k == "--steps")
      steps = std::atoi(v.c_str());
    else if (k == "--graphs")
      graphs = std::atoi(v.c_str());
    else if (k == "--quant")
      quant = v;
    else if (k == "--batches") {
      batches.clear();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        batches.push_back(std::atoi(v.substr(p, q - p).c_str()));
        p = q == std::string::npos ? v.size() : q + 1;
      }
    }
  }
  int max_n = 1;
  for (int n : batches) max_n = std::max(max_n, n);
  const int block = 16;
  const int ctx = prompt + steps + 1;
  const int table = (ctx + block - 1) / block;

  const double bw = copy_bandwidth(device);

  KvasirCudaStageConfig cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.device = device;
  cfg.model_path = model.c_str();
  cfg.first_layer = 0;
  cfg.head = 1;
  cfg.tail = 1;
  cfg.block_size = block;
  cfg.max_rows = max_n;
  cfg.max_tokens = std::max(max_n, std::min(prompt * max_n, 8192));
  cfg.max_table = table;
  cfg.inflight = 1;
  cfg.gpu_memory_utilization = 0.9;
  // [cuda] graphs and quantize, as a GPU stage gets them from kvasird.
  cfg.cuda_graphs = graphs != 0;
  if (quant != "none" && quant != "fp8") {
    std::fprintf(stderr, "--quant: none or fp8 (got %s)\n", quant.c_str());
    return 2;
  }
  cfg.weight_quant = quant == "fp8" ? KVASIR_CUDA_QUANT_FP8 : KVASIR_CUDA_QUANT_NONE;
  {
    auto m = ModelFile::open(model);
    cfg.last_layer = m->config().n_layers - 1;
  }
  double t0 = now_s();
  std::unique_ptr<cuda::CudaSliceExecutor> ex;
  if (Status st = cuda::CudaSliceExecutor::open(cfg, &ex); !st.ok()) {
    std::fprintf(stderr, "open: %s\n", st.message().c_str());
    return 1;
  }
  const double load_s = now_s() - t0;
  const ModelConfig& mc = ex->config();
  const int32_t n_blocks = max_n * table;
  if (Status st = ex->allocate_kv(n_blocks); !st.ok()) {
    std::fprintf(stderr, "allocate_kv: %s\n", st.message().c_str());
    return 1;
  }
  // Weight bytes one decode step reads: every matrix of every layer (bf16,
  // or one byte each in FP8, its row scales negligible), plus the bf16
  // output head (the embedding gather reads one row).
  const double H = mc.hidden, QD = double(mc.n_heads) * mc.head_dim,
               KD = double(mc.n_kv_heads) * mc.head_dim, FF = mc.ffn;
  const double layer_elem_bytes = quant == "fp8" ? 1.0 : 2.0;
  const double weight_bytes =
      layer_elem_bytes * mc.n_layers * (H * QD * 2 + H * KD * 2 + 3 * H * FF) +
      2.0 * double(mc.vocab) * H;
  std::printf(
      "{\"what\":\"setup\",\"model\":\"%s\",\"load_s\":%.1f,\"copy_bandwidth_GBps\":%.1f,"
      "\"weight_GB\":%.3f,\"roofline_tok_s\":%.1f}\n",
      model.c_str(), load_s, bw / 1e9, weight_bytes / 1e9, bw / weight_bytes);

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> logits(size_t(max_n) * size_t(mc.vocab));
  std::vector<KvasirCudaSample> sample(static_cast<size_t>(max_n));
  std::vector<int32_t> sampled(static_cast<size_t>(max_n));
  std::vector<float> sampled_lp(static_cast<size_t>(max_n));
  uint64_t batch_id = 0;
  for (int n : batches) {
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < table; ++i) tables[size_t(r)].push_back(r * table + i);
    std::vector<KvasirCudaRow> rows(static_cast<size_t>(n));
    std::vector<int32_t> tokens;
    // Prefill, a few rows at a time within max_tokens.
    for (int r0 = 0; r0 < n;) {
      int rn = std::max(1, std::min(n - r0, cfg.max_tokens / prompt));
      tokens.clear();
      for (int r = 0; r < rn; ++r) {
        rows[size_t(r)] = KvasirCudaRow{0, prompt, tables[size_t(r0 + r)].data(), table, 1};
        for (int t = 0; t < prompt; ++t) tokens.push_back(((r0 + r) * 131 + t * 7) % mc.vocab);
      }
      KvasirCudaBatch b{};
      b.batch_id = ++batch_id;
      b.rows = rows.data();
      b.n_rows = rn;
      b.tokens = tokens.data();
      b.n_tokens = int64_t(tokens.size());
      b.logits = logits.data();
      if (Status st = ex->forward(b); !st.ok()) {
        std::fprintf(stderr, "prefill: %s\n", st.message().c_str());
        return 1;
      }
      r0 += rn;
    }
    // Decode: one token per row per step (greedy choice is not the point;
    // the next token is a function of the step). Even steps are timed as
    // they run (wall: what a user gets). Odd steps measure the GPU alone:
    // the stream is first held by a host callback that sleeps, so the whole
    // step is queued before the GPU starts it and e0 -> e1 has no gaps
    // waiting for the host. host_share = 1 - gpu step / wall step: the
    // share of a step the GPU sits idle waiting for the host.
    double wall = 0, span = 0;
    int n_wall = 0, n_span = 0;
    for (int s = 0; s < steps; ++s) {
      tokens.assign(size_t(n), 0);
      for (int r = 0; r < n; ++r) {
        rows[size_t(r)] = KvasirCudaRow{prompt + s, 1, tables[size_t(r)].data(), table, 1};
        tokens[size_t(r)] = (r * 31 + s * 17) % mc.vocab;
      }
      KvasirCudaBatch b{};
      b.batch_id = ++batch_id;
      b.rows = rows.data();
      b.n_rows = n;
      b.tokens = tokens.data();
      b.n_tokens = n;
      b.logits = logits.data();
      // Greedy on the device, as the daemon samples a plain request: only
      // ids leave the GPU.
      for (int r = 0; r < n; ++r)
        sample[size_t(r)] = KvasirCudaSample{1, 0.f, 1.f, 0.f, 0, 1, uint64_t(prompt + s + 1), nullptr};
      b.sample = sample.data();
      b.token_out = sampled.data();
      b.logprob_out = sampled_lp.data();
      const bool gpu_only = s % 2 == 1;
      if (gpu_only) {
        CK(cudaLaunchHostFunc(
            ex->stream(), [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); },
            nullptr));
      }
      CK(cudaEventRecord(e0, ex->stream()));
      double w0 = now_s();
      const Status st = ex->forward(b);
      CK(cudaEventRecord(e1, ex->stream()));
      CK(cudaEventSynchronize(e1));
      double w1 = now_s();
      if (!st.ok()) {
        std::fprintf(stderr, "decode: %s\n", st.message().c_str());
        return 1;
      }
      if (gpu_only) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        span += ms / 1e3;
        ++n_span;
      } else {
        wall += w1 - w0;
        ++n_wall;
      }
    }
    const double step_wall = n_wall ? wall / n_wall : 0, step_gpu = n_span ? span / n_span : 0;
    std::printf(
        "{\"what\":\"decode\",\"graphs\":%d,\"quant\":\"%s\",\"concurrent\":%d,"
        "\"prompt\":%d,\"steps\":%d,"
        "\"tok_s\":%.1f,\"step_ms\":%.3f,\"gpu_step_ms\":%.3f,\"host_share\":%.3f%s}\n",
        graphs != 0 ? 1 : 0, quant.c_str(), n, prompt, steps, step_wall > 0 ? double(n) / step_wall : 0.0, 1e3 * step_wall,
        1e3 * step_gpu, step_wall > 0 ? std::max(0.0, 1.0 - step_gpu / step_wall) : 0.0,
        n == 1 && step_wall > 0
            ? fmt::format(",\"of_roofline\":{:.3f}", (1.0 / step_wall) / (bw / weight_bytes))
                  .c_str()
            : "");
    std::fflush(stdout);
  }
  return 0;
}
