// Stage crash recovery (docs/recovery.md), end to end: real stage processes
// (kvasird --stage N) on a 3-stage plan under load, one stage killed
// mid-run — SIGKILL (a crash) or SIGSTOP (a hang, which the watchdog must
// find and kill) — at the head, the middle and the tail. Every request must
// finish normally with exactly the greedy tokens of a fault-free reference
// (no gap, no duplicate), every KV block must come back, and the time from
// the fault to a serving ring is printed ("recovery:" lines, for the doc).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "ring_fixture.h"
#include "tests/support/tiny_model.h"

namespace kvasir::test {
namespace {

struct Req {
  std::vector<int32_t> prompt;
  int max_new;
};

std::vector<Req> make_requests(int n, int vocab, int max_prompt, int min_new, int max_new,
                               uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Req> v;
  for (int i = 0; i < n; ++i) {
    Req r;
    int len = 1 + int(rng() % uint64_t(max_prompt));
    for (int j = 0; j < len; ++j) r.prompt.push_back(int32_t(rng() % uint64_t(vocab)));
    r.max_new = min_new + int(rng() % uint64_t(max_new - min_new + 1));
    v.push_back(std::move(r));
  }
  return v;
}

std::vector<std::vector<int32_t>> reference(const std::string& model_path,
                                            const std::vector<Req>& reqs) {
  auto model = ModelFile::open(model_path);
  const int L = model->config().n_layers;
  int need = 1;
  for (const Req& r : reqs)
    need = std::max(need, int(r.prompt.size() + size_t(r.max_new) + 15) / 16);
  SliceExecutor ex(*model, SliceSpec{0, L - 1, true, true}, KvSpec{need, 16, DType::F16}, 1, 512);
  std::vector<std::vector<int32_t>> out;
  for (const Req& r : reqs) out.push_back(reference_greedy(ex, need, r.prompt, r.max_new));
  return out;
}

struct Fault {
  int stage = -1;  // -1: none
  int sig = SIGKILL;
  int kills = 1;  // how many times (each after the previous recovery)
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<FinishReason> finish;
  std::vector<std::string> errors;
  EngineStats stats;
  std::vector<double> recover_s;  // fault → ring serving again (wall clock, per fault)
  // Prefix caching: cached blocks just before the (first) fault, and while
  // the engine was recovering from it (-1: never seen recovering).
  int64_t cached_before_fault = 0, cached_while_recovering = -1;
};

Outcome run(const std::string& model_path, int n_layers, const std::vector<Req>& reqs,
            const Fault& fault, const std::string& tag, RecoveryOptions rec = {},
            bool caching = false) {
  std::string dir = temp_dir("recovery-" + tag);
  // Three micro-batches in flight, written out (three 1-thread stages on
  // fewer cores would default to one): a loss finds batches in every stage.
  Config cfg =
      load_config(write_config(dir, model_path, plan_toml(n_layers, 3, 1, 3, 8, 64), "16MiB"));
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  opt.recovery = rec;
  Supervisor sup(cfg, mc, opt);
  sup.start();
  BridgeConfig bc = ring_bridge_config(cfg, mc, sup);
  bc.limits.prefix_caching = caching;
  Outcome o;
  {
    Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
    Collector col;
    int64_t total = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      GenRequest g;
      g.prompt = reqs[i].prompt;
      g.max_tokens = reqs[i].max_new;
      g.ignore_eos = true;
      g.sampling.temperature = 0;
      total += reqs[i].max_new;
      EXPECT_NE(engine.submit(g, col.sink(int(i))), 0u);
    }
    for (int k = 0; k < fault.kills && fault.stage >= 0; ++k) {
      // Mid-run: a share of the tokens out, most still to come.
      const int64_t at = total * (k + 1) / (2 * fault.kills + 2);
      for (int i = 0; i < 60000 && engine.stats().tokens_generated < at; ++i)
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      const pid_t victim = sup.pids()[size_t(fault.stage)];
      if (k == 0) o.cached_before_fault = engine.stats().blocks_cached;
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(signal_stage(victim, fault.sig), 0) << "stage " << fault.stage << " pid " << victim;
      // Recovered: the loss counted, every stage serving, the bridge back to "ok".
      bool back = false;
      for (int i = 0; i < 120000 && !back; ++i) {
        EngineStats st = engine.stats();
        if (k == 0 && o.cached_while_recovering < 0 && st.state == EngineState::kRecovering)
          o.cached_while_recovering = st.blocks_cached;
        back = st.faults >= k + 1 && st.state == EngineState::kOk;
        if (st.state == EngineState::kFailed) break;
        if (!back) std::this_thread::sleep_for(std::chrono::microseconds(250));
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_TRUE(back) << "no recovery within 30 s: " << engine.stats().failure;
      o.recover_s.push_back(s);
      EXPECT_NE(sup.pids()[size_t(fault.stage)], victim) << "the stage was not restarted";
      std::printf("recovery: %s stage %d signal %d, fault %d: %.3f s (engine: %.3f s)\n",
                  tag.c_str(), fault.stage, fault.sig, k + 1, s, engine.stats().last_recovery_s);
    }
    const bool recovered =
        std::all_of(o.recover_s.begin(), o.recover_s.end(), [](double s) { return s < 30; });
    EXPECT_TRUE(col.wait_all(reqs.size(), recovered ? 300 : 5)) << "requests hang";
    // Blocks go back just after the last event: give them a moment.
    for (int i = 0; i < 300 && engine.stats().blocks_free != engine.stats().blocks_total; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    o.stats = engine.stats();
    std::lock_guard lk(col.mu);
    for (size_t i = 0; i < reqs.size(); ++i) {
      o.tokens.push_back(col.tokens[int(i)]);
      o.finish.push_back(col.finish.count(int(i)) ? col.finish[int(i)] : FinishReason::kNone);
      o.errors.push_back(col.errors[int(i)]);
    }
    engine.shutdown();
  }
  sup.stop();
  EXPECT_FALSE(ipc::Segment::exists(sup.segment_name()));
  std::filesystem::remove_all(dir);
  return o;
}

void expect_intact(const Outcome& o, const std::vector<std::vector<int32_t>>& want, int faults) {
  ASSERT_EQ(o.tokens.size(), want.size());
  int lost = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(o.finish[i], FinishReason::kLength) << "request " << i << ": " << o.errors[i];
    EXPECT_EQ(o.tokens[i], want[i]) << "request " << i;
    lost += o.finish[i] != FinishReason::kLength || o.tokens[i] != want[i];
  }
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(o.stats.faults, faults);
  EXPECT_EQ(o.stats.restarts, faults);
  EXPECT_EQ(o.stats.blocks_free, o.stats.blocks_total) << "leaked KV blocks";
  EXPECT_EQ(o.stats.running, 0);
  EXPECT_EQ(o.stats.state, EngineState::kOk);
  if (faults > 0) {
    EXPECT_GT(o.stats.requeued, 0);
  }
  std::printf("recovery: %d requests, %d lost, %lld requeued, %lld of %lld blocks free\n",
              int(want.size()), lost, (long long)o.stats.requeued, (long long)o.stats.blocks_free,
              (long long)o.stats.blocks_total);
}

class Recovery : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("recovery-model"));
    model_ = new std::string(*dir_ + "/tiny.gguf");
    TinySpec spec;
    spec.layers = 6;
    spec.hidden = 128;
    spec.ffn = 256;
    write_tiny_gguf(*model_, spec);
    reqs_ = new std::vector<Req>(make_requests(16, spec.vocab, 60, 60, 120, 5));
    want_ = new std::vector<std::vector<int32_t>>(reference(*model_, *reqs_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete model_;
    delete reqs_;
    delete want_;
  }
  static RecoveryOptions fast_watchdog() {
    RecoveryOptions r;
    r.watchdog_floor_s = 1;  // tiny-model batches take milliseconds
    return r;
  }
  static std::string* dir_;
  static std::string* model_;
  static std::vector<Req>* reqs_;
  static std::vector<std::vector<int32_t>>* want_;
};
std::string* Recovery::dir_ = nullptr;
std::string* Recovery::model_ = nullptr;
std::vector<Req>* Recovery::reqs_ = nullptr;
std::vector<std::vector<int32_t>>* Recovery::want_ = nullptr;

// The same run without a fault gives the reference (the baseline the fault
// runs are held to is the ring's own fault-free output).
TEST_F(Recovery, FaultFreeRunMatchesReference) {
  expect_intact(run(*model_, 6, *reqs_, Fault{}, "none"), *want_, 0);
}

TEST_F(Recovery, SigkillHead) {
  expect_intact(run(*model_, 6, *reqs_, Fault{0, SIGKILL}, "kill0", fast_watchdog()), *want_, 1);
}
TEST_F(Recovery, SigkillMiddle) {
  expect_intact(run(*model_, 6, *reqs_, Fault{1, SIGKILL}, "kill1", fast_watchdog()), *want_, 1);
}
TEST_F(Recovery, SigkillTail) {
  expect_intact(run(*model_, 6, *reqs_, Fault{2, SIGKILL}, "kill2", fast_watchdog()), *want_, 1);
}
// A stopped stage is a hang: nothing dies, the watchdog must notice the
// batch it holds (or the ones queued for it) and kill it.
TEST_F(Recovery, SigstopHead) {
  expect_intact(run(*model_, 6, *reqs_, Fault{0, SIGSTOP}, "stop0", fast_watchdog()), *want_, 1);
}
TEST_F(Recovery, SigstopMiddle) {
  expect_intact(run(*model_, 6, *reqs_, Fault{1, SIGSTOP}, "stop1", fast_watchdog()), *want_, 1);
}
TEST_F(Recovery, SigstopTail) {
  expect_intact(run(*model_, 6, *reqs_, Fault{2, SIGSTOP}, "stop2", fast_watchdog()), *want_, 1);
}
// Three losses in a row, within the per-minute limit: still nothing lost.
TEST_F(Recovery, RepeatedKillsWithinTheLimit) {
  expect_intact(run(*model_, 6, *reqs_, Fault{1, SIGKILL, 3}, "kill-x3", fast_watchdog()), *want_,
                3);
}

// Prefix caching: 16 requests sharing a 40-token system prompt (and some a
// longer part of one another's prompt), the middle stage killed while the
// shared blocks are in use. Every text equals the fault-free reference; the
// cache held blocks before the loss and held none from the new epoch on
// (a restarted stage's KV is empty: nothing of the old epoch is reused).
TEST_F(Recovery, SigkillWhileCachedPrefixesAreInUse) {
  std::mt19937_64 rng(8);
  std::vector<int32_t> system;
  for (int i = 0; i < 40; ++i) system.push_back(int32_t(rng() % 256));
  std::vector<Req> reqs = make_requests(16, 256, 30, 60, 120, 9);
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> p = system;
    if (i % 4 == 3) p.insert(p.end(), reqs[i - 1].prompt.begin(), reqs[i - 1].prompt.end());
    p.insert(p.end(), reqs[i].prompt.begin(), reqs[i].prompt.end());
    reqs[i].prompt = std::move(p);
  }
  const auto want = reference(*model_, reqs);
  const Outcome clean = run(*model_, 6, reqs, Fault{}, "cache-none", {}, true);
  expect_intact(clean, want, 0);
  EXPECT_GT(clean.stats.prefix_hits, 15 * 32);
  const Outcome o = run(*model_, 6, reqs, Fault{1, SIGKILL}, "cache-kill1", fast_watchdog(), true);
  expect_intact(o, want, 1);
  EXPECT_GT(o.cached_before_fault, 0);
  EXPECT_EQ(o.cached_while_recovering, 0) << "cached blocks survived the epoch";
  EXPECT_EQ(o.stats.prefix_resets, 1);
  std::printf("recovery: prefix cache %lld blocks before the loss, %lld while recovering\n",
              (long long)o.cached_before_fault, (long long)o.cached_while_recovering);
}

