// bench_ring — throughput of the in-flight ring vs a draining pipeline.
//
//   build-ring/bin/bench_ring [--model PATH] [--stages 2] [--threads 1]
//                             [--requests 64] [--prompt 32] [--gen 32] [--inflight 2]
//
// Runs the same load (all requests submitted at once, greedy, ignore_eos)
// with max_inflight = 1 and with max_inflight = N, through real stage
// processes (the built kvasird, exec'd with --stage), and prints tokens/s,
// the ratio, and each stage's busy / starved / blocked shares of wall time.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "daemon/engine/bridge.h"
#include "daemon/supervisor/supervisor.h"
#include "model/model_file.h"

using namespace kvasir;

namespace {

struct Args {
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  int stages = 2, threads = 1, requests = 64, prompt = 32, gen = 32, inflight = 2;
  int max_rows = 32, max_tokens = 512;
  int head_layers = 0;  // 2 stages: layers of stage 0 (0 = even split)
};

struct Run {
  double tok_s = 0, wall_s = 0;
  std::vector<StageReport> st;
};

Run run(const Args& a, int inflight) {
  auto dir = std::filesystem::temp_directory_path() / ("kvasir-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string cfg_path = (dir / "k.toml").string();
  {
    auto m = ModelFile::open(a.model);
    const int L = m->config().n_layers;
    std::ofstream f(cfg_path);
    f << "[model]\npath = \"" << a.model << "\"\n[plan]\nmax_rows = " << a.max_rows
      << "\nmax_tokens = " << a.max_tokens << "\nmax_inflight = " << inflight << "\n";
    int first = 0;
    for (int s = 0; s < a.stages; ++s) {
      int n = L / a.stages + (s < L % a.stages);
      // --head-layers moves the split: the tail also runs the output head
      // and the sampler, so an even split leaves it the slowest stage.
      if (a.head_layers > 0 && a.stages == 2) n = s == 0 ? a.head_layers : L - a.head_layers;
      f << "[[stages]]\nlayers = \"" << first << "-" << first + n - 1
        << "\"\nthreads = " << a.threads << "\n";
      first += n;
    }
    f << "[kv]\nmemory = \"256MiB\"\n[server]\nsocket = \"" << (dir / "s.sock").string() << "\"\n";
  }
  Config cfg = load_config(cfg_path);
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = KVASIRD_PATH;
  Supervisor sup(cfg, mc, opt);
  sup.start();
  BridgeConfig bc;
  bc.limits = SchedLimits{cfg.plan.max_rows, cfg.plan.max_tokens, cfg.scheduler.chunk_size, 256};
  bc.n_blocks = sup.kv_blocks();
  bc.sliding = SlidingKv{mc.sliding_window, sup.kv_blocks_swa()};
  bc.block_size = cfg.kv.block_size;
  bc.vocab = mc.vocab;
  bc.context_length = mc.context_length;
  Run r;
  {
    Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
    std::mt19937 rng(1);
    std::atomic<int> done{0};
    std::atomic<int64_t> tokens{0};
    auto before = engine.ring_report().stages;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.requests; ++i) {
      GenRequest g;
      for (int j = 0; j < a.prompt; ++j) g.prompt.push_back(int32_t(rng() % uint32_t(mc.vocab)));
      g.max_tokens = a.gen;
      g.ignore_eos = true;
      g.sampling.temperature = 0;
      engine.submit(g, [&](const TokenEvent& ev) {
        if (ev.token >= 0) tokens++;
        if (ev.finish != FinishReason::kNone) done++;
      });
    }
    while (done.load() < a.requests) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.tok_s = double(tokens.load()) / r.wall_s;
    r.st = engine.ring_report().stages;
    for (size_t s = 0; s < r.st.size(); ++s) {
      r.st[s].busy_s -= before[s].busy_s;
      r.st[s].starved_s -= before[s].starved_s;
      r.st[s].blocked_s -= before[s].blocked_s;
    }
    engine.shutdown();
  }
  sup.stop();
  std::filesystem::remove_all(dir);
  return r;
}

void print(const char* label, const Run& r) {
  std::printf("%-14s %8.1f tok/s  (%.2f s)\n", label, r.tok_s, r.wall_s);
  for (size_t s = 0; s < r.st.size(); ++s)
    std::printf("    stage %zu: busy %5.1f%%  starved %5.1f%%  blocked %4.1f%%  batches %llu\n", s,
                100.0 * r.st[s].busy_s / r.wall_s, 100.0 * r.st[s].starved_s / r.wall_s,
                100.0 * r.st[s].blocked_s / r.wall_s, (unsigned long long)r.st[s].batches);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--model")
      a.model = v;
    else if (k == "--stages")
      a.stages = std::atoi(v);
    else if (k == "--threads")
      a.threads = std::atoi(v);
    else if (k == "--requests")
      a.requests = std::atoi(v);
    else if (k == "--prompt")
      a.prompt = std::atoi(v);
    else if (k == "--gen")
      a.gen = std::atoi(v);
    else if (k == "--inflight")
      a.inflight = std::atoi(v);
    else if (k == "--max-rows")
      a.max_rows = std::atoi(v);
    else if (k == "--head-layers")
      a.head_layers = std::atoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    std::printf("%d stages x %d thread(s), %d requests, prompt %d, gen %d, max_rows %d\n", a.stages,
                a.threads, a.requests, a.prompt, a.gen, a.max_rows);
    Run one = run(a, 1);
    print("max_inflight=1", one);
    Run n = run(a, a.inflight);
    char label[32];
    std::snprintf(label, sizeof label, "max_inflight=%d", a.inflight);
    print(label, n);
    std::printf("ratio: %.2f\n", n.tok_s / one.tok_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ring: %s\n", e.what());
    return 1;
  }
}
