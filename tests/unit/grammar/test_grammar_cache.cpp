// The compile cache: LruCache alone (hit, bound, order, capacity 0), and
// GrammarCompiler's use of it (hits share one compiled grammar, the bound,
// threads racing on the same and different specs, the deadline and a busy
// compiler, the queue's order: cheapest first, the long-waiting before).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "grammar/cache.h"
#include "grammar_test_util.h"

namespace kvasir::grammar::testing {
namespace {

TEST(GrammarCache, LruHitsBoundAndOrder) {
  LruCache<int> c(2);
  int made = 0;
  auto get = [&](const std::string& k) { return c.find_or_insert(k, [&] { return ++made; }); };
  EXPECT_EQ(get("a"), std::make_pair(1, false));
  EXPECT_EQ(get("b"), std::make_pair(2, false));
  EXPECT_EQ(get("a"), std::make_pair(1, true));   // a is now the most recent
  EXPECT_EQ(get("c"), std::make_pair(3, false));  // evicts b, the least recent
  EXPECT_EQ(get("a"), std::make_pair(1, true));
  EXPECT_EQ(get("b"), std::make_pair(4, false));  // b was evicted: made again
  const CacheStats s = c.stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.entries, 2u);
  c.clear();
  EXPECT_EQ(c.stats().entries, 0u);

