// The bridge (Bridge) driving real stage agents in forked processes
// over real shared memory, with a fake forward pass whose output is known:
// the head embeds token t as h = t, each middle stage adds 1, the tail adds 1
// and puts all the mass on (h mod vocab). So with S stages every sampled
// token is (last input token + S - 1) mod vocab.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "daemon/engine/bridge.h"
#include "stages/agent.h"
#include "tests/integration/ring_fixture.h"

namespace kvasir {
namespace {

constexpr int32_t kVocab = 97, kHidden = 8;

void fake_forward(int stage, int S, const ForwardBatch& b, const float* in, float* out,
                  float* logits) {
  int64_t t = 0;
  int k = 0;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    for (int32_t i = 0; i < b.rows[r].n_tokens; ++i, ++t) {
      float h = stage == 0 ? float(b.tokens[t]) : in[t * kHidden] + 1.0f;
      if (stage < S - 1) {
        for (int c = 0; c < kHidden; ++c) out[t * kHidden + c] = c == 0 ? h : 0.f;
      } else if (b.rows[r].want_logits && i == b.rows[r].n_tokens - 1) {
        float* l = logits + int64_t(k++) * kVocab;
        for (int v = 0; v < kVocab; ++v) l[v] = 0.f;
        l[int64_t(h) % kVocab] = 10.f;
      }
    }
  }
}

// A stage that takes `g_slow_ms` on every batch carrying prefill (a row of
// more than one token): set before the Ring forks its stages. And one that
// takes `g_step_us` on every batch (0: none), so a test can act between two
// tokens of a request however loaded the machine is.
int g_slow_stage = -1, g_slow_ms = 0, g_step_us = 0;

struct Ring {
  std::string name;
  std::unique_ptr<ipc::Segment> seg;
  std::vector<pid_t> kids;

