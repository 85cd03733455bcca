// End-to-end for GPU stages (docs/cuda.md): real stage processes under an
// in-process Supervisor, as tests/integration/test_ring_e2e.cpp does for CPU
// plans.
//
// Everywhere: a plan that asks for cuda:0 on a machine without a driver (or
// a build without the plugin) fails at start with the stage's message.
// With a GPU (label `cuda`, run by scripts/gpu-check; skipped otherwise):
// a mixed plan (cpu head, cuda:0 tail) and a 2-stage plan with both stages on
// cuda:0 (two processes on one device: the CUDA IPC boundary) against the
// CPU plan, greedy, on the tiny random model and the default model; and the
// whole model in one GPU stage under teacher forcing, top-1 agreement with
// the CPU >= 98% (bf16 weights and KV).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

#include "base/check.h"
#include "gpu_texts.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "ring_fixture.h"
#include "stages/cuda_plugin.h"
#include "stages/sampler.h"
#include "tests/support/tiny_model.h"

namespace kvasir::test {
namespace {

bool gpu_usable(std::string* why) {
  try {
    CudaPlugin::load(0);
    return true;
  } catch (const Error& e) {
    if (why) *why = e.message();
    return false;
  }
}

struct PlanRun {
  std::vector<std::vector<int32_t>> tokens;
  std::string error;
};

// Greedy generation of `prompts` through a ring whose stage devices are
// `devices` (set after the config is parsed: the plan rules refuse one GPU
// named twice, and a one-GPU machine needs exactly that to test CUDA IPC).
PlanRun run_plan(const std::string& model_path, int n_layers,
                 const std::vector<std::string>& devices,
                 const std::vector<std::vector<int32_t>>& prompts, int max_new,
                 const std::string& tag,
                 const std::function<void(size_t, SamplingParams&)>& sampling = {}) {
  PlanRun out;
  std::string dir = temp_dir("cudas-" + tag);
  Config cfg = load_config(
      write_config(dir, model_path, plan_toml(n_layers, int(devices.size()), 1, 0, 8, 128)));
  for (size_t i = 0; i < devices.size(); ++i) cfg.plan.stages[i].device = devices[i];
  // Stages sharing one GPU each size their KV from what is free when they
  // measure: a fifth each leaves room for three of them.
  cfg.kv.gpu_memory_utilization = 0.2;
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  opt.instance = dir + "/instance";
  Supervisor sup(cfg, mc, opt);
  try {
    sup.start();
  } catch (const Error& e) {
    out.error = e.message();
    std::filesystem::remove_all(dir);
    return out;
  }
  BridgeConfig bc = ring_bridge_config(cfg, mc, sup);
  out.tokens.resize(prompts.size());
  {
    Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
    Collector col;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenRequest g;
      g.prompt = prompts[i];
      g.max_tokens = max_new;
      g.ignore_eos = true;
      // greedy unless `sampling` says otherwise: the default (1.0, unseeded)
      // would draw differently in every run
      g.sampling.temperature = 0.f;
      if (sampling) sampling(i, g.sampling);
      EXPECT_NE(engine.submit(g, col.sink(int(i))), 0u);
    }
    EXPECT_TRUE(col.wait_all(prompts.size(), 90));
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(col.finish[int(i)], FinishReason::kLength) << col.errors[int(i)];
      out.tokens[i] = col.tokens[int(i)];
    }
    engine.shutdown();
  }
  sup.stop();
  std::filesystem::remove_all(dir);
  return out;
}

std::vector<std::vector<int32_t>> prompts_for(int vocab, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> v(static_cast<size_t>(n));
  for (auto& p : v) {
    int len = 1 + int(rng() % 24);
    for (int j = 0; j < len; ++j) p.push_back(int32_t(rng() % uint64_t(vocab)));
  }
  return v;
}