  LruCache<int> none(0);
  EXPECT_EQ(none.find_or_insert("a", [] { return 7; }), std::make_pair(7, false));
  EXPECT_EQ(none.find_or_insert("a", [] { return 8; }), std::make_pair(8, false));
  EXPECT_EQ(none.stats().entries, 0u);
}

TEST(GrammarCache, CompilerHitsShareOneGrammar) {
  GrammarCompiler compiler;
  const auto& vocab = tiny_vocabs()[0]->vocab;
  std::shared_ptr<const CompiledGrammar> a, b, c, d;
  ASSERT_TRUE(compiler.compile(GrammarSpec::regex("[a-z]+"), vocab, &a).ok());
  ASSERT_TRUE(compiler.compile(GrammarSpec::regex("[a-z]+"), vocab, &b).ok());
  EXPECT_EQ(a, b);
  // The key holds the vocabulary, the kind and strictness.
  ASSERT_TRUE(compiler.compile(GrammarSpec::regex("[a-z]+"), tiny_vocabs()[1]->vocab, &c).ok());
  EXPECT_NE(a, c);
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  ASSERT_TRUE(compiler.compile(GrammarSpec::json_schema(schema, true), vocab, &c).ok());
  ASSERT_TRUE(compiler.compile(GrammarSpec::json_schema(schema, false), vocab, &d).ok());
  EXPECT_NE(c, d);
  EXPECT_EQ(compiler.cache_stats().hits, 1u);
  EXPECT_EQ(compiler.cache_stats().misses, 4u);
  EXPECT_EQ(a->spec().text, "[a-z]+");
  EXPECT_EQ(a->vocabulary(), vocab);
  EXPECT_GT(a->memory_bytes(), 0u);
  compiler.clear_cache();
  ASSERT_TRUE(compiler.compile(GrammarSpec::regex("[a-z]+"), vocab, &b).ok());
  EXPECT_NE(a, b);  // compiled again; the old one lives on with its holders
}

// compile_async returns at once; askers of one spec share one compilation;
// a spec check_spec refuses is a handle ready with the refusal.
TEST(GrammarCache, CompileAsyncSharesOneCompilation) {
  GrammarCompiler compiler;
  const auto& vocab = tiny_vocabs()[0]->vocab;
  EXPECT_FALSE(PendingGrammar().valid());
  const PendingGrammar a = compiler.compile_async(GrammarSpec::regex("[a-c]+x"), vocab);
  const PendingGrammar b = compiler.compile_async(GrammarSpec::regex("[a-c]+x"), vocab);
  ASSERT_TRUE(a.valid() && b.valid());
  std::shared_ptr<const CompiledGrammar> ga, gb;
  ASSERT_TRUE(a.wait(&ga).ok());
  ASSERT_TRUE(b.wait(&gb).ok());
  EXPECT_TRUE(a.ready());
  EXPECT_EQ(ga, gb);
  EXPECT_EQ(compiler.cache_stats().misses, 1u);
  EXPECT_EQ(compiler.cache_stats().hits, 1u);
  CompilerOptions o;
  o.limits.max_text_bytes = 4;
  GrammarCompiler small(o);
  const PendingGrammar big = small.compile_async(GrammarSpec::regex("[a-z]{1,9}"), vocab);
  EXPECT_TRUE(big.ready());
  std::shared_ptr<const CompiledGrammar> g;
  EXPECT_EQ(big.wait(&g).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(small.cache_stats().misses, 0u);  // refused before the cache
}

TEST(GrammarCache, CompilerCacheIsBounded) {
  CompilerOptions o;
  o.cache_capacity = 3;
  GrammarCompiler compiler(o);
  const auto& vocab = tiny_vocabs()[0]->vocab;
  std::shared_ptr<const CompiledGrammar> g;
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(
        compiler.compile(GrammarSpec::regex(fmt::format("x{{{}}}", i + 1)), vocab, &g).ok());
  const CacheStats s = compiler.cache_stats();
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.evictions, 7u);
}

TEST(GrammarCache, ThreadsRacingOnSpecs) {
  CompilerOptions o;
  o.cache_capacity = 4;  // smaller than the specs: evictions race with hits
  GrammarCompiler compiler(o);
  const auto& vocab = tiny_vocabs()[0]->vocab;
  constexpr int kThreads = 8, kRounds = 40, kSpecs = 6;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const int k = (t * 7 + r * 3) % kSpecs;
        std::shared_ptr<const CompiledGrammar> g;
        const Status st =
            compiler.compile(GrammarSpec::choice({"v" + std::to_string(k)}), vocab, &g);
        if (!st.ok() || g == nullptr || g->spec().choices[0] != "v" + std::to_string(k)) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const CacheStats s = compiler.cache_stats();
  EXPECT_EQ(s.hits + s.misses, uint64_t(kThreads * kRounds));
  EXPECT_LE(s.entries, 4u);
  EXPECT_GE(s.misses, uint64_t(kSpecs));
}

// A regex whose compilation takes about a second on the default model's
// vocabulary (hundreds of automaton states, each checked against every token).
constexpr const char* kSlowRegex = "[a-z]{1,2000}";

TEST(GrammarCache, DeadlineAndBusyCompiler) {
  const TestVocab* tv = default_vocab();
  if (tv == nullptr) GTEST_SKIP() << "no default model at " << model_path();
  CompilerOptions o;
  o.workers = 1;
  o.limits.compile_timeout = std::chrono::milliseconds(20);
  GrammarCompiler compiler(o);
  std::shared_ptr<const CompiledGrammar> g;
  const Status slow = compiler.compile(GrammarSpec::regex(kSlowRegex), tv->vocab, &g);
  EXPECT_EQ(slow.code(), ErrorCode::kInvalidArgument) << slow.to_string();
  EXPECT_EQ(slow.message(),
            "regex: compiling it took longer than the limit of 20 ms (too complex)");
  // The one worker is still on it: another spec waits in the queue and
  // times out as busy, not as too complex.
  const Status busy = compiler.compile(GrammarSpec::regex("[0-9]+"), tv->vocab, &g);
  EXPECT_EQ(busy.code(), ErrorCode::kQueueFull) << busy.to_string();
  EXPECT_EQ(g, nullptr);
  // The slow compilation finishes on its worker and lands in the cache: the
  // same spec, asked again, is a hit that costs no second compilation.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  Status again;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    again = compiler.compile(GrammarSpec::regex(kSlowRegex), tv->vocab, &g);
  } while (!again.ok() && std::chrono::steady_clock::now() < until);
  ASSERT_TRUE(again.ok()) << again.to_string();
  EXPECT_NE(g, nullptr);
  EXPECT_EQ(compiler.cache_stats().misses, 2u);  // the slow regex and "[0-9]+", once each
}

