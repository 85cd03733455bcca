// Prefix caching and parallel sampling end to end: real stage processes
// (kvasird --stage N) under an in-process Supervisor and Bridge, on 2- and
// 3-stage CPU plans. Greedy outputs with caching on equal, token for token,
// those with caching off and a single-process reference, for prompts that
// share prefixes of different lengths (block-aligned and not, shorter and
// longer than a micro-batch), sent in two waves so that both hits on
// blocks whose batch is back and hits inside the ring (same batch, or a
// batch still in flight) happen. And n = 4: each choice equals the request
// sent alone with seed + i.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "ring_fixture.h"
#include "tests/support/tiny_model.h"

namespace kvasir::test {
namespace {

struct Req {
  std::vector<int32_t> prompt;
  int max_new = 8;
  int n = 1;
  float temperature = 0;
  uint64_t seed = 0;
  int wave = 0;  // wave 1 is sent once wave 0 has finished
};

// (request, choice) → its tokens.
using Outputs = std::map<std::pair<int, int>, std::vector<int32_t>>;

struct Gather {
  std::mutex mu;
  std::condition_variable cv;
  Outputs tokens;
  std::map<std::pair<int, int>, FinishReason> finish;
  std::map<int, int32_t> cached;  // request → cached_tokens of choice 0
  EventSink sink(int key) {
    return [this, key](const TokenEvent& ev) {
      std::lock_guard lk(mu);
      if (ev.token >= 0) tokens[{key, ev.index}].push_back(ev.token);
      if (ev.index == 0) cached[key] = ev.cached_tokens;
      if (ev.finish != FinishReason::kNone) {
        finish[{key, ev.index}] = ev.finish;
        cv.notify_all();
      }
    };
  }
  bool wait(size_t n, int seconds) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(seconds), [&] { return finish.size() >= n; });
  }
};

struct RunResult {
  Outputs out;
  std::map<int, int32_t> cached;
  EngineStats stats;
};

GenRequest gen(const Req& r) {
  GenRequest g;
  g.prompt = r.prompt;
  g.max_tokens = r.max_new;
  g.ignore_eos = true;
  g.n = r.n;
  g.sampling.temperature = r.temperature;
  if (r.temperature > 0) {
    g.sampling.top_p = 0.9f;
    g.sampling.seed = r.seed;
    g.sampling.has_seed = 1;
  }
  return g;
}

RunResult run_ring(const std::string& model_path, int n_layers, int stages, bool caching,
                   const std::vector<Req>& reqs, const std::string& tag, int max_tokens = 64) {
  std::string dir = temp_dir("prefix-" + tag);
  Config cfg = load_config(
      write_config(dir, model_path, plan_toml(n_layers, stages, 1, 0, 8, max_tokens), "16MiB"));
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  Supervisor sup(cfg, mc, opt);
  sup.start();
  BridgeConfig bc = ring_bridge_config(cfg, mc, sup);
  bc.limits.prefix_caching = caching;
  RunResult res;
  {
    Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
    Gather g;
    size_t expected = 0;
    for (int wave : {0, 1}) {
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i].wave != wave) continue;
        EXPECT_NE(engine.submit(gen(reqs[i]), g.sink(int(i))), 0u);
        expected += size_t(reqs[i].n);
      }
      EXPECT_TRUE(g.wait(expected, 600)) << tag << " wave " << wave;
    }
    for (auto& [k, f] : g.finish) EXPECT_EQ(f, FinishReason::kLength) << tag;
    // Blocks go back just after the last event: give them a moment.
    for (int i = 0; i < 300 && engine.stats().blocks_free != engine.stats().blocks_total; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    res.stats = engine.stats();
    std::lock_guard lk(g.mu);
    res.out = g.tokens;
    res.cached = g.cached;
    engine.shutdown();
  }
  sup.stop();
  EXPECT_FALSE(ipc::Segment::exists(sup.segment_name()));
  std::filesystem::remove_all(dir);
  return res;
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int n, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(rng() % uint64_t(vocab)));
  return t;
}
std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
std::vector<int32_t> head(const std::vector<int32_t>& a, int n) {
  return std::vector<int32_t>(a.begin(), a.begin() + n);
}