// Greedy on bf16 against f32/f16 CPU: a near-tie may flip one token and the
// continuation then differs. Equal greedy tokens is the goal; the assertion
// is on the share of requests whose first half is identical, and every
// mismatch is printed.
void compare_greedy(const PlanRun& got, const PlanRun& want, const std::string& what) {
  ASSERT_EQ(got.error, "") << what;
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  int equal = 0, prefix_ok = 0;
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    const auto& g = got.tokens[i];
    const auto& w = want.tokens[i];
    size_t k = 0;
    while (k < g.size() && k < w.size() && g[k] == w[k]) ++k;
    equal += g == w;
    prefix_ok += k >= w.size() / 2;
    if (g != w)
      std::printf("[%s] request %zu: first difference at token %zu of %zu\n", what.c_str(), i, k,
                  w.size());
  }
  std::printf("[%s] greedy: %d of %zu requests identical\n", what.c_str(), equal,
              got.tokens.size());
  // 3 of 4: with 8 prompts, 90% would demand all 8, and one near-tie flip in
  // ~100 greedy tokens is expected from bf16 (the teacher-forced test below
  // holds the strict bar, 98% top-1 agreement).
  EXPECT_GE(prefix_ok * 4, int(got.tokens.size()) * 3) << what;
}

TEST(CudaE2E, PlanAskingForCudaWithoutDriverNamesTheFault) {
  std::string why;
  if (gpu_usable(&why)) GTEST_SKIP() << "a usable GPU is present: this checks the other path";
  std::string dir = temp_dir("cudas-nodrv");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  write_tiny_gguf(model, spec);
  auto r = run_plan(model, spec.layers, {"cpu", "cuda:0"}, {{1, 2, 3}}, 2, "nodrv");
  EXPECT_NE(r.error.find("stage 1"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("plan asks for cuda:0 but"), std::string::npos) << r.error;
#ifdef KVASIR_CUDA_PLUGIN_BUILT
  EXPECT_NE(r.error.find("no usable NVIDIA driver"), std::string::npos) << r.error;
#else
  EXPECT_NE(r.error.find("no CUDA plugin"), std::string::npos) << r.error;
#endif
  std::filesystem::remove_all(dir);
}

TEST(CudaE2E, TinyModelMixedAndSharedGpuPlansMatchCpu) {
  std::string why;
  if (!gpu_usable(&why)) GTEST_SKIP() << "SKIPPED: no CUDA device (" << why << ")";
  std::string dir = temp_dir("cudas-tiny");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 4;
  write_tiny_gguf(model, spec);
  auto prompts = prompts_for(spec.vocab, 8, 5);
  auto want = run_plan(model, spec.layers, {"cpu", "cpu"}, prompts, 12, "tiny-cpu");
  ASSERT_EQ(want.error, "");
  compare_greedy(run_plan(model, spec.layers, {"cpu", "cuda:0"}, prompts, 12, "tiny-mixed"), want,
                 "tiny cpu+cuda:0");
  compare_greedy(run_plan(model, spec.layers, {"cuda:0", "cpu"}, prompts, 12, "tiny-mixed2"), want,
                 "tiny cuda:0+cpu");
  compare_greedy(run_plan(model, spec.layers, {"cuda:0", "cuda:0"}, prompts, 12, "tiny-gpu"), want,
                 "tiny cuda:0+cuda:0 (CUDA IPC)");
  compare_greedy(
      run_plan(model, spec.layers, {"cuda:0", "cuda:0", "cuda:0"}, prompts, 12, "tiny-gpu3"), want,
      "tiny 3 x cuda:0 (CUDA IPC twice)");
  std::filesystem::remove_all(dir);
}

std::vector<int32_t> encode_text(const std::string& model_path, const std::string& text) {
  auto gguf = GgufFile::open(model_path);
  auto tok = Tokenizer::from_gguf(*gguf);
  return tok->encode(text, true, false);
}

TEST(CudaE2E, DefaultModelMixedAndSharedGpuPlansMatchCpu) {
  std::string why;
  if (!gpu_usable(&why)) GTEST_SKIP() << "SKIPPED: no CUDA device (" << why << ")";
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no default model (scripts/fetch-model)";
  std::vector<std::vector<int32_t>> prompts;
  for (const char* t : kTexts) prompts.push_back(encode_text(model, t));
  auto want = run_plan(model, 30, {"cpu", "cpu"}, prompts, 16, "smol-cpu");
  ASSERT_EQ(want.error, "");
  compare_greedy(run_plan(model, 30, {"cpu", "cuda:0"}, prompts, 16, "smol-mixed"), want,
                 "default cpu+cuda:0");
  compare_greedy(run_plan(model, 30, {"cuda:0", "cuda:0"}, prompts, 16, "smol-gpu"), want,
                 "default cuda:0+cuda:0 (CUDA IPC)");
}

// Rows the GPU tail samples on the device (seeded temperature / top-p /
// top-k) beside rows it hands to the host sampler (repetition penalty, top-N
// logprobs), in the same batches, against the CPU plan with the same
// controls. A seeded draw may pick a neighbour where bf16 moved a boundary
// past it: the same bar as greedy.
TEST(CudaE2E, DefaultModelDeviceAndHostSampledRowsMatchCpu) {
  std::string why;
  if (!gpu_usable(&why)) GTEST_SKIP() << "SKIPPED: no CUDA device (" << why << ")";
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no default model (scripts/fetch-model)";
  std::vector<std::vector<int32_t>> prompts;
  for (const char* t : kTexts) prompts.push_back(encode_text(model, t));
  auto controls = [](size_t i, SamplingParams& sp) {
    sp.seed = 1000 + i;
    sp.has_seed = 1;
    if (i % 4 == 0) {  // device
      sp.temperature = 0.7f;
      sp.top_p = 0.9f;
    } else if (i % 4 == 1) {  // device
      sp.temperature = 0.8f;
      sp.top_k = 40;
    } else if (i % 4 == 2) {  // host: penalties need the sequence's history
      sp.temperature = 0.f;
      sp.repetition_penalty = 1.3f;
    } else {  // host: top-N logprobs
      sp.temperature = 0.f;
      sp.logprobs = 3;
    }
  };
  auto want = run_plan(model, 30, {"cpu", "cpu"}, prompts, 16, "smol-s-cpu", controls);
  ASSERT_EQ(want.error, "");
  // Rows 2, 3, 6, 7 (host-sampled: penalties, logprobs) are held to the
  // greedy bar; the seeded rows 0, 1, 4, 5 are reported only: bf16 moves the
  // CDF by ~1% and a draw near a boundary then picks the neighbour (on a GPU
  // the seeded rows have diverged within a few tokens while the host rows
  // matched the greedy runs: docs/cuda.md). The plumbing of device sampling
  // is checked exactly by ManyRowBatchesMatchCpuExecutor.
  auto host_rows = [](const PlanRun& r) {
    PlanRun h;
    h.error = r.error;
    for (size_t i = 0; i < r.tokens.size(); ++i)
      if (i % 4 >= 2) h.tokens.push_back(r.tokens[i]);
    return h;
  };
  for (const auto& [devices, tag] :
       {std::pair<std::vector<std::string>, std::string>{{"cpu", "cuda:0"}, "smol-s-mixed"},
        std::pair<std::vector<std::string>, std::string>{{"cuda:0", "cuda:0"}, "smol-s-gpu"}}) {
    PlanRun got = run_plan(model, 30, devices, prompts, 16, tag, controls);
    ASSERT_EQ(got.error, "") << tag;
    int same = 0;
    for (size_t i = 0; i < got.tokens.size(); ++i)
      if (i % 4 < 2) same += got.tokens[i] == want.tokens[i];
    std::printf("[%s] device-sampled rows identical to the CPU plan: %d of 4 (reported)\n",
                tag.c_str(), same);
    compare_greedy(host_rows(got), host_rows(want), tag + " host-sampled rows");
  }
}

// Two GPUs: each stage on its own device, the hidden state handed over CUDA
// IPC peer to peer (cuda:0 -> cuda:1, and back the other way), against the
// CPU plan. Written without a machine of two GPUs: never run yet
// (docs/cuda.md).
TEST(CudaE2E, TwoGpuPlansMatchCpu) {
  std::string why;
  if (!gpu_usable(&why)) GTEST_SKIP() << "SKIPPED: no CUDA device (" << why << ")";
  try {
    CudaPlugin::load(1);
  } catch (const Error& e) {
    GTEST_SKIP() << "SKIPPED: needs two GPUs (" << e.message() << ")";
  }
  std::string dir = temp_dir("cudas-2gpu");
  std::string tiny = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 4;
  write_tiny_gguf(tiny, spec);
  auto prompts = prompts_for(spec.vocab, 8, 11);
  auto want = run_plan(tiny, spec.layers, {"cpu", "cpu"}, prompts, 12, "2gpu-cpu");
  ASSERT_EQ(want.error, "");
  compare_greedy(run_plan(tiny, spec.layers, {"cuda:0", "cuda:1"}, prompts, 12, "2gpu-01"), want,
                 "tiny cuda:0+cuda:1 (peer to peer)");
  compare_greedy(run_plan(tiny, spec.layers, {"cuda:1", "cuda:0"}, prompts, 12, "2gpu-10"), want,
                 "tiny cuda:1+cuda:0 (peer to peer)");
  compare_greedy(run_plan(tiny, spec.layers, {"cpu", "cuda:0", "cuda:1"}, prompts, 12, "2gpu-c01"),
                 want, "tiny cpu+cuda:0+cuda:1");
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(model)) {
    std::vector<std::vector<int32_t>> text;
    for (const char* t : kTexts) text.push_back(encode_text(model, t));
    auto cpu = run_plan(model, 30, {"cpu", "cpu"}, text, 16, "2gpu-smol-cpu");
    ASSERT_EQ(cpu.error, "");
    compare_greedy(run_plan(model, 30, {"cuda:0", "cuda:1"}, text, 16, "2gpu-smol"), cpu,
                   "default cuda:0+cuda:1 (peer to peer)");
  }
  std::filesystem::remove_all(dir);
}

