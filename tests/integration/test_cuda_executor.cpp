// The CUDA stage executor in-process (stages/cuda/executor.h), two of them
// side by side on one GPU:
//   - decode graphs: the same prefills and decode steps through a stage with
//     [cuda] graphs and one without give bit-identical logits at every step
//     whose rows fill a bucket (1, 2, 4, 8, 16) and at 3 rows (padded to 4:
//     the skinny GEMM and the attention treat rows independently); at 5 rows
//     (padded to 8, cuBLASLt may choose another algorithm for 8 rows than
//     for 5) the difference is reported; contexts cross the 512-position
//     partitions during the steps; bf16 weights, and FP8 weights where the
//     device has FP8 tensor cores;
//   - FP8 quantised at load ([cuda] quantize = "fp8") against bf16 under
//     teacher forcing: top-1 agreement on the default model's English
//     passage >= 97%;
//   - an FP8 checkpoint (tiny model, per-tensor and per-channel scales)
//     against its dequantised twin: bit-identical where FP8 is widened to
//     bf16 (below compute capability 8.9), close where it runs as FP8.
// Written without a GPU: skipped here, saying why (docs/cuda.md).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "gpu_texts.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "stages/cuda/executor.h"
#include "tests/support/tiny_model.h"

namespace kvasir::test {
namespace {

using cuda::CudaSliceExecutor;

std::string temp_dir(const std::string& tag) {
  auto d =
      std::filesystem::temp_directory_path() / ("kvasir-" + tag + "-" + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

std::string no_device() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return cudaGetErrorString(e);
  return n == 0 ? "cudaGetDeviceCount returned 0" : "";
}

#define REQUIRE_DEVICE()                                                           \
  do {                                                                             \
    const std::string why_ = no_device();                                          \
    if (!why_.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << why_ << ")"; \
  } while (0)

// Empty when device 0 has FP8 tensor cores, else why not.
std::string no_fp8() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "cudaGetDeviceProperties failed";
  if (p.major * 10 + p.minor >= 89) return "";
  return "compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) +
         " has no FP8 tensor cores (8.9+)";
}

const std::string kDefaultModel =
    std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct StageSpec {
  std::string model;
  int graphs = 0;
  int quant = KVASIR_CUDA_QUANT_NONE;
  int max_rows = 16, max_tokens = 64, max_table = 48, n_blocks = 16 * 48;
};

std::unique_ptr<CudaSliceExecutor> open_whole(const StageSpec& s) {
  auto m = ModelFile::open(s.model);
  KvasirCudaStageConfig cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.device = 0;
  cfg.model_path = s.model.c_str();
  cfg.first_layer = 0;
  cfg.last_layer = m->config().n_layers - 1;
  cfg.head = cfg.tail = 1;
  cfg.block_size = 16;
  cfg.max_rows = s.max_rows;
  cfg.max_tokens = s.max_tokens;
  cfg.max_table = s.max_table;
  cfg.inflight = 1;
  cfg.gpu_memory_utilization = 0.3;
  cfg.cuda_graphs = s.graphs;
  cfg.weight_quant = s.quant;
  std::unique_ptr<CudaSliceExecutor> ex;
  const Status st = CudaSliceExecutor::open(cfg, &ex);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!ex) return nullptr;
  const Status kv = ex->allocate_kv(s.n_blocks);
  EXPECT_TRUE(kv.ok()) << kv.message();
  return kv.ok() ? std::move(ex) : nullptr;
}

// One forward; every row's last token sampled on the host (its logits copied).
struct Batch {
  std::vector<KvasirCudaRow> rows;
  std::vector<int32_t> tokens;
};

Status forward(CudaSliceExecutor& ex, const Batch& b, uint64_t id, std::vector<float>& logits,
               bool all_logits = false) {
  KvasirCudaBatch kb{};
  kb.batch_id = id;
  kb.rows = b.rows.data();
  kb.n_rows = int32_t(b.rows.size());
  kb.tokens = b.tokens.data();
  kb.n_tokens = int64_t(b.tokens.size());
  kb.all_logits = all_logits ? 1 : 0;
  kb.logits = logits.data();
  return ex.forward(kb);
}

int64_t argmax(const float* x, int64_t n) {
  return std::max_element(x, x + n) - x;
}

// ---- decode graphs ---------------------------------------------------------

struct GraphRun {
  int steps = 0, identical = 0, argmax_equal = 0, argmax_total = 0;
  double max_diff = 0;
};

// R rows: each prefilled (prompt 500 + 7r tokens, chunks of 64), then
// `steps` decode steps through both stages, fed the eager stage's argmax.
GraphRun decode_steps(CudaSliceExecutor& graph, CudaSliceExecutor& eager, int R, int vocab,
                      uint64_t& id, int steps) {
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 48; ++i) tables[size_t(r)].push_back(r * 48 + i);
  std::vector<float> la(size_t(16) * vocab), lb(size_t(16) * vocab);
  std::vector<int32_t> len(static_cast<size_t>(R)), next(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    len[size_t(r)] = 500 + 7 * r;
    for (int p0 = 0; p0 < len[size_t(r)]; p0 += 64) {
      const int n = std::min(64, len[size_t(r)] - p0);
      Batch b;
      b.rows.push_back(KvasirCudaRow{p0, n, tables[size_t(r)].data(), 48, 1});
      for (int i = 0; i < n; ++i) b.tokens.push_back((r * 131 + (p0 + i) * 7) % vocab);
      ++id;
      EXPECT_TRUE(forward(graph, b, id, la).ok());
      EXPECT_TRUE(forward(eager, b, id, lb).ok());
    }
    next[size_t(r)] = int32_t(argmax(lb.data(), vocab));
  }
  GraphRun out;
  for (int s = 0; s < steps; ++s) {
    Batch b;
    for (int r = 0; r < R; ++r) {
      b.rows.push_back(KvasirCudaRow{len[size_t(r)] + s, 1, tables[size_t(r)].data(), 48, 1});
      b.tokens.push_back(next[size_t(r)]);
    }
    ++id;
    const Status sa = forward(graph, b, id, la), sb = forward(eager, b, id, lb);
    EXPECT_TRUE(sa.ok()) << sa.message();
    EXPECT_TRUE(sb.ok()) << sb.message();
    const size_t n = size_t(R) * vocab;
    out.identical += std::memcmp(la.data(), lb.data(), n * 4) == 0;
    for (size_t i = 0; i < n; ++i)
      out.max_diff = std::max(out.max_diff, double(std::fabs(la[i] - lb[i])));
    for (int r = 0; r < R; ++r) {
      const int64_t ga = argmax(la.data() + int64_t(r) * vocab, vocab);
      next[size_t(r)] = int32_t(argmax(lb.data() + int64_t(r) * vocab, vocab));
      out.argmax_equal += ga == next[size_t(r)];
      ++out.argmax_total;
    }
    ++out.steps;
  }
  return out;
}

void graphs_match_eager(const std::string& model, int quant, const char* what) {
  StageSpec spec;
  spec.model = model;
  spec.quant = quant;
  spec.graphs = 1;
  auto graph = open_whole(spec);
  spec.graphs = 0;
  auto eager = open_whole(spec);
  ASSERT_TRUE(graph && eager);
  const int vocab = graph->config().vocab;
  uint64_t id = 0;
  for (int R : {1, 2, 3, 4, 5, 8, 16}) {
    const uint64_t replays0 = graph->graph_replays();
    const GraphRun g = decode_steps(*graph, *eager, R, vocab, id, 10);
    const uint64_t replays = graph->graph_replays() - replays0;
    std::printf(
        "[%s] decode graphs vs eager, %2d rows: %d of %d steps bit-identical, max |diff| %.3g, "
        "argmax equal %d of %d, %llu replays (%zu graphs so far)\n",
        what, R, g.identical, g.steps, g.max_diff, g.argmax_equal, g.argmax_total,
        (unsigned long long)replays, graph->decode_graphs());
    // Step 1 of a shape runs eagerly, step 2 captures, the rest replay; a
    // context bucket change (past 512, 1024) starts a new shape.
    EXPECT_GE(replays, 4u) << what << " " << R << " rows";
    if (R != 5) EXPECT_EQ(g.identical, g.steps) << what << " " << R << " rows";
  }
}

TEST(CudaExecutor, DecodeGraphsGiveTheEagerLogits) {
  REQUIRE_DEVICE();
  std::string dir = temp_dir("cudax-graphs");
  TinySpec spec;
  spec.layers = 3;
  spec.ctx = 1024;
  write_tiny_gguf(dir + "/tiny.gguf", spec);
  graphs_match_eager(dir + "/tiny.gguf", KVASIR_CUDA_QUANT_NONE, "tiny bf16");
  const std::string why = no_fp8();
  if (why.empty())
    graphs_match_eager(dir + "/tiny.gguf", KVASIR_CUDA_QUANT_FP8, "tiny fp8");
  else
    std::printf("FP8 decode graphs SKIPPED: %s\n", why.c_str());
  if (std::filesystem::exists(kDefaultModel))
    graphs_match_eager(kDefaultModel, KVASIR_CUDA_QUANT_NONE, "default bf16");
  std::filesystem::remove_all(dir);
}

// ---- FP8 -------------------------------------------------------------------

// Logits of every position of seq through one prefill.
std::vector<float> all_logits(const std::string& model, const std::vector<int32_t>& seq, int quant,
                              int32_t* fp8_matrices = nullptr) {
  StageSpec s;
  s.model = model;
  s.quant = quant;
  s.max_tokens = int(seq.size());
  s.max_table = int(seq.size() + 15) / 16;
  s.n_blocks = s.max_table;
  auto ex = open_whole(s);
  if (!ex) return {};
  if (fp8_matrices) *fp8_matrices = ex->fp8_matrices();
  std::vector<int32_t> table(size_t(s.max_table));
  for (int i = 0; i < s.max_table; ++i) table[size_t(i)] = i;
  Batch b;
  b.rows.push_back(KvasirCudaRow{0, int32_t(seq.size()), table.data(), s.max_table, 1});
  b.tokens = seq;
  std::vector<float> out(seq.size() * size_t(ex->config().vocab));
  const Status st = forward(*ex, b, 1, out, true);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

struct Agreement {
  int positions = 0, agree = 0, near_tie = 0;
  long long non_finite = 0;
  double rel_rms = 0;
};

// Top-1 of `got` against `want` per position; a near tie: want's own top
// two within 1%.
Agreement agreement(const std::vector<float>& got, const std::vector<float>& want, int64_t V) {
  Agreement a;
  a.positions = int(want.size() / size_t(V));
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++a.non_finite;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  a.rel_rms = den > 0 ? std::sqrt(num / den) : 0;
  if (got.size() != want.size()) return a;
  for (int t = 0; t < a.positions; ++t) {
    const float* g = got.data() + int64_t(t) * V;
    const float* w = want.data() + int64_t(t) * V;
    const int64_t bg = argmax(g, V), bw = argmax(w, V);
    if (bg == bw)
      ++a.agree;
    else if (w[bw] - w[bg] <= 0.01f * std::max(1.f, std::fabs(w[bw])))
      ++a.near_tie;
  }
  return a;
}

void print(const Agreement& a, const char* what) {
  std::printf(
      "%s, %d positions: top-1 %.4f exact, %.4f counting near-ties (%d), rel rms %.4f, %lld "
      "non-finite\n",
      what, a.positions, double(a.agree) / std::max(1, a.positions),
      double(a.agree + a.near_tie) / std::max(1, a.positions), a.near_tie, a.rel_rms, a.non_finite);
}

TEST(CudaExecutor, Fp8QuantisedTop1AgreementWithBf16) {
  REQUIRE_DEVICE();
  if (const std::string why = no_fp8(); !why.empty()) GTEST_SKIP() << "SKIPPED: " << why;
  std::string dir = temp_dir("cudax-fp8q");
  TinySpec spec;
  spec.layers = 3;
  write_tiny_gguf(dir + "/tiny.gguf", spec);
  std::vector<int32_t> ids;
  for (int i = 0; i < 200; ++i) ids.push_back(int32_t((i * 37 + 11) % spec.vocab));
  int32_t n_fp8 = 0;
  const auto tq = all_logits(dir + "/tiny.gguf", ids, KVASIR_CUDA_QUANT_FP8, &n_fp8);
  EXPECT_EQ(n_fp8, 4 * spec.layers);  // qkv, o, gate/up, down of every layer
  const Agreement t = agreement(tq, all_logits(dir + "/tiny.gguf", ids, 0), spec.vocab);
  print(t, "FP8 (quantised at load) vs bf16, tiny model, teacher forced (reported)");
  EXPECT_EQ(t.non_finite, 0);
  if (std::filesystem::exists(kDefaultModel)) {
    auto gguf = GgufFile::open(kDefaultModel);
    const std::vector<int32_t> text = Tokenizer::from_gguf(*gguf)->encode(kPassage, true, false);
    const auto q = all_logits(kDefaultModel, text, KVASIR_CUDA_QUANT_FP8, &n_fp8);
    EXPECT_EQ(n_fp8, 4 * 30);
    const Agreement d = agreement(q, all_logits(kDefaultModel, text, 0), 49152);
    print(d, "FP8 (quantised at load) vs bf16, default model, English passage, teacher forced");
    EXPECT_EQ(d.non_finite, 0);
    EXPECT_GE(double(d.agree) / d.positions, 0.97);
  }
  std::filesystem::remove_all(dir);
}

TEST(CudaExecutor, Fp8CheckpointMatchesItsDequantisedTwin) {
  REQUIRE_DEVICE();
  const bool fp8 = no_fp8().empty();
  std::string dir = temp_dir("cudax-fp8ck");
  std::vector<int32_t> ids;
  for (int i = 0; i < 96; ++i) ids.push_back(int32_t((i * 53 + 7) % 272));
  for (auto mode : {TinySpec::kFp8PerTensor, TinySpec::kFp8PerChannel}) {
    TinySpec spec;
    spec.layers = 3;
    spec.st_fp8 = mode;
    const std::string ck = dir + "/fp8-" + std::to_string(int(mode));
    const std::string twin = ck + "-twin";
    write_tiny_safetensors(ck, spec);
    spec.fp8_dequantized = true;
    write_tiny_safetensors(twin, spec);
    int32_t n_fp8 = -1;
    const auto got = all_logits(ck, ids, 0, &n_fp8);
    const auto want = all_logits(twin, ids, 0);
    EXPECT_EQ(n_fp8, fp8 ? 4 * spec.layers : 0);
    const Agreement a = agreement(got, want, spec.vocab);
    const std::string what = std::string("FP8 checkpoint (") +
                             (mode == TinySpec::kFp8PerTensor ? "per tensor" : "per channel") +
                             (fp8 ? ", as FP8" : ", widened to bf16") + ") vs its dequantised twin";
    print(a, what.c_str());
    EXPECT_EQ(a.non_finite, 0);
    if (!fp8) {
      EXPECT_EQ(got, want);  // the same bf16 weights either way
    } else {
      EXPECT_LT(a.rel_rms, 0.05);
      EXPECT_GE(double(a.agree + a.near_tie) / a.positions, 0.9);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvasir::test
