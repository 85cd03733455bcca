// bench_sliding_step — what a sliding-window group saves a decode step at a
// long context (docs/scheduler.md, "Sliding-window groups").
//
//   build/bin/bench_sliding_step MODEL.gguf [--ctx 16384] [--threads 2]
//                                [--steps 20] [--block 16]
//
// One decode row at position ctx - 1 of a sliding-window model (Gemma 3),
// through the whole model in one process, three ways in the same run:
//   sliding group   the sliding layers hold their own pool and read only
//                   the window's blocks (what kvasird runs on CPU stages);
//   masking path    one pool, every layer keeps the whole context and the
//                   sliding layers skip what is before the window;
//   window ignored  the same weights with the model's window set to 0:
//                   every layer attends over the whole context.
// The KV is not filled by a prefill (at 16k that is minutes of compute on
// two cores and changes no step's cost): the blocks hold zeros. The three
// executors alternate step by step (ABCABC...), and the median step of
// each is printed with its ratio to the window-ignored step, and the KV
// blocks each holds across its layers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/simd.h"
#include "model/model_file.h"
#include "stages/forward.h"

using namespace kvasir;

namespace {

struct Args {
  std::string model;
  int ctx = 16384, threads = 2, steps = 20, block = 16;
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_sliding_step MODEL.gguf [--ctx N] [--threads N] "
                         "[--steps N] [--block N]\n");
    std::exit(2);
  }
  a.model = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--ctx") a.ctx = v;
    else if (k == "--threads") a.threads = v;
    else if (k == "--steps") a.steps = v;
    else if (k == "--block") a.block = v;
    else {
      std::fprintf(stderr, "bench_sliding_step: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.ctx < 2 || a.threads < 1 || a.steps < 1 || a.block < 1) {
    std::fprintf(stderr, "bench_sliding_step: --ctx >= 2, the others >= 1\n");
    std::exit(2);
  }
  return a;
}

// The same file with its sliding window dropped: every layer global.
class WindowIgnored : public ModelFile {
 public:
  explicit WindowIgnored(const ModelFile& inner)
      : ModelFile(inner.path()), inner_(inner), cfg_(inner.config()) {
    cfg_.sliding_window = 0;
    cfg_.sliding_pattern = 0;
  }
  const ModelConfig& config() const override { return cfg_; }
  const GgufFile* gguf() const override { return inner_.gguf(); }

 protected:
  const TensorView* lookup(const std::string& name) const override { return inner_.find(name); }
  const std::vector<TensorView>* lookup_experts(const std::string& name) const override {
    return inner_.find_experts(name);
  }

 private:
  const ModelFile& inner_;
  ModelConfig cfg_;
};

struct Way {
  const char* name;
  std::unique_ptr<SliceExecutor> ex;
  std::vector<int32_t> table, table_swa;  // [n_table], the sliding pool's ([n_table], -1 before the window)
  int64_t blocks_held = 0;                // summed over the layers
  std::vector<double> ms;
};

double step_ms(Way& w, int32_t pos, int32_t token, std::vector<float>& logits) {
  ForwardRow row{pos, 1, w.table.data(), int32_t(w.table.size()), true};
  if (!w.table_swa.empty()) row.block_table_swa = w.table_swa.data();
  ForwardBatch b;
  b.rows = &row;
  b.n_rows = 1;
  b.tokens = &token;
  b.n_tokens = 1;
  const auto t0 = std::chrono::steady_clock::now();
  w.ex->forward(b, nullptr, nullptr, logits.data());
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The first line of a file that starts with prefix ("" when none).
std::string line_of(const char* path, const std::string& prefix) {
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(prefix, 0) == 0) return l;
  return "";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(const Args& a) {
  auto file = ModelFile::open(a.model);
  const ModelConfig& mc = file->config();
  if (mc.sliding_window <= 0) {
    std::fprintf(stderr, "bench_sliding_step: %s has no sliding window\n", a.model.c_str());
    return 2;
  }
  const WindowIgnored global(*file);
  const int32_t n_table = (a.ctx + a.block - 1) / a.block;
  int32_t n_sliding = 0;
  for (int32_t il = 0; il < mc.n_layers; ++il) n_sliding += mc.layer_slides(il) ? 1 : 0;
  // The window of the last position, and one block it starts inside.
  const int32_t first = std::max(0, a.ctx - 1 - mc.sliding_window + 1) / a.block;
  const int32_t n_swa = n_table - first;
  const SliceSpec all{0, mc.n_layers - 1, true, true};
  const int64_t max_tokens = 16;

  std::vector<Way> ways(3);
  ways[0].name = "sliding group";
  ways[0].ex = std::make_unique<SliceExecutor>(*file, all, KvSpec{n_table, a.block, DType::F16, n_swa},
                                               a.threads, max_tokens);
  ways[0].blocks_held = int64_t(mc.n_layers - n_sliding) * n_table + int64_t(n_sliding) * n_swa;
  ways[1].name = "masking path";
  ways[1].ex = std::make_unique<SliceExecutor>(*file, all, KvSpec{n_table, a.block, DType::F16},
                                               a.threads, max_tokens);
  ways[1].blocks_held = int64_t(mc.n_layers) * n_table;
  ways[2].name = "window ignored";
  ways[2].ex = std::make_unique<SliceExecutor>(global, all, KvSpec{n_table, a.block, DType::F16},
                                               a.threads, max_tokens);
  ways[2].blocks_held = int64_t(mc.n_layers) * n_table;
  for (Way& w : ways) {
    w.table.resize(size_t(n_table));
    for (int32_t i = 0; i < n_table; ++i) w.table[size_t(i)] = i;
  }
  ways[0].table_swa.assign(size_t(n_table), -1);
  for (int32_t i = first; i < n_table; ++i) ways[0].table_swa[size_t(i)] = i - first;

  std::vector<float> logits(size_t(mc.vocab));
  const int32_t pos = a.ctx - 1, token = 2;
  for (Way& w : ways) step_ms(w, pos, token, logits);  // warm-up (pages the KV in)
  for (int s = 0; s < a.steps; ++s)
    for (Way& w : ways) w.ms.push_back(step_ms(w, pos, token, logits));

  std::printf("%s\nload %s\n", line_of("/proc/cpuinfo", "model name").c_str(),
              line_of("/proc/loadavg", "").c_str());
  std::printf("%s: %d layers (%d sliding, window %d), decode at context %d, %d threads, "
              "SIMD %s\n",
              mc.name.c_str(), mc.n_layers, n_sliding, mc.sliding_window, a.ctx, a.threads,
              cpu::simd_level_name(cpu::simd_level()));
  const double base = median(ways[2].ms);
  for (const Way& w : ways)
    std::printf("  %-15s step %8.2f ms (median of %d)  %.2fx the window-ignored step  "
                "KV blocks %lld (%.1f%%)\n",
                w.name, median(w.ms), a.steps, median(w.ms) / base, (long long)w.blocks_held,
                100.0 * double(w.blocks_held) / double(ways[2].blocks_held));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sliding_step: %s\n", e.what());
    return 1;
  }
}