// Teacher forcing: one GPU stage over the whole model (head and tail) reads a
// fixed token sequence and returns the logits of every position; its argmax
// must agree with the CPU executor's at >= 98% of positions.
struct Agreement {
  int positions = 0, agree = 0, near_tie = 0;
  long long non_finite = 0;
};

Agreement teacher_forced_agreement(const std::string& model_path, const std::vector<int32_t>& seq) {
  auto plugin = CudaPlugin::load(0);
  const KvasirCudaPluginV1& api = plugin->api();
  auto model = ModelFile::open(model_path);
  const ModelConfig& mc = model->config();
  const int T = int(seq.size()), block = 16, table = (T + block - 1) / block;
  KvasirCudaStageConfig cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.device = 0;
  cfg.model_path = model_path.c_str();
  cfg.last_layer = mc.n_layers - 1;
  cfg.head = cfg.tail = 1;
  cfg.block_size = block;
  cfg.max_rows = 8;
  cfg.max_tokens = T;
  cfg.max_table = table;
  cfg.inflight = 1;
  cfg.gpu_memory_utilization = 0.5;
  char err[512] = {};
  KvasirCudaStage* st = nullptr;
  int64_t cap = 0;
  EXPECT_EQ(api.open(&cfg, &st, &cap, err, sizeof err), KVASIR_CUDA_OK) << err;
  if (!st) return {};
  EXPECT_GE(cap, table);
  EXPECT_EQ(api.allocate_kv(st, table, err, sizeof err), KVASIR_CUDA_OK) << err;
  std::vector<int32_t> tbl(static_cast<size_t>(table));
  for (int i = 0; i < table; ++i) tbl[size_t(i)] = i;
  std::vector<float> gpu(size_t(T) * mc.vocab), cpu(size_t(T) * mc.vocab);
  KvasirCudaRow row{0, T, tbl.data(), table, 1};
  KvasirCudaBatch b{};
  b.batch_id = 1;
  b.rows = &row;
  b.n_rows = 1;
  b.tokens = seq.data();
  b.n_tokens = T;
  b.all_logits = 1;
  b.logits = gpu.data();
  EXPECT_EQ(api.forward(st, &b, err, sizeof err), KVASIR_CUDA_OK) << err;
  api.close(st);

  SliceExecutor ex(*model, SliceSpec{0, mc.n_layers - 1, true, true},
                   KvSpec{table, block, DType::F16}, 2, T);
  ForwardRow fr{0, T, tbl.data(), table, true};
  ForwardBatch fb;
  fb.rows = &fr;
  fb.n_rows = 1;
  fb.tokens = seq.data();
  fb.n_tokens = T;
  fb.all_logits = true;
  ex.forward(fb, nullptr, nullptr, cpu.data());
  Agreement r;
  r.positions = T;
  for (int t = 0; t < T; ++t) {
    const float* g = gpu.data() + size_t(t) * mc.vocab;
    const float* c = cpu.data() + size_t(t) * mc.vocab;
    int bg = 0, bc = 0;
    for (int v = 0; v < mc.vocab; ++v) {
      // Counted, not asserted per logit: a NaN pass would print millions.
      if (!std::isfinite(g[v])) ++r.non_finite;
      if (g[v] > g[bg]) bg = v;
      if (c[v] > c[bc]) bc = v;
    }
    if (bg == bc)
      ++r.agree;
    else if (c[bc] - c[bg] <= 0.01f * std::max(1.f, std::fabs(c[bc])))
      ++r.near_tie;  // the CPU's own top two within 1%: bf16 may order them either way
  }
  return r;
}