// Two shared beginnings (70 and 150 tokens: the second longer than a
// micro-batch of 64) and requests that reuse 15, 16, 20, 32, 47, 48, 64 or
// all of them, with and without a suffix of their own; some in wave 0 with
// their owner (hits inside the ring), the rest in wave 1 (hits on blocks
// whose batches are back).
std::vector<Req> shared_prefix_requests(int vocab) {
  std::mt19937_64 rng(99);
  const std::vector<int32_t> a = random_tokens(rng, 70, vocab);
  const std::vector<int32_t> b = random_tokens(rng, 150, vocab);
  std::vector<Req> v;
  auto add = [&](std::vector<int32_t> p, int wave) {
    Req r;
    r.prompt = std::move(p);
    r.max_new = 4 + int(v.size() % 5);
    r.wave = wave;
    v.push_back(std::move(r));
  };
  add(a, 0);
  add(b, 0);
  add(cat(head(a, 40), random_tokens(rng, 9, vocab)), 0);
  add(a, 0);  // a duplicate, at once
  for (int len : {15, 16, 20, 32, 47, 48, 64})
    add(cat(head(a, len), random_tokens(rng, 1 + len % 7, vocab)), 1);
  add(head(a, 32), 1);  // block-aligned and nothing else: its last token is computed
  add(a, 1);
  for (int len : {17, 64, 100, 128, 149})
    add(cat(head(b, len), random_tokens(rng, 3 + len % 11, vocab)), 1);
  add(b, 1);
  return v;
}

std::vector<std::vector<int32_t>> reference(const std::string& model_path,
                                            const std::vector<Req>& reqs) {
  auto model = ModelFile::open(model_path);
  const int L = model->config().n_layers;
  const int32_t n_blocks = 64;
  SliceExecutor ex(*model, SliceSpec{0, L - 1, true, true}, KvSpec{n_blocks, 16, DType::F16}, 1,
                   512);
  std::vector<std::vector<int32_t>> out;
  for (const Req& r : reqs) out.push_back(reference_greedy(ex, n_blocks, r.prompt, r.max_new));
  return out;
}

TEST(PrefixE2E, GreedyWithCachingEqualsCachingOffOnTwoAndThreeStages) {
  std::string dir = temp_dir("prefix-greedy");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 6;
  write_tiny_gguf(model, spec);
  const std::vector<Req> reqs = shared_prefix_requests(spec.vocab);
  const auto want = reference(model, reqs);
  for (int stages : {2, 3}) {
    SCOPED_TRACE(std::to_string(stages) + " stages");
    const RunResult on = run_ring(model, 6, stages, true, reqs, "on" + std::to_string(stages));
    const RunResult off = run_ring(model, 6, stages, false, reqs, "off" + std::to_string(stages));
    EXPECT_EQ(on.out, off.out);
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto it = on.out.find({int(i), 0});
      ASSERT_NE(it, on.out.end()) << "request " << i;
      EXPECT_EQ(it->second, want[i]) << "request " << i;
    }
    // Wave 1 found its prefixes: e.g. the 48-token one reused 48, the
    // 47-token one 32, the block-aligned 32-token prompt 16.
    EXPECT_EQ(on.cached.at(4 + 5), 48);
    EXPECT_EQ(on.cached.at(4 + 4), 32);
    EXPECT_EQ(on.cached.at(11), 16);
    EXPECT_GT(on.stats.prefix_hits, 500);
    EXPECT_EQ(off.stats.prefix_hits, 0);
    EXPECT_LT(on.stats.tokens_prompt, off.stats.tokens_prompt);
    for (const RunResult* r : {&on, &off}) EXPECT_EQ(r->stats.blocks_free, r->stats.blocks_total);
    EXPECT_EQ(on.stats.blocks_evictable, on.stats.blocks_cached);
    EXPECT_GT(on.stats.blocks_cached, 0);
  }
  std::filesystem::remove_all(dir);
}

