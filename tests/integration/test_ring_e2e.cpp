// End-to-end: real stage processes (kvasird --stage N, fork + exec) under an
// in-process Supervisor and Bridge. Greedy output of 2-, 3- and
// 4-stage CPU plans must equal, token for token, a single-process
// SliceExecutor over the whole model, for many concurrent requests of
// different lengths. Then the daemon as a process: no leftover segment or
// child after a normal stop, nor after SIGKILL and a restart.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "base/check.h"
#include "base/cpu_list.h"
#include "ring_fixture.h"
#include "tests/support/tiny_model.h"

namespace kvasir::test {
namespace {

struct Req {
  std::vector<int32_t> prompt;
  int max_new;
};

std::vector<Req> make_requests(int n, int vocab, int max_prompt, int max_new, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Req> v;
  for (int i = 0; i < n; ++i) {
    Req r;
    int len = 1 + int(rng() % uint64_t(max_prompt));
    for (int j = 0; j < len; ++j) r.prompt.push_back(int32_t(rng() % uint64_t(vocab)));
    r.max_new = 1 + int(rng() % uint64_t(max_new));
    v.push_back(std::move(r));
  }
  return v;
}

// Runs the requests through a ring of `stages` stages; returns each one's tokens.
std::vector<std::vector<int32_t>> run_ring(const std::string& model_path, int n_layers,
                                           int stages, int inflight, const std::vector<Req>& reqs,
                                           int max_tokens, const std::string& tag,
                                           float temperature = 0.f,
                                           Policy policy = Policy::kChunked,
                                           const std::string& kv_memory = "16MiB",
                                           EngineStats* stats_out = nullptr) {
  std::string dir = temp_dir(tag);
  std::string cfg_path = write_config(
      dir, model_path, plan_toml(n_layers, stages, 1, inflight, 8, max_tokens), kv_memory);
  Config cfg = load_config(cfg_path);
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  Supervisor sup(cfg, mc, opt);
  sup.start();
  BridgeConfig bc = ring_bridge_config(cfg, mc, sup);
  bc.limits.policy = policy;
  std::vector<std::vector<int32_t>> out(reqs.size());
  {
    Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
    Collector col;
    for (size_t i = 0; i < reqs.size(); ++i) {
      GenRequest g;
      g.prompt = reqs[i].prompt;
      g.max_tokens = reqs[i].max_new;
      g.ignore_eos = true;
      g.sampling.temperature = temperature;
      if (temperature > 0) {  // seeded sampling: the same text whatever the plan
        g.sampling.top_p = 0.9f;
        g.sampling.seed = 1000 + i;
        g.sampling.has_seed = 1;
      }
      EXPECT_NE(engine.submit(g, col.sink(int(i))), 0u);
    }
    EXPECT_TRUE(col.wait_all(reqs.size(), 600));
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(col.finish[int(i)], FinishReason::kLength) << col.errors[int(i)];
      out[i] = col.tokens[int(i)];
    }
    if (stats_out) {  // blocks go back just after the last event: give it a moment
      for (int i = 0; i < 200 && engine.stats().blocks_free != engine.stats().blocks_total; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      *stats_out = engine.stats();
    }
    auto st = engine.ring_report().stages;
    for (size_t s = 0; s < st.size(); ++s) {
      EXPECT_GT(st[s].batches, 0u);
      EXPECT_EQ(st[s].refused, 0u);
    }
    engine.shutdown();
  }
  auto pids = sup.pids();
  sup.stop();
  EXPECT_FALSE(ipc::Segment::exists(sup.segment_name()));
  std::filesystem::remove_all(dir);
  return out;
}

std::vector<std::vector<int32_t>> run_reference(const std::string& model_path,
                                                const std::vector<Req>& reqs) {
  auto model = ModelFile::open(model_path);
  const int L = model->config().n_layers;
  const int32_t n_blocks = 64;
  int32_t max_tokens = 512;  // a prompt goes in whole
  for (const Req& r : reqs) max_tokens = std::max(max_tokens, int32_t(r.prompt.size()));
  SliceExecutor ex(*model, SliceSpec{0, L - 1, true, true}, KvSpec{n_blocks, 16, DType::F16}, 1,
                   max_tokens);
  std::vector<std::vector<int32_t>> out;
  for (const Req& r : reqs) out.push_back(reference_greedy(ex, n_blocks, r.prompt, r.max_new));
  return out;
}

void expect_equal(const std::vector<std::vector<int32_t>>& got,
                  const std::vector<std::vector<int32_t>>& want, int stages) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << stages << " stages, request " << i;
}

// A per-request seed makes sampled output reproducible across plans: the
// draw for a position depends on (seed, position) only, never on how many
// stages there are or which micro-batch carried the row.
TEST(RingE2E, SeededSamplingIsTheSameOnTwoAndFourStages) {
  std::string dir = temp_dir("seeded");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 4;
  write_tiny_gguf(model, spec);
  auto reqs = make_requests(16, spec.vocab, 40, 16, 11);
  auto two = run_ring(model, 4, 2, 0, reqs, 64, "seeded2", 0.9f);
  auto four = run_ring(model, 4, 4, 0, reqs, 64, "seeded4", 0.9f);
  auto greedy = run_ring(model, 4, 2, 0, reqs, 64, "seeded-greedy");
  expect_equal(four, two, 4);
  EXPECT_NE(two, greedy) << "temperature 0.9 should not reproduce greedy output";
  std::filesystem::remove_all(dir);
}

TEST(RingE2E, TinyModelTwoThreeFourStagesMatchLocalReference) {
  std::string dir = temp_dir("tiny");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 4;
  write_tiny_gguf(model, spec);
  auto reqs = make_requests(24, spec.vocab, 90, 12, 7);  // some prompts exceed max_tokens = 64
  auto want = run_reference(model, reqs);
  for (int stages : {2, 3, 4})
    expect_equal(run_ring(model, 4, stages, 0, reqs, 64, "tiny" + std::to_string(stages)), want,
                 stages);
  // The draining pipeline gives the same tokens.
  expect_equal(run_ring(model, 4, 2, 1, reqs, 64, "tiny-drain"), want, 2);
  std::filesystem::remove_all(dir);
}

// Qwen3 and the mixture-of-experts families through real 2-stage rings
// (GGUF files and a safetensors folder): greedy tokens equal the
// single-process executor's, token for token. Every token is routed on its
// own and each expert's rows are combined in expert order, so how the ring
// batches rows changes nothing.
TEST(RingE2E, Qwen3AndMoeModelsOnTwoStagesMatchLocalReference) {
  std::string dir = temp_dir("moe");
  auto spec_of = [](const char* arch, int experts, int used, int expert_ffn, int shared) {
    TinySpec s;
    s.arch = arch;
    s.layers = 4;
    s.experts = experts;
    s.experts_used = used;
    s.expert_ffn = expert_ffn;
    s.shared_ffn = shared;
    s.norm_topk = std::string(arch) != "qwen2moe";
    return s;
  };
  const struct {
    const char* name;
    TinySpec spec;
    bool folder;
  } cases[] = {{"qwen3", spec_of("qwen3", 0, 0, 0, 0), false},
               {"qwen3moe", spec_of("qwen3moe", 7, 3, 32, 0), true},
               {"qwen2moe", spec_of("qwen2moe", 5, 2, 24, 48), false},
               {"mixtral", spec_of("llama", 4, 2, 0, 0), false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string model = dir + "/" + c.name + (c.folder ? "" : ".gguf");
    if (c.folder)
      write_tiny_safetensors(model, c.spec);
    else
      write_tiny_gguf(model, c.spec);
    auto reqs = make_requests(10, c.spec.vocab, 40, 8, 17);
    expect_equal(run_ring(model, 4, 2, 0, reqs, 64, std::string("moe-") + c.name),
                 run_reference(model, reqs), 2);
  }
  std::filesystem::remove_all(dir);
}

// gpt-oss (tiny_family: MXFP4 experts, sinks, biases, YaRN, a window of 5
// on the even layers) through kvasird's default 2-stage plan: each stage
// holds a sliding and a global layer, the sliding ones in their own KV
// group whose blocks are freed as the window moves; prompts up to 40
// tokens, so the window slides within prefill chunks and decodes. Greedy
// tokens equal the single-process executor's (full KV, the window a mask).
TEST(RingE2E, GptOssTwoStagesMatchLocalReference) {
  std::string dir = temp_dir("gptoss");
  TinySpec spec = tiny_family("gpt-oss");
  spec.layers = 4;
  const std::string model = dir + "/gpt-oss.gguf";
  write_tiny_gguf(model, spec);
  auto reqs = make_requests(10, spec.vocab, 40, 8, 29);
  expect_equal(run_ring(model, 4, 2, 0, reqs, 64, "gptoss2"), run_reference(model, reqs), 2);
  std::filesystem::remove_all(dir);
}

// Every scheduling policy gives, for a mixed workload (short and long
// prompts, some longer than a micro-batch), exactly the greedy tokens of
// each request run alone. Two micro-batches in flight, so the balanced row
// cap and back-to-back chunks are exercised.
TEST(RingE2E, EveryPolicyMatchesRequestsRunAlone) {
  std::string dir = temp_dir("policies");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 4;
  write_tiny_gguf(model, spec);
  auto reqs = make_requests(12, spec.vocab, 90, 10, 23);
  auto want = run_reference(model, reqs);
  for (Policy p : {Policy::kNaive, Policy::kStatic, Policy::kContinuous, Policy::kChunked}) {
    SCOPED_TRACE(policy_name(p));
    EngineStats st;
    expect_equal(run_ring(model, 4, 2, 2, reqs, 64, std::string("pol-") + policy_name(p), 0.f, p,
                          "16MiB", &st),
                 want, 2);
    EXPECT_EQ(st.preemptions, 0);  // a roomy pool
    EXPECT_EQ(st.blocks_free, st.blocks_total);
  }
  std::filesystem::remove_all(dir);
}

// A KV pool far too small for the load (8 blocks per stage for 12
// concurrent requests): every request completes, the tokens are those of
// each request run alone, and preemptions happened.
TEST(RingE2E, TinyKvPoolPreemptsAndKeepsOutputs) {
  std::string dir = temp_dir("preempt");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 4;
  write_tiny_gguf(model, spec);
  // Each needs 3-5 of the 8 blocks by its end; admission sees only its prompt.
  auto reqs = make_requests(12, spec.vocab, 8, 1, 31);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt.resize(17 + (i % 5) * 4, int32_t(i % 7));
    reqs[i].max_new = 30 + int(i % 7);
  }
  auto want = run_reference(model, reqs);
  for (Policy p : {Policy::kContinuous, Policy::kChunked}) {
    SCOPED_TRACE(policy_name(p));
    EngineStats st;
    // 2 layers per stage, 2 KV heads of 16, f16: 4 KiB per 16-token block.
    expect_equal(run_ring(model, 4, 2, 2, reqs, 64, std::string("pre-") + policy_name(p), 0.f, p,
                          "32KiB", &st),
                 want, 2);
    EXPECT_LE(st.blocks_total, 8);
    EXPECT_GE(st.blocks_total, 5);
    EXPECT_GT(st.preemptions, 0);
    EXPECT_EQ(st.blocks_free, st.blocks_total);
  }
  std::filesystem::remove_all(dir);
}

TEST(RingE2E, DefaultModelTwoThreeFourStagesMatchLocalReference) {
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no default model (scripts/fetch-model)";
  auto reqs = make_requests(10, 49152, 24, 6, 11);
  auto want = run_reference(model, reqs);
  for (int stages : {2, 3, 4})
    expect_equal(run_ring(model, 30, stages, 0, reqs, 128, "smol" + std::to_string(stages)),
                 want, stages);
}

// Gemma 3 270M (when fetched: scripts/fetch-gemma3): interleaved sliding
// window (512) and global layers, split across 2 stages; one prompt longer
// than the window, so the masked band moves across chunked prefill
// micro-batches on both stages.
TEST(RingE2E, Gemma3TwoStagesMatchLocalReference) {
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no Gemma 3 file (scripts/fetch-gemma3)";
  const int layers = ModelFile::open(model)->config().n_layers;
  auto reqs = make_requests(4, 262144, 24, 8, 19);
  std::mt19937_64 rng(23);
  Req long_one;
  for (int j = 0; j < 600; ++j) long_one.prompt.push_back(int32_t(rng() % 262144));
  long_one.max_new = 6;
  reqs.push_back(long_one);
  auto want = run_reference(model, reqs);
  expect_equal(run_ring(model, layers, 2, 0, reqs, 128, "gemma2"), want, 2);
}

// Each stage maps only its slice: its layers, plus embeddings at the head and
// final norm + output head at the tail (a tied model's tail reads token_embd).
TEST(RingE2E, EachStageTouchesOnlyItsSlice) {
  std::string dir = temp_dir("slice");
  std::string path = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 6;
  write_tiny_gguf(path, spec);
  const int ranges[3][2] = {{0, 1}, {2, 3}, {4, 5}};
  for (int s = 0; s < 3; ++s) {
    auto model = ModelFile::open(path);
    SliceExecutor ex(*model, SliceSpec{ranges[s][0], ranges[s][1], s == 0, s == 2},
                     KvSpec{4, 16, DType::F16}, 1, 16);
    for (const std::string& name : model->touched()) {
      if (name.rfind("blk.", 0) == 0) {
        int layer = std::stoi(name.substr(4));
        EXPECT_TRUE(layer >= ranges[s][0] && layer <= ranges[s][1]) << "stage " << s << ": " << name;
      } else if (name.rfind("token_embd", 0) == 0) {
        EXPECT_EQ(s, 0) << name;
      } else {
        EXPECT_EQ(s, 2) << "stage " << s << ": " << name;
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// A stage that cannot start makes start() fail with that stage's own error.
TEST(RingE2E, StageFailingAtStartupReportsItsError) {
  std::string dir = temp_dir("fail");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 2;
  write_tiny_gguf(model, spec);
  Config cfg = load_config(write_config(dir, model, plan_toml(2, 2, 1, 0, 4, 32)));
  ModelConfig mc = check_config(cfg);
  cfg.kv.memory = 100;  // past the config check: holds no block on any stage
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  Supervisor sup(cfg, mc, opt);
  try {
    sup.start();
    ADD_FAILURE() << "start() succeeded";
  } catch (const kvasir::Error& e) {
    EXPECT_NE(e.message().find("stage "), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("holds no block"), std::string::npos) << e.message();
  }
  EXPECT_FALSE(ipc::Segment::exists(sup.segment_name()));
  std::filesystem::remove_all(dir);
}

// [[stages]] cpus: the stage process (all its threads) runs on the CPUs
// its entry lists, pinned by itself at start; a stage without runs where
// the daemon may. A list the kernel refuses later fails the stage by key.
TEST(RingE2E, EachStageRunsOnItsCpus) {
  std::string dir = temp_dir("cpus");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 2;
  write_tiny_gguf(model, spec);
  const std::vector<int> mine = allowed_cpus();
  const int last = mine.back();
  std::string plan = plan_toml(2, 2, 1, 0, 4, 32);
  plan.insert(plan.rfind("threads = 1") + 11, "\ncpus = \"" + std::to_string(last) + "\"");
  Config cfg = load_config(write_config(dir, model, plan));
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  {
    Supervisor sup(cfg, mc, opt);
    sup.start();
    const std::vector<pid_t> pids = sup.pids();
    ASSERT_EQ(pids.size(), 2u);
    auto allowed_of = [](pid_t pid) {
      std::ifstream f("/proc/" + std::to_string(pid) + "/status");
      for (std::string line; std::getline(f, line);)
        if (line.rfind("Cpus_allowed_list:", 0) == 0) {
          const size_t v = line.find_first_not_of(" \t", 18);
          return v == std::string::npos ? std::string() : line.substr(v);
        }
      return std::string("?");
    };
    EXPECT_EQ(allowed_of(pids[0]), format_cpu_list(mine));
    EXPECT_EQ(allowed_of(pids[1]), std::to_string(last));
    sup.stop();
  }
  // A CPU the config check allowed but the stage cannot have (gone since):
  // the stage fails at start with the key in its error.
  cfg.plan.stages[1].cpus = "8000";
  Supervisor bad(cfg, mc, opt);
  try {
    bad.start();
    ADD_FAILURE() << "start() succeeded";
  } catch (const kvasir::Error& e) {
    EXPECT_NE(e.message().find("stage 1 cpus"), std::string::npos) << e.message();
  }
  std::filesystem::remove_all(dir);
}

// Fail-stop mode (recovery.max_restarts = 0): a stage killed
// while serving fails every request with its error, the engine turns not
// ready. (With restarts, tests/integration/test_recovery.cpp.)
TEST(RingE2E, StageDeathFailsRequestsInFailStopMode) {
  std::string dir = temp_dir("death");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 2;
  write_tiny_gguf(model, spec);
  Config cfg = load_config(write_config(dir, model, plan_toml(2, 2, 1, 0, 4, 32)));
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  opt.recovery.max_restarts = 0;
  Supervisor sup(cfg, mc, opt);
  sup.start();
  BridgeConfig bc;
  bc.limits = SchedLimits{4, 32, 32, 256};
  bc.n_blocks = sup.kv_blocks();
  bc.sliding = SlidingKv{mc.sliding_window, sup.kv_blocks_swa()};
  bc.vocab = mc.vocab;
  Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
  ASSERT_EQ(signal_stage(sup.pids()[1], SIGKILL), 0);
  for (int i = 0; i < 200 && engine.ready(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(engine.ready());
  EXPECT_NE(engine.failure().find("stage 1"), std::string::npos) << engine.failure();
  Collector col;
  GenRequest g;
  g.prompt = {1, 2, 3};
  EXPECT_EQ(engine.submit(g, col.sink(0)), 0u);
  EXPECT_EQ(col.finish[0], FinishReason::kError);
  engine.shutdown();
  sup.stop();
  EXPECT_FALSE(ipc::Segment::exists(sup.segment_name()));
  std::filesystem::remove_all(dir);
}

// --- the daemon as a process ---------------------------------------------

bool gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(f, s);
  auto p = s.rfind(')');
  return p != std::string::npos && p + 2 < s.size() && s[p + 2] == 'Z';  // a zombie is gone
}

pid_t start_daemon(const std::string& cfg, const std::string& log) {
  pid_t pid = fork();
  if (pid < 0) std::abort();  // the callers signal it: never kill(-1, ...)
  if (pid == 0) {
    freopen(log.c_str(), "w", stderr);
    execl(kvasird_path().c_str(), "kvasird", "--config", cfg.c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

// Waits until every stage of the instance is ready; returns the stage pids.
std::vector<pid_t> wait_ready(const std::string& seg_name, int stages, pid_t daemon) {
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (waitpid(daemon, nullptr, WNOHANG) == daemon) return {};
    if (!ipc::Segment::exists(seg_name)) continue;
    try {
      auto seg = ipc::Segment::open(seg_name);
      // A stale segment of a killed daemon (ready stages and all) is not
      // this daemon's: under ASan the new one is slow to reclaim it, and a
      // SIGTERM sent on the stale "ready" hit it before its handlers.
      if (seg->header().owner_pid.load() != daemon) continue;
      std::vector<pid_t> pids;
      for (int s = 0; s < stages; ++s)
        if (seg->stage(s).status.load() == ipc::kStageReady) pids.push_back(seg->stage(s).pid);
      if (int(pids.size()) == stages) return pids;
    } catch (const kvasir::Error&) {
    }
  }
  return {};
}

bool wait_gone(const std::vector<pid_t>& pids, int ms) {
  for (int i = 0; i < ms / 10; ++i) {
    bool all = true;
    for (pid_t p : pids) all = all && gone(p);
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(RingE2E, NoLeftoversAfterStopAndAfterSigkillRestart) {
  std::string dir = temp_dir("life");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 3;
  write_tiny_gguf(model, spec);
  std::string cfg = write_config(dir, model, plan_toml(3, 3, 1, 0, 4, 32));
  std::string seg = ipc::Segment::name_for(dir + "/kvasir.sock");

  // Normal stop.
  pid_t d = start_daemon(cfg, dir + "/1.log");
  auto stages = wait_ready(seg, 3, d);
  ASSERT_EQ(stages.size(), 3u) << "daemon did not get ready; see " << dir << "/1.log";
  // A second daemon on the same instance refuses.
  pid_t d2 = start_daemon(cfg, dir + "/2.log");
  int st = 0;
  waitpid(d2, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  std::ifstream l2(dir + "/2.log");
  std::string log2((std::istreambuf_iterator<char>(l2)), {});
  EXPECT_NE(log2.find("already running"), std::string::npos) << log2;
  kill(d, SIGTERM);
  waitpid(d, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_TRUE(wait_gone(stages, 2000));
  EXPECT_FALSE(ipc::Segment::exists(seg));

  // SIGKILL: the stages die with the daemon; the segment stays, stale.
  d = start_daemon(cfg, dir + "/3.log");
  stages = wait_ready(seg, 3, d);
  ASSERT_EQ(stages.size(), 3u);
  kill(d, SIGKILL);
  waitpid(d, &st, 0);
  EXPECT_TRUE(wait_gone(stages, 5000)) << "stages outlived a killed daemon";
  EXPECT_TRUE(ipc::Segment::exists(seg));
  // Restart reclaims it, then stops cleanly.
  d = start_daemon(cfg, dir + "/4.log");
  stages = wait_ready(seg, 3, d);
  ASSERT_EQ(stages.size(), 3u) << "restart after SIGKILL failed; see " << dir << "/4.log";
  kill(d, SIGTERM);
  waitpid(d, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_TRUE(wait_gone(stages, 2000));
  EXPECT_FALSE(ipc::Segment::exists(seg));
  std::filesystem::remove_all(dir);
}

TEST(RingE2E, CheckModeValidatesAndRefuses) {
  std::string dir = temp_dir("check");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 2;
  write_tiny_gguf(model, spec);
  std::string good = write_config(dir, model, plan_toml(2, 2, 1, 0, 4, 32));
  std::string cmd = kvasird_path() + " --check --config " + good + " > /dev/null 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0);
  std::string bad = write_config(dir, model, plan_toml(2, 1, 1, 0, 4, 32));
  cmd = kvasird_path() + " --check --config " + bad + " 2>&1 | grep -q 'distinct roles'";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvasir::test