// Past the restart limit the supervisor gives up: every request ends with
// a clear error, the engine is not ready, and new work is refused.
TEST_F(Recovery, PastTheLimitTheEngineFailsAndRefuses) {
  std::string dir = temp_dir("recovery-limit");
  Config cfg = load_config(write_config(dir, *model_, plan_toml(6, 3, 1, 0, 8, 64), "16MiB"));
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  opt.recovery.max_restarts = 1;
  Supervisor sup(cfg, mc, opt);
  sup.start();
  BridgeConfig bc;
  bc.limits = SchedLimits{8, 64, 64, 256};
  bc.n_blocks = sup.kv_blocks();
  bc.sliding = SlidingKv{mc.sliding_window, sup.kv_blocks_swa()};
  bc.vocab = mc.vocab;
  Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
  pid_t first = sup.pids()[1];
  ASSERT_EQ(signal_stage(first, SIGKILL), 0);
  // Back: the restart counted and the ring serving again. The pid alone
  // would not do: it reads -1 between the reaping and the new process.
  auto restarted = [&] {
    const EngineStats st = engine.stats();
    const pid_t now = sup.pids()[1];
    return now > 0 && now != first && st.restarts == 1 && st.state == EngineState::kOk;
  };
  for (int i = 0; i < 3000 && !restarted(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(restarted()) << "restarts " << engine.stats().restarts << ", pid " << sup.pids()[1];
  EXPECT_TRUE(engine.ready());
  ASSERT_EQ(signal_stage(sup.pids()[1], SIGKILL), 0);
  for (int i = 0; i < 300 && engine.ready(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(engine.ready());
  EngineStats st = engine.stats();
  EXPECT_EQ(st.state, EngineState::kFailed);
  EXPECT_NE(st.failure.find("unhealthy"), std::string::npos) << st.failure;
  Collector col;
  GenRequest g;
  g.prompt = {1, 2, 3};
  EXPECT_EQ(engine.submit(g, col.sink(0)), 0u);
  EXPECT_EQ(col.finish[0], FinishReason::kError);
  EXPECT_NE(col.errors[0].find("unhealthy"), std::string::npos) << col.errors[0];
  engine.shutdown();
  sup.stop();
  std::filesystem::remove_all(dir);
}

// The default model (when fetched): the middle stage killed under load.
TEST(RecoveryDefaultModel, SigkillMiddle) {
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no default model (scripts/fetch-model)";
  auto reqs = make_requests(6, 49152, 24, 12, 24, 17);
  auto want = reference(model, reqs);
  expect_intact(run(model, 30, reqs, Fault{1, SIGKILL}, "smol-kill1"), want, 1);
}

}  // namespace
}  // namespace kvasir::test