void expect_agreement(const Agreement& r, const char* what) {
  std::printf(
      "teacher-forced top-1 agreement, %s, %d positions: %.4f exact, %.4f counting near-ties "
      "(%d), %lld non-finite logits\n",
      what, r.positions, double(r.agree) / r.positions, double(r.agree + r.near_tie) / r.positions,
      r.near_tie, r.non_finite);
  EXPECT_EQ(r.non_finite, 0) << what;
  EXPECT_GE(double(r.agree + r.near_tie) / r.positions, 0.98) << what;
  EXPECT_GE(double(r.agree) / r.positions, 0.95) << what;
}

TEST(CudaE2E, TeacherForcedTop1AgreementWithCpu) {
  std::string why;
  if (!gpu_usable(&why)) GTEST_SKIP() << "SKIPPED: no CUDA device (" << why << ")";
  std::string dir = temp_dir("cudas-tf");
  std::string tiny = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 3;
  write_tiny_gguf(tiny, spec);
  auto seq = prompts_for(spec.vocab, 1, 3)[0];
  while (seq.size() < 200) seq.push_back(int32_t((seq.size() * 37) % spec.vocab));
  expect_agreement(teacher_forced_agreement(tiny, seq), "tiny model");
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(model)) {
    const std::vector<int32_t> text = encode_text(model, kPassage);
    expect_agreement(teacher_forced_agreement(model, text), "default model, natural text");
    // Random ids, reported only (flat distributions: see kTexts).
    std::vector<int32_t> s2;
    for (int i = 0; i < 256; ++i) s2.push_back(int32_t((i * 7919 + 13) % 49152));
    const Agreement r = teacher_forced_agreement(model, s2);
    std::printf(
        "teacher-forced top-1 agreement, default model, random ids, %d positions: %.4f "
        "exact, %.4f counting near-ties, %lld non-finite (reported, not asserted)\n",
        r.positions, double(r.agree) / r.positions, double(r.agree + r.near_tie) / r.positions,
        r.non_finite);
    EXPECT_EQ(r.non_finite, 0);
  }
  std::filesystem::remove_all(dir);
}