// The deadline counts from the ask, not from the wait: a caller that did
// other work first (the tail, during the forward pass) waits only for what
// is left of it.
TEST(GrammarCache, DeadlineCountsFromTheAsk) {
  const TestVocab* tv = default_vocab();
  if (tv == nullptr) GTEST_SKIP() << "no default model at " << model_path();
  CompilerOptions o;
  o.workers = 1;
  o.limits.compile_timeout = std::chrono::milliseconds(100);
  GrammarCompiler compiler(o);
  const PendingGrammar p = compiler.compile_async(GrammarSpec::regex(kSlowRegex), tv->vocab);
  EXPECT_FALSE(p.ready());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // past the deadline
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const CompiledGrammar> g;
  const Status st = p.wait(&g);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("too complex"), std::string::npos) << st.message();
}

// The queue is cheapest first: behind a running slow compilation, a small
// spec asked after a large one still goes before it.
TEST(GrammarCache, SmallSpecsGoBeforeLargeOnes) {
  const TestVocab* tv = default_vocab();
  if (tv == nullptr) GTEST_SKIP() << "no default model at " << model_path();
  CompilerOptions o;
  o.workers = 1;
  o.limits.compile_timeout = std::chrono::seconds(120);
  GrammarCompiler compiler(o);
  const PendingGrammar running = compiler.compile_async(GrammarSpec::regex(kSlowRegex), tv->vocab);
  const PendingGrammar large = compiler.compile_async(GrammarSpec::regex("[a-y]{1,2000}"), tv->vocab);
  const PendingGrammar small = compiler.compile_async(GrammarSpec::regex("[0-9]+"), tv->vocab);
  std::shared_ptr<const CompiledGrammar> g;
  ASSERT_TRUE(small.wait(&g).ok());
  EXPECT_FALSE(large.ready()) << "the large spec went first";
  EXPECT_TRUE(large.wait(&g).ok());
  EXPECT_TRUE(running.wait(&g).ok());
}

// ...but a job that has waited half its compile_timeout goes first, so a
// stream of small specs cannot starve a large one.
TEST(GrammarCache, AJobWaitingHalfItsTimeoutGoesFirst) {
  const TestVocab* tv = default_vocab();
  if (tv == nullptr) GTEST_SKIP() << "no default model at " << model_path();
  CompilerOptions o;
  o.workers = 1;
  o.limits.compile_timeout = std::chrono::milliseconds(200);
  GrammarCompiler compiler(o);
  const PendingGrammar running = compiler.compile_async(GrammarSpec::regex(kSlowRegex), tv->vocab);
  const PendingGrammar large = compiler.compile_async(GrammarSpec::regex("[a-y]{1,2000}"), tv->vocab);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // large has waited 100 ms
  // Cheaper than large, yet tens of milliseconds to compile: were it taken
  // first, the poll below would see it ready alone.
  const PendingGrammar small = compiler.compile_async(GrammarSpec::regex("[a-x]{1,300}"), tv->vocab);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!large.ready() && !small.ready() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(large.ready()) << "the small spec went before the one that waited";
  EXPECT_FALSE(small.ready());
}

TEST(GrammarCache, DestroyingTheCompilerDropsQueuedWork) {
  const TestVocab* tv = default_vocab();
  if (tv == nullptr) GTEST_SKIP() << "no default model at " << model_path();
  CompilerOptions o;
  o.workers = 1;
  o.limits.compile_timeout = std::chrono::milliseconds(1);
  auto compiler = std::make_unique<GrammarCompiler>(o);
  std::shared_ptr<const CompiledGrammar> g;
  EXPECT_FALSE(compiler->compile(GrammarSpec::regex(kSlowRegex), tv->vocab, &g).ok());
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(
        compiler->compile(GrammarSpec::regex(fmt::format("q{{{}}}", i + 1)), tv->vocab, &g).code(),
        ErrorCode::kQueueFull);
  compiler.reset();  // waits for the running one, drops the five queued
  SUCCEED();
}

}  // namespace
}  // namespace kvasir::grammar::testing
