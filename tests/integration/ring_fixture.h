// tests/integration/ring_fixture.h — helpers for the ring's end-to-end tests:
// write a config, start real stage processes (the built kvasird, exec'd with
// --stage N) under an in-process Supervisor + Bridge, and a local
// reference: one SliceExecutor over the whole model, one request at a time.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "ipc/futex.h"
#include "daemon/engine/bridge.h"
#include "daemon/supervisor/supervisor.h"
#include "model/model_file.h"
#include "stages/forward.h"

namespace kvasir::test {

// These programs compare rings' outputs bit for bit with an in-process
// reference and with each other: every process must run the same kernels.
// In auto mode each process times its own (kernels/cpu/simd.h), and on a
// loaded machine a near-tie can tip one run's stages into the other
// numerics family (or onto the AMX tiles) and part a greedy continuation
// at a near-tie; a pinned level decides nothing by time. Set at static
// initialisation, before any kernel runs, and inherited by every stage
// process; a KVASIR_SIMD already set wins. Dispatch itself is tested in
// tests/unit/kernels/test_dispatch.cpp, its hand-over across a stage
// restart in tests/integration/test_stage_kill.sh.
[[maybe_unused]] static const bool kSimdPinned = setenv("KVASIR_SIMD", "avx2", /*overwrite=*/0) == 0;

// The bridge's config for a ring `sup` started from `cfg`: the plan's rows
// and tokens, the scheduler's chunk and sequence limits, the KV pools the
// supervisor sized, the model's vocabulary and context. The scheduler's
// other settings are its defaults; a test sets what it tries on top.
inline BridgeConfig ring_bridge_config(const Config& cfg, const ModelConfig& mc,
                                       const Supervisor& sup) {
  BridgeConfig bc;
  bc.limits = SchedLimits{cfg.plan.max_rows, cfg.plan.max_tokens, cfg.scheduler.chunk_size,
                          cfg.scheduler.max_num_seqs};
  bc.n_blocks = sup.kv_blocks();
  bc.sliding = SlidingKv{mc.sliding_window, sup.kv_blocks_swa()};
  bc.block_size = cfg.kv.block_size;
  bc.vocab = mc.vocab;
  bc.context_length = mc.context_length;
  return bc;
}

inline std::string temp_dir(const std::string& tag) {
  auto d = std::filesystem::temp_directory_path() /
           ("kvasir-" + tag + "-" + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

// Sends `sig` to one stage process; returns kill()'s result. A stage's pid
// reads -1 while the supervisor restarts it (Supervisor::pids), and
// kill(-1, sig) signals every process this user may signal (the test
// runner with them), kill(0, sig) this whole process group: a pid that is
// not a real one is refused with ESRCH instead.
inline int signal_stage(pid_t pid, int sig) {
  if (pid <= 0) {
    errno = ESRCH;
    return -1;
  }
  return kill(pid, sig);
}

// Splits n_layers into `stages` contiguous ranges as evenly as possible.
inline std::string plan_toml(int n_layers, int stages, int threads, int inflight, int max_rows,
                             int max_tokens) {
  std::string t = "[plan]\nmax_rows = " + std::to_string(max_rows) +
                  "\nmax_tokens = " + std::to_string(max_tokens) +
                  "\nmax_inflight = " + std::to_string(inflight) + "\n";
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    int n = n_layers / stages + (s < n_layers % stages ? 1 : 0);
    t += "[[stages]]\nlayers = \"" + std::to_string(first) + "-" + std::to_string(first + n - 1) +
         "\"\ndevice = \"cpu\"\nthreads = " + std::to_string(threads) + "\n";
    first += n;
  }
  return t;
}

inline std::string write_config(const std::string& dir, const std::string& model_path,
                                const std::string& plan, const std::string& kv_memory = "16MiB") {
  std::string path = dir + "/kvasir.toml";
  std::ofstream(path) << "[model]\npath = \"" << model_path << "\"\n"
                      << plan << "[kv]\nblock_size = 16\nmemory = \"" << kv_memory << "\"\n"
                      << "[server]\nsocket = \"" << dir << "/kvasir.sock\"\n";
  return path;
}

// Events of many requests, gathered from the engine thread. Also used by
// the bridge's unit test (tests/unit/daemon/engine/test_bridge.cpp).
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, FinishReason> finish;
  std::map<int, std::string> errors;
  std::map<int, std::vector<int64_t>> token_ns;  // when each token arrived (inter-token latency)

  EventSink sink(int key) {
    return [this, key](const TokenEvent& ev) {
      std::lock_guard lk(mu);
      if (ev.token >= 0) tokens[key].push_back(ev.token), token_ns[key].push_back(ipc::now_ns());
      if (ev.finish != FinishReason::kNone) {
        finish[key] = ev.finish;
        errors[key] = ev.error.message();
        cv.notify_all();
      }
    };
  }
  bool wait_all(size_t n, int seconds = 30) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(seconds), [&] { return finish.size() >= n; });
  }
};

// Greedy generation with one SliceExecutor over the whole model, one request
// at a time: the local reference.
inline std::vector<int32_t> reference_greedy(SliceExecutor& ex, int32_t n_blocks,
                                             const std::vector<int32_t>& prompt, int max_new) {
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int32_t i = 0; i < n_blocks; ++i) table[i] = i;
  std::vector<int32_t> toks = prompt, out;
  std::vector<float> logits(size_t(ex.config().vocab));
  int32_t pos = 0;
  std::vector<int32_t> feed = prompt;
  while (int(out.size()) < max_new) {
    ForwardRow row{pos, int32_t(feed.size()), table.data(), n_blocks, true};
    ForwardBatch b;
    b.rows = &row;
    b.n_rows = 1;
    b.tokens = feed.data();
    b.n_tokens = int64_t(feed.size());
    ex.forward(b, nullptr, nullptr, logits.data());
    int32_t best = 0;
    for (int32_t v = 1; v < ex.config().vocab; ++v)
      if (logits[v] > logits[best]) best = v;
    pos += int32_t(feed.size());
    out.push_back(best);
    feed = {best};
  }
  return out;
}

#ifdef KVASIRD_PATH  // the integration tests' build of kvasird
inline std::string kvasird_path() { return KVASIRD_PATH; }
#endif

}  // namespace kvasir::test