// The stage executor in-process against the CPU executor, batch by batch:
// several rows of different lengths, scattered block ids, a prefill chunk
// continuing over earlier KV, decode steps; slices that are the head only
// (compare the hidden state handed on), the tail only (fed the CPU head's
// hidden state) and the whole model (logits of every sampled row). Prints
// the relative RMS error of each batch's output so a divergence names the
// batch and slice where it starts.
struct SliceRun {
  std::vector<std::vector<float>> outs;  // per batch: hidden_out or logits
};

struct BatchPlan {
  std::vector<ForwardRow> rows;
  std::vector<int32_t> tokens;
};

std::vector<BatchPlan> multi_row_batches(int vocab, const std::vector<std::vector<int32_t>>& tb) {
  // Row lengths per batch: (pos0, n_tokens) for rows A, B, C.
  const int32_t plan[3][3][2] = {
      {{0, 20}, {0, 7}, {0, 3}}, {{20, 1}, {7, 12}, {3, 1}}, {{21, 1}, {19, 1}, {4, 5}}};
  std::vector<BatchPlan> out(3);
  for (int bi = 0; bi < 3; ++bi) {
    for (int r = 0; r < 3; ++r) {
      const int32_t p0 = plan[bi][r][0], n = plan[bi][r][1];
      out[size_t(bi)].rows.push_back(
          ForwardRow{p0, n, tb[size_t(r)].data(), int32_t(tb[size_t(r)].size()), true});
      for (int i = 0; i < n; ++i)
        out[size_t(bi)].tokens.push_back(int32_t((r * 977 + (p0 + i) * 131 + 5) % vocab));
    }
  }
  return out;
}