// n = 4 with a seed: choice i is the request sent alone with seed + i, and
// the prompt (100 tokens, longer than a micro-batch) is computed once plus
// its last token per other choice (the partial last block copied on write). Greedy n = 4: four copies of the
// reference.
TEST(PrefixE2E, ParallelSamplingChoicesEqualSeparateRequests) {
  std::string dir = temp_dir("prefix-n");
  std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 6;
  write_tiny_gguf(model, spec);
  std::mt19937_64 rng(5);
  const std::vector<int32_t> prompt = random_tokens(rng, 100, spec.vocab);
  std::vector<Req> many(2), alone(4);
  many[0] = Req{prompt, 12, 4, 0.9f, 1000, 0};
  many[1] = Req{prompt, 6, 4, 0.f, 0, 1};
  for (int i = 0; i < 4; ++i) alone[size_t(i)] = Req{prompt, 12, 1, 0.9f, 1000 + uint64_t(i), 0};
  const auto greedy = reference(model, {Req{prompt, 6}});
  for (int stages : {2, 3}) {
    SCOPED_TRACE(std::to_string(stages) + " stages");
    const RunResult n4 = run_ring(model, 6, stages, true, many, "n4-" + std::to_string(stages));
    const RunResult sep = run_ring(model, 6, stages, false, alone, "sep-" + std::to_string(stages));
    std::set<std::vector<int32_t>> distinct;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(n4.out.at({0, i}), sep.out.at({i, 0})) << "choice " << i;
      distinct.insert(n4.out.at({0, i}));
      EXPECT_EQ(n4.out.at({1, i}), greedy[0]) << "greedy choice " << i;
    }
    EXPECT_EQ(distinct.size(), 4u);
    // 100 prompt tokens once, then the last one per other choice (each
    // copies choice 0's partial block [96,100) and computes position 99);
    // the second request (wave 1) reuses 96: its choice 0 computes
    // [96,100), the others copy it and compute the last token.
    EXPECT_EQ(n4.stats.tokens_prompt, 100 + 3 * 1 + 4 + 3 * 1);
    EXPECT_EQ(sep.stats.tokens_prompt, 4 * 100);
    EXPECT_EQ(n4.stats.blocks_free, n4.stats.blocks_total);
  }
  std::filesystem::remove_all(dir);
}

// The default model (when fetched): a few prompts sharing a system prompt,
// caching on and off, 2 and 3 stages.
TEST(PrefixE2E, DefaultModelSharedSystemPrompt) {
  std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no default model (scripts/fetch-model)";
  std::mt19937_64 rng(17);
  const std::vector<int32_t> system = random_tokens(rng, 40, 49152);
  std::vector<Req> reqs;
  for (int i = 0; i < 4; ++i)
    reqs.push_back(Req{cat(system, random_tokens(rng, 3 + 2 * i, 49152)), 6, 1, 0, 0, i > 0});
  const int layers = ModelFile::open(model)->config().n_layers;
  for (int stages : {2, 3}) {
    SCOPED_TRACE(std::to_string(stages) + " stages");
    const RunResult on =
        run_ring(model, layers, stages, true, reqs, "smol-on" + std::to_string(stages));
    const RunResult off =
        run_ring(model, layers, stages, false, reqs, "smol-off" + std::to_string(stages));
    EXPECT_EQ(on.out, off.out);
    for (int i = 1; i < 4; ++i) EXPECT_EQ(on.cached.at(i), 32);
  }
}

}  // namespace
}  // namespace kvasir::test