  Ring(int S, int inflight, int max_rows, int max_tokens, int blocks) {
    name = ipc::Segment::name_for("engine-test-" + std::to_string(getpid()));
    ipc::SegmentParams p;
    p.n_stages = S;
    p.dims = ipc::SlotDims{max_rows, max_tokens, 64, kHidden, inflight};
    p.block_size = 4;
    for (int s = 0; s < S; ++s) p.stages[s] = ipc::StagePlan{s, s, 1, "cpu"};
    seg = ipc::Segment::create(name, p);
    seg->header().kv_blocks = blocks;
    for (int s = 0; s < S; ++s) kids.push_back(spawn(s));
  }
  pid_t spawn(int s) {
    const int S = seg->n_stages();
    const int32_t blocks = seg->header().kv_blocks.load();
    pid_t pid = fork();
    if (pid < 0) std::abort();  // a -1 in kids would make kill(victim) kill(-1, ...)
    if (pid == 0) {
      auto mine = ipc::Segment::open(name);
      // What runs the kernels: before the first batch the capability only,
      // from then on a kernel chosen too (as the CPU stages' summary grows).
      auto kernels = [s, calls = 0]() mutable {
        return std::string("cpu:avx2 amx:no") +
               (calls++ == 0 ? "" : " q4_1/decode:avx2 s" + std::to_string(s));
      };
      AgentConfig ac{s, kVocab, blocks, nullptr, false, kernels};
      int rc =
          run_agent(*mine, ac, [&](const ForwardBatch& b, const float* in, float* out, float* lg) {
            fake_forward(s, S, b, in, out, lg);
            bool prefill = false;
            for (int32_t r = 0; r < b.n_rows; ++r) prefill |= b.rows[r].n_tokens > 1;
            if (s == g_slow_stage && prefill)
              std::this_thread::sleep_for(std::chrono::milliseconds(g_slow_ms));
            if (g_step_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(g_step_us));
          });
      _exit(rc);
    }
    return pid;
  }
  ~Ring() {
    seg->request_shutdown();
    for (pid_t k : kids) {
      int st = 0;
      waitpid(k, &st, 0);
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    ipc::Segment::remove(name);
  }
};

using test::Collector;  // the ring fixture's (tests/integration/ring_fixture.h)

BridgeConfig bridge_cfg(int max_rows, int max_tokens, int blocks) {
  BridgeConfig c;
  c.limits = SchedLimits{max_rows, max_tokens, max_tokens, 256};
  c.n_blocks = blocks;
  c.block_size = 4;
  c.vocab = kVocab;
  c.eos_ids = {};
  return c;
}

void run_many(int S, int inflight) {
  Ring ring(S, inflight, 4, 32, 200);
  Bridge engine(*ring.seg, bridge_cfg(4, 32, 200));
  Collector col;
  constexpr int N = 40;
  for (int i = 0; i < N; ++i) {
    GenRequest r;
    for (int j = 0; j <= i % 13; ++j) r.prompt.push_back((i * 7 + j) % kVocab);
    if (i % 5 == 0) r.prompt.resize(40, 3);  // longer than max_tokens: chunked
    r.max_tokens = 1 + i % 9;
    r.sampling.temperature = 0;
    ASSERT_NE(engine.submit(r, col.sink(i)), 0u);
  }
  ASSERT_TRUE(col.wait_all(N));
  for (int i = 0; i < N; ++i) {
    int32_t last = i % 5 == 0 ? 3 : (i * 7 + i % 13) % kVocab;
    ASSERT_EQ(col.finish[i], FinishReason::kLength) << i << " " << col.errors[i];
    ASSERT_EQ(int(col.tokens[i].size()), 1 + i % 9);
    for (int32_t t : col.tokens[i]) {
      last = (last + S - 1) % kVocab;
      EXPECT_EQ(t, last) << "request " << i;
    }
  }
  // All blocks back, every stage worked, nothing refused.
  for (int tries = 0; tries < 100 && engine.stats().blocks_free != 200; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine.stats().blocks_free, 200);
  EXPECT_EQ(engine.stats().running, 0);
  for (auto& s : engine.ring_report().stages) {
    EXPECT_GT(s.batches, 0u);
    EXPECT_EQ(s.refused, 0u);
    // The text each stage published after its batches, read from the segment.
    EXPECT_EQ(s.simd, "cpu:avx2 amx:no q4_1/decode:avx2 s" + std::to_string(s.index));
    // Every batch's handoff into the stage was timed (its producer stamped
    // the message), and a handoff is a wake-up, not a wait behind a batch.
    EXPECT_EQ(s.handoffs, s.batches);
    EXPECT_GT(s.handoff_s, 0.0);
    EXPECT_LT(s.handoff_s / double(s.handoffs), 0.5);
  }
  const RingReport ring_now = engine.ring_report();
  EXPECT_EQ(ring_now.returns, ring_now.stages.back().batches);
  // Idle: nothing in the ring, whatever it may hold.
  EXPECT_EQ(ring_now.in_ring, 0);
  EXPECT_EQ(ring_now.inflight, inflight);
  EXPECT_GT(ring_now.return_s, 0.0);
  EXPECT_EQ(engine.refused_results(), 0u);
}

TEST(Bridge, TwoStagesInflight2) {
  run_many(2, 2);
}
TEST(Bridge, ThreeStagesInflight3) {
  run_many(3, 3);
}
TEST(Bridge, FourStagesDraining) {
  run_many(4, 1);
}

TEST(Bridge, RefusesBadRequestsAtOnce) {
  Ring ring(2, 2, 4, 32, 10);
  Bridge engine(*ring.seg, bridge_cfg(4, 32, 10));
  Collector col;
  GenRequest bad;
  bad.prompt = {1, kVocab};
  EXPECT_EQ(engine.submit(bad, col.sink(0)), 0u);
  EXPECT_EQ(col.finish[0], FinishReason::kError);
  EXPECT_NE(col.errors[0].find("prompt[1]"), std::string::npos) << col.errors[0];
  GenRequest huge;
  huge.prompt.assign(30, 1);
  huge.max_tokens = 20;  // 50 tokens = 13 blocks > 10
  EXPECT_EQ(engine.submit(huge, col.sink(1)), 0u);
  EXPECT_NE(col.errors[1].find("KV blocks"), std::string::npos) << col.errors[1];
  GenRequest empty;
  EXPECT_EQ(engine.submit(empty, col.sink(2)), 0u);
  EXPECT_EQ(col.finish[2], FinishReason::kError);
}

TEST(Bridge, StopIdsAndCancel) {
  // 2 ms a step: the 200 tokens below take >= 0.4 s. Without it the fake
  // ring produced all of them before a descheduled test thread could
  // cancel (a CI run on a loaded machine ended it with kLength).
  g_step_us = 2000;
  Ring ring(2, 2, 4, 32, 100);
  g_step_us = 0;
  Bridge engine(*ring.seg, bridge_cfg(4, 32, 100));
  Collector col;
  GenRequest r;
  r.prompt = {5};
  r.max_tokens = 50;
  r.sampling.temperature = 0;
  r.stop_ids = {8};  // 5 -> 6 -> 7 -> 8
  engine.submit(r, col.sink(0));
  ASSERT_TRUE(col.wait_all(1));
  EXPECT_EQ(col.finish[0], FinishReason::kStop);
  EXPECT_EQ(col.tokens[0], (std::vector<int32_t>{6, 7, 8}));
  GenRequest longr;
  longr.prompt = {1};
  longr.max_tokens = 200;
  longr.sampling.temperature = 0;
  auto id = engine.submit(longr, col.sink(1));
  // Cancel once it is generating (a fixed sleep raced the fake ring, which
  // can produce all 200 tokens in a few milliseconds).
  for (int i = 0; i < 10000; ++i) {
    {
      std::lock_guard lk(col.mu);
      if (!col.tokens[1].empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  engine.cancel(id);
  ASSERT_TRUE(col.wait_all(2));
  EXPECT_EQ(col.finish[1], FinishReason::kAbort);
  for (int tries = 0; tries < 100 && engine.stats().blocks_free != 100; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine.stats().blocks_free, 100);
}

// A stage process killed mid-run. The health hook plays the supervisor
// (reap, count what the dead one held as passed, start a fresh agent); the
// bridge must start a new epoch, requeue every running sequence and finish
// every request with exactly the tokens of a fault-free run: any gap or
// duplicate breaks the fake ring's arithmetic sequence.
TEST(Bridge, LostStageIsReplacedAndNoTokenIsLostOrRepeated) {
  constexpr int S = 3, N = 24;
  Ring ring(S, 3, 4, 32, 400);
  RingHealth h;
  Bridge engine(*ring.seg, bridge_cfg(4, 32, 400), [&] {
    for (int s = 0; s < S; ++s) {
      int st = 0;
      if (ring.kids[s] > 0 && waitpid(ring.kids[s], &st, WNOHANG) == ring.kids[s]) {
        ring.seg->stage(s).passed.store(ring.seg->ring(s).tail.load());
        h.faults++;
        h.serving = false;
        ring.kids[s] = -1;
      }
      // Like the supervisor: a replacement only once the bridge has started
      // the new epoch (it must never serve a batch of the dead one).
      if (ring.kids[s] < 0 && ring.seg->header().epoch.load() >= h.faults) {
        ring.kids[s] = ring.spawn(s);
        h.restarts++;
        h.serving = true;
      }
    }
    return h;
  });
  Collector col;
  for (int i = 0; i < N; ++i) {
    GenRequest r;
    for (int j = 0; j <= i % 11; ++j) r.prompt.push_back((i * 5 + j) % kVocab);
    r.max_tokens = 150 + i;
    r.sampling.temperature = 0;
    ASSERT_NE(engine.submit(r, col.sink(i)), 0u);
  }
  for (int i = 0; i < 20000 && engine.stats().tokens_generated < 600; ++i)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  const pid_t victim = ring.kids[1];
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(col.wait_all(N));
  for (int i = 0; i < N; ++i) {
    ASSERT_EQ(col.finish[i], FinishReason::kLength) << i << " " << col.errors[i];
    ASSERT_EQ(int(col.tokens[i].size()), 150 + i);
    int32_t last = (i * 5 + i % 11) % kVocab;
    for (int32_t t : col.tokens[i]) {
      last = (last + S - 1) % kVocab;
      ASSERT_EQ(t, last) << "request " << i;
    }
  }
  for (int tries = 0; tries < 100 && engine.stats().blocks_free != 400; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EngineStats st = engine.stats();
  EXPECT_EQ(st.blocks_free, 400);
  EXPECT_EQ(st.faults, 1);
  EXPECT_EQ(st.state, EngineState::kOk);
  EXPECT_GT(st.requeued, 0);
  EXPECT_EQ(engine.refused_results(), 0u);
  engine.shutdown();
  // The dead one was reaped by the hook; the destructor waits for the rest.
}

// Accounting true at every instant: while stage 1 holds one batch for
// seconds (5), reports every 0.5 s show it busy ~100% of each interval and the
// head starved (nothing else to do), each stage's shares summing to the
// interval; and the result carries each stage's busy time on the batch,
// which the cost model is fitted from.
TEST(Bridge, LongBatchIsAccountedWhileItRuns) {
  g_slow_stage = 1;
  g_slow_ms = 5000;
  Ring ring(2, 1, 4, 32, 100);
  g_slow_stage = -1;
  Bridge engine(*ring.seg, bridge_cfg(4, 32, 100));
  Collector col;
  GenRequest r;
  r.prompt.assign(10, 3);
  r.max_tokens = 2;
  r.sampling.temperature = 0;
  ASSERT_NE(engine.submit(r, col.sink(0)), 0u);
  auto state = [&](int s) { return engine.ring_report().stages[size_t(s)].state; };
  for (int i = 0; i < 2000 && state(1) != "busy"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(state(1), "busy");
  RingReport prev = engine.ring_report();
  auto t_prev = std::chrono::steady_clock::now();
  int checked = 0;
  for (int k = 0; k < 6; ++k) {  // up to 3 s of the 5 s batch
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const RingReport now = engine.ring_report();
    const auto t_now = std::chrono::steady_clock::now();
    if (now.stages[1].state != "busy") break;  // the batch ended inside this interval
    const double wall = std::chrono::duration<double>(t_now - t_prev).count();
    for (int s = 0; s < 2; ++s) {
      const StageReport &a = prev.stages[size_t(s)], &b = now.stages[size_t(s)];
      const double busy = b.busy_s - a.busy_s, starved = b.starved_s - a.starved_s,
                   blocked = b.blocked_s - a.blocked_s;
      const double total = busy + starved + blocked;
      // The shares partition the interval (read within the report call).
      EXPECT_NEAR(total, wall, 0.02 * wall + 0.01) << "stage " << s << " interval " << k;
      const double holding = s == 1 ? busy : starved + blocked;  // the head has nothing to do
      EXPECT_GE(holding / total, 0.98) << "stage " << s << " interval " << k;
    }
    EXPECT_GT(now.stages[1].state_s, prev.stages[1].state_s);
    prev = now;
    t_prev = t_now;
    checked++;
  }
  EXPECT_GE(checked, 2);
  ASSERT_TRUE(col.wait_all(1));
  ASSERT_EQ(col.finish[0], FinishReason::kLength);
  // The prefill batch's stage times came back with it: stage 1's ~5 s is
  // what the cost model saw (its mean over the batches so far).
  for (int tries = 0; tries < 100 && engine.stats().timing.batches < 2; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const RingReport rep = engine.ring_report();
  EXPECT_EQ(engine.stats().timing.batches, 2);
  EXPECT_EQ(engine.stats().timing.prefill_batches, 1);
  EXPECT_EQ(rep.stages[1].cost.samples, 2);
  EXPECT_GT(rep.stages[1].cost.mean_busy_ms, 1000.0);
  EXPECT_LT(rep.stages[0].cost.mean_busy_ms, 1000.0);
}

TEST(Bridge, BogusResultIsRefused) {
  Ring ring(2, 2, 4, 32, 100);
  Bridge engine(*ring.seg, bridge_cfg(4, 32, 100));
  ipc::BatchMsg m;
  m.batch_id = 12345;
  m.slot = 1;
  m.n_rows = 1;
  m.n_tokens = 1;
  ASSERT_TRUE(ring.seg->ring(2).try_push(m));
  for (int i = 0; i < 100 && engine.refused_results() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine.refused_results(), 1u);
  EXPECT_TRUE(engine.ready());
}

}  // namespace
}  // namespace kvasir
