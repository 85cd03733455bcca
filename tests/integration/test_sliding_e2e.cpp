// The sliding-window group through real stage processes (docs/scheduler.md,
// "Sliding-window groups"): Gemma 3 270M (when fetched: scripts/fetch-gemma3)
// split over 2 CPU stages, whose 15 sliding layers hold a pool of their own
// and read each row's sliding table, its blocks freed as the window (512)
// moves. Greedy output must equal the masking reference (one SliceExecutor,
// every layer's full KV kept) for prompts and generations longer than the
// window, prefilled in small chunks so that chunks cross the window's edge,
// with and without prefix caching (the second request, the first's prompt
// again, hits: 43 whole blocks, the sliding group holding the window before
// them), and with a sliding pool smaller than the full one (the memory saved).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "ring_fixture.h"

namespace kvasir::test {
namespace {

struct Req {
  std::vector<int32_t> prompt;
  int max_new;
};

struct SlidingRun {
  std::vector<std::vector<int32_t>> out;
  EngineStats stats;
};

SlidingRun run_sliding(const std::string& model, int n_layers, const std::vector<Req>& reqs,
                bool caching, const std::string& tag) {
  std::string dir = temp_dir("sliding-" + tag);
  Config cfg = load_config(
      write_config(dir, model, plan_toml(n_layers, 2, 1, 0, 8, 96), "16MiB"));
  cfg.scheduler.chunk_size = 40;  // 700 / 40: chunks start at every offset of a block
  cfg.scheduler.max_num_seqs = 2;  // a sliding pool for two windows: smaller than the full one
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  Supervisor sup(cfg, mc, opt);
  sup.start();
  BridgeConfig bc = ring_bridge_config(cfg, mc, sup);
  bc.limits.policy = Policy::kChunked;
  bc.limits.prefix_caching = caching;
  SlidingRun run;
  run.out.resize(reqs.size());
  {
    Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
    Collector col;
    // One after the other: with caching, the second prompt (the first's
    // again) could hit blocks the first cached.
    for (size_t i = 0; i < reqs.size(); ++i) {
      GenRequest g;
      g.prompt = reqs[i].prompt;
      g.max_tokens = reqs[i].max_new;
      g.ignore_eos = true;
      g.sampling.temperature = 0.f;  // greedy, as the reference
      EXPECT_NE(engine.submit(g, col.sink(int(i))), 0u);
      EXPECT_TRUE(col.wait_all(i + 1, 600)) << tag;
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(col.finish[int(i)], FinishReason::kLength) << col.errors[int(i)];
      run.out[i] = col.tokens[int(i)];
    }
    for (int i = 0; i < 300 && engine.stats().blocks_swa_free != engine.stats().blocks_swa_total;
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    run.stats = engine.stats();
    for (const StageReport& s : engine.ring_report().stages) EXPECT_EQ(s.refused, 0u) << tag;
    engine.shutdown();
  }
  sup.stop();
  EXPECT_FALSE(ipc::Segment::exists(sup.segment_name()));
  std::filesystem::remove_all(dir);
  return run;
}

TEST(SlidingE2E, Gemma3FreedWindowMatchesTheMaskingReference) {
  const std::string model = std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no Gemma 3 file (scripts/fetch-gemma3)";
  auto file = ModelFile::open(model);
  const ModelConfig& mc = file->config();
  ASSERT_EQ(mc.sliding_window, 512);
  std::mt19937_64 rng(41);
  Req a;
  for (int j = 0; j < 700; ++j) a.prompt.push_back(int32_t(rng() % uint64_t(mc.vocab)));
  a.max_new = 200;
  const std::vector<Req> reqs = {a, a};  // the second: a prefix hit with caching

  // The reference: every layer's KV kept, the window a mask (64 blocks of
  // 16 hold 1,024 positions; the prompt in one piece).
  SliceExecutor ex(*file, SliceSpec{0, mc.n_layers - 1, true, true},
                   KvSpec{64, 16, DType::F16}, 2, 1024);
  const std::vector<int32_t> want = reference_greedy(ex, 64, a.prompt, a.max_new);

  for (bool caching : {false, true}) {
    const std::string tag = caching ? "cached" : "plain";
    const SlidingRun run = run_sliding(model, mc.n_layers, reqs, caching, tag);
    ASSERT_EQ(run.out.size(), 2u);
    EXPECT_EQ(run.out[0], want) << tag;
    EXPECT_EQ(run.out[1], want) << tag;
    // Two windows' worth: ceil((511 + 96) / 16) + 1 = 39 blocks each.
    EXPECT_EQ(run.stats.blocks_swa_total, 78) << tag;
    EXPECT_GT(run.stats.blocks_total, run.stats.blocks_swa_total) << tag;
    EXPECT_EQ(run.stats.blocks_swa_free, run.stats.blocks_swa_total) << tag;
    // With caching the second reuses (700 - 1) / 16 = 43 whole blocks: the
    // first's window blocks before position 688 were still cached (slid
    // past, they went to the evictable list; the pool never ran short).
    EXPECT_EQ(run.stats.prefix_hits, caching ? 688 : 0) << tag;
    // The engine's stats count the sliding pool's cache: at least the
    // blocks the hit needed there (entries 11..42, the window of position
    // 688: from 688 - 511 = 177), all unheld now; none without caching.
    if (caching) {
      EXPECT_GE(run.stats.blocks_swa_cached, 32) << tag;
    } else {
      EXPECT_EQ(run.stats.blocks_swa_cached, 0) << tag;
    }
    EXPECT_EQ(run.stats.blocks_swa_evictable, run.stats.blocks_swa_cached) << tag;
  }
}

}  // namespace
}  // namespace kvasir::test