double rel_rms(const std::vector<float>& got, const std::vector<float>& want, long long* bad) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) ++*bad;
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += double(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The same batch again with every row sampled on the device (greedy, seeded
// top-p, seeded top-k + min-p): the tokens and raw logprobs must be what the
// host sampler picks from the logits the first pass copied out (the same
// logits: the second pass rewrites the same KV values). This checks the
// device-sampling plumbing exactly, free of bf16-vs-CPU noise (docs/cuda.md
// lists which GPU tests have run on a GPU).
void expect_device_sampling_matches_host(const KvasirCudaPluginV1& api, KvasirCudaStage* st,
                                         KvasirCudaBatch b, const std::vector<float>& logits,
                                         int64_t V, const char* what, const char* slice,
                                         size_t bi) {
  const int n_rows = b.n_rows;
  std::vector<KvasirCudaSample> sample(static_cast<size_t>(n_rows));
  std::vector<SamplingParams> params(static_cast<size_t>(n_rows));
  for (int r = 0; r < n_rows; ++r) {
    SamplingParams& sp = params[size_t(r)];
    sp.seed = 7 + uint64_t(r) + 100 * bi;
    sp.has_seed = 1;
    if (r % 3 == 0) {
      sp.temperature = 0.f;
    } else if (r % 3 == 1) {
      sp.temperature = 0.8f;
      sp.top_p = 0.95f;
    } else {
      sp.temperature = 1.0f;
      sp.top_k = 20;
      sp.min_p = 0.05f;
    }
    sample[size_t(r)] = KvasirCudaSample{1,
                                         sp.temperature,
                                         sp.top_p,
                                         sp.min_p,
                                         sp.top_k,
                                         sp.seed,
                                         uint64_t(b.rows[r].pos0) + uint64_t(b.rows[r].n_tokens),
                                         nullptr};  // unconstrained
  }
  std::vector<int32_t> tok(static_cast<size_t>(n_rows), -1);
  std::vector<float> lp(static_cast<size_t>(n_rows), 0.f);
  std::vector<float> unused(logits.size());
  b.sample = sample.data();
  b.token_out = tok.data();
  b.logprob_out = lp.data();
  b.logits = unused.data();
  char err[512] = {};
  ASSERT_EQ(api.forward(st, &b, err, sizeof err), KVASIR_CUDA_OK) << err;
  Sampler host;
  int differ = 0;
  for (int r = 0; r < n_rows; ++r) {
    std::vector<float> row(logits.begin() + int64_t(r) * V, logits.begin() + int64_t(r + 1) * V);
    const SampleResult want =
        host.sample(row.data(), int32_t(V), params[size_t(r)], nullptr, sample[size_t(r)].position);
    if (tok[size_t(r)] != want.token) {
      ++differ;  // a draw within rounding of a boundary (the two sum in other orders)
      std::printf("[%s %s] batch %zu row %d: device sampled %d, host %d\n", what, slice, bi, r,
                  tok[size_t(r)], want.token);
    } else {
      EXPECT_NEAR(lp[size_t(r)], want.logprob, 1e-4 + 1e-5 * std::fabs(want.logprob))
          << what << " " << slice << " batch " << bi << " row " << r;
    }
  }
  // gpu-check prints this line: the exact plumbing check's result.
  std::printf("[%s %s] device sampling vs host sampler, batch %zu: %d of %d rows identical\n", what,
              slice, bi, n_rows - differ, n_rows);
  EXPECT_LE(differ, 1) << what << " " << slice << " batch " << bi;
}

void compare_multi_row(const std::string& model_path, const char* what) {
  auto plugin = CudaPlugin::load(0);
  const KvasirCudaPluginV1& api = plugin->api();
  auto model = ModelFile::open(model_path);
  const ModelConfig& mc = model->config();
  const int block = 16, n_blocks = 12, L = mc.n_layers, mid = L / 2;
  const std::vector<std::vector<int32_t>> tb = {{5, 2}, {0, 9}, {11}};
  const auto batches = multi_row_batches(mc.vocab, tb);
  const int64_t H = mc.hidden, V = mc.vocab;

  struct Slice {
    const char* name;
    int first, last;
    bool head, tail;
  };
  const Slice slices[] = {{"head", 0, mid - 1, true, false},
                          {"tail", mid, L - 1, false, true},
                          {"whole", 0, L - 1, true, true}};
  std::vector<std::vector<float>> cpu_head_out;  // the CPU head's hidden, fed to both tails
  for (const Slice& s : slices) {
    KvasirCudaStageConfig cfg{};
    cfg.struct_size = sizeof cfg;
    cfg.device = 0;
    cfg.model_path = model_path.c_str();
    cfg.first_layer = s.first;
    cfg.last_layer = s.last;
    cfg.head = s.head;
    cfg.tail = s.tail;
    cfg.block_size = block;
    cfg.max_rows = 8;
    cfg.max_tokens = 64;
    cfg.max_table = 4;
    cfg.inflight = 1;
    cfg.gpu_memory_utilization = 0.2;
    char err[512] = {};
    KvasirCudaStage* st = nullptr;
    int64_t cap = 0;
    ASSERT_EQ(api.open(&cfg, &st, &cap, err, sizeof err), KVASIR_CUDA_OK) << err;
    ASSERT_EQ(api.allocate_kv(st, n_blocks, err, sizeof err), KVASIR_CUDA_OK) << err;
    SliceExecutor cpu(*model, SliceSpec{s.first, s.last, s.head, s.tail},
                      KvSpec{n_blocks, block, DType::F16}, 2, 64);
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const BatchPlan& bp = batches[bi];
      const int64_t T = int64_t(bp.tokens.size());
      const int n_rows = int(bp.rows.size());
      std::vector<float> in = s.head ? std::vector<float>() : cpu_head_out[bi];
      std::vector<float> want(size_t(s.tail ? n_rows * V : T * H));
      std::vector<float> got(want.size(), std::nanf(""));
      ForwardBatch fb;
      fb.rows = bp.rows.data();
      fb.n_rows = n_rows;
      fb.tokens = bp.tokens.data();
      fb.n_tokens = T;
      cpu.forward(fb, s.head ? nullptr : in.data(), s.tail ? nullptr : want.data(),
                  s.tail ? want.data() : nullptr);
      std::vector<KvasirCudaRow> rows;
      for (const ForwardRow& r : bp.rows)
        rows.push_back(KvasirCudaRow{r.pos0, r.n_tokens, r.block_table, r.n_table, 1});
      KvasirCudaBatch b{};
      b.batch_id = bi + 1;
      b.rows = rows.data();
      b.n_rows = n_rows;
      b.tokens = bp.tokens.data();
      b.n_tokens = T;
      b.hidden_in = s.head ? nullptr : in.data();
      b.hidden_out = s.tail ? nullptr : got.data();
      b.logits = s.tail ? got.data() : nullptr;
      ASSERT_EQ(api.forward(st, &b, err, sizeof err), KVASIR_CUDA_OK) << err;
      long long bad = 0;
      const double e = rel_rms(got, want, &bad);
      std::string argmax;
      int agree = 0;
      if (s.tail) {
        for (int r = 0; r < n_rows; ++r) {
          const float* g = got.data() + int64_t(r) * V;
          const float* c = want.data() + int64_t(r) * V;
          const int64_t bg = std::max_element(g, g + V) - g, bc = std::max_element(c, c + V) - c;
          agree += bg == bc;
          argmax += fmt::format(" {}/{}", bg, bc);
        }
      }
      std::printf("[%s %s] batch %zu: rel rms %.5f, %lld non-finite%s%s\n", what, s.name, bi, e,
                  bad, s.tail ? ", argmax gpu/cpu:" : "", argmax.c_str());
      EXPECT_EQ(bad, 0) << what << " " << s.name << " batch " << bi;
      EXPECT_LT(e, 0.05) << what << " " << s.name << " batch " << bi;
      if (s.tail) {
        EXPECT_GE(agree, n_rows - 1) << what << " " << s.name << " batch " << bi;
        expect_device_sampling_matches_host(api, st, b, got, V, what, s.name, bi);
      }
      if (!s.tail && s.head) cpu_head_out.push_back(want);
    }
    api.close(st);
  }
}

TEST(CudaE2E, ManyRowBatchesMatchCpuExecutor) {
  std::string why;
  if (!gpu_usable(&why)) GTEST_SKIP() << "SKIPPED: no CUDA device (" << why << ")";
  std::string dir = temp_dir("cudas-rows");
  std::string tiny = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 4;
  write_tiny_gguf(tiny, spec);
  compare_multi_row(tiny, "tiny");
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(model)) compare_multi_row(model, "default");
  std::filesystem::remove_all(dir);
}

// A Mixtral-style MoE (llama with 4 experts, top 2: tiny_family("mixtral"))
// through the CUDA executor's MoE FFN (router GEMM, moe_route, moe_ffn),
// head, tail and whole, against the CPU executor: compare_multi_row's bars,
// rel rms < 0.05 and top-1 agreement on all rows but one per batch. Those
// bars are a first guess for MoE, to be confirmed on a GPU (docs/cuda.md):
// the router's bf16 weights and input may flip a
// near-tie routing, which moves a row by more than bf16 rounding.
TEST(CudaE2E, MixtralMoeMatchesCpuExecutor) {
  std::string why;
  if (!gpu_usable(&why)) GTEST_SKIP() << "SKIPPED: no CUDA device (" << why << ")";
  std::string dir = temp_dir("cudas-mixtral");
  std::string tiny = dir + "/mixtral.gguf";
  TinySpec spec = tiny_family("mixtral");
  spec.layers = 4;
  write_tiny_gguf(tiny, spec);
  compare_multi_row(tiny, "mixtral");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvasir::test
