// The block manager: all-or-nothing growth, release, no leak under churn;
// with prefix caching: the hash chain, reference counts, the evictable
// list's order, eviction under pressure while blocks are shared, pending
// blocks of a failed batch, the salt. (The scheduler's rules:
// test_scheduler.cpp, test_prefix_cache.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string_view>

#include "daemon/engine/block_manager.h"

namespace kvasir {
namespace {

TEST(BlockManager, AllOrNothingAndRelease) {
  BlockManager bm(4, 16);
  std::vector<int32_t> a, b;
  EXPECT_EQ(bm.blocks_for(1), 1);
  EXPECT_EQ(bm.blocks_for(16), 1);
  EXPECT_EQ(bm.blocks_for(17), 2);
  EXPECT_TRUE(bm.ensure(a, 40));  // 3 blocks
  EXPECT_EQ(a.size(), 3u);
  EXPECT_FALSE(bm.ensure(b, 20));  // needs 2, 1 left: nothing taken
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(bm.free(), 1);
  bm.release(a);
  EXPECT_EQ(bm.free(), 4);
  EXPECT_TRUE(bm.ensure(b, 64));
  std::set<int32_t> ids(b.begin(), b.end());
  EXPECT_EQ(ids.size(), 4u);
}

// 100,000 random operations of the kinds the scheduler performs: grow a
// table (a decode or a chunk), release it (a finish), release a table
// mid-way (a preemption, then a regrowth from zero). Block ids must never be
// shared between tables and the free count must return to the start.
TEST(BlockManager, NoLeakAfterRandomAllocateFreePreempt) {
  BlockManager bm(64, 16);
  std::mt19937 rng(12345);
  std::vector<std::vector<int32_t>> tables(24);
  std::vector<int64_t> tokens(tables.size(), 0);
  for (int op = 0; op < 100000; ++op) {
    const size_t i = rng() % tables.size();
    switch (rng() % 4) {
      case 0:
      case 1: {  // grow by a decode or a chunk: all or nothing
        const int64_t want = tokens[i] + 1 + (rng() % 2 ? 0 : int64_t(rng() % 40));
        const int32_t before = bm.free();
        const size_t had = tables[i].size();
        if (bm.ensure(tables[i], want)) {
          tokens[i] = want;
          ASSERT_EQ(tables[i].size(), size_t(bm.blocks_for(want)));
          ASSERT_EQ(before - bm.free(), int32_t(tables[i].size() - had));
        } else {
          ASSERT_EQ(tables[i].size(), had);
          ASSERT_EQ(bm.free(), before);
        }
        break;
      }
      case 2:  // finish
      case 3:  // preempt (the same release; the table regrows from zero)
        bm.release(tables[i]);
        tokens[i] = 0;
        break;
    }
    if (op % 1000 == 0) {
      std::set<int32_t> ids;
      size_t n = 0;
      for (auto& t : tables) {
        ids.insert(t.begin(), t.end());
        n += t.size();
      }
      ASSERT_EQ(ids.size(), n) << "a block is in two tables";
      ASSERT_EQ(int32_t(n) + bm.free(), bm.total());
    }
  }
  for (auto& t : tables) bm.release(t);
  EXPECT_EQ(bm.free(), bm.total());
}

// ---- prefix caching --------------------------------------------------------------

// Tokens 0..n-1 plus `base`: prompts that share a prefix share a base.
std::vector<int32_t> toks(int n, int32_t base = 0) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i);
  return t;
}

// A sequence's life in the cache: look up, reuse, grow to `n` tokens,
// cache the full blocks (written by batch `writer`).
struct Seq {
  explicit Seq(std::vector<int32_t> t = {}) : tokens(std::move(t)) {}
  std::vector<int32_t> tokens, table;
  CacheCursor cur;
  int64_t hit = 0;
  bool start(BlockManager& bm, std::string_view salt = {}, uint64_t writer = 1) {
    const PrefixHit h = bm.find_prefix(tokens, salt);
    bm.reuse(table, h, cur);
    hit = h.tokens(bm.block_size());
    if (!bm.ensure(table, int64_t(tokens.size()))) return false;
    bm.cache_full_blocks(table, tokens, int64_t(tokens.size()), salt, writer, cur);
    return true;
  }
};

TEST(PrefixCache, HashChainDependsOnParentTokensAndSalt) {
  const std::vector<int32_t> a = toks(4), b = toks(4, 1);
  EXPECT_NE(chain_hash(1, a.data(), 4), chain_hash(2, a.data(), 4));  // parent
  EXPECT_NE(chain_hash(1, a.data(), 4), chain_hash(1, b.data(), 4));  // tokens
  EXPECT_EQ(chain_hash(1, a.data(), 4), chain_hash(1, a.data(), 4));
  EXPECT_NE(salt_hash(""), salt_hash("tenant-a"));
  EXPECT_NE(salt_hash("tenant-a"), salt_hash("tenant-b"));
}

TEST(PrefixCache, WholeBlocksOnlyAndTheLastTokenIsAlwaysComputed) {
  BlockManager bm(16, 4, true);
  Seq a{toks(10)};
  ASSERT_TRUE(a.start(bm));
  EXPECT_EQ(a.hit, 0);
  EXPECT_EQ(bm.cached(), 2);  // [0,4) and [4,8); [8,10) is partial: never shared
  // The same 10 tokens: both full blocks. 8 of them: one, since the 8th
  // token is computed (its logits are needed) and lives in the second.
  EXPECT_EQ(bm.find_prefix(toks(10), "").blocks, (std::vector<int32_t>{a.table[0], a.table[1]}));
  EXPECT_EQ(bm.find_prefix(toks(8), "").blocks, (std::vector<int32_t>{a.table[0]}));
  EXPECT_EQ(bm.find_prefix(toks(9), "").blocks.size(), 2u);
  // A prompt that differs in the second block shares the first only; one
  // that differs in the first shares nothing (a chain: the parent counts).
  std::vector<int32_t> c = toks(10);
  c[5] = 99;
  EXPECT_EQ(bm.find_prefix(c, "").blocks.size(), 1u);
  c[1] = 99;
  EXPECT_EQ(bm.find_prefix(c, "").blocks.size(), 0u);
  std::vector<int32_t> shifted = toks(10, 4);  // block [4,8) of a, as a first block
  EXPECT_EQ(bm.find_prefix(shifted, "").blocks.size(), 0u);
  BlockManager off(16, 4, false);
  Seq d{toks(10)};
  ASSERT_TRUE(d.start(off));
  EXPECT_EQ(off.cached(), 0);
  EXPECT_TRUE(off.find_prefix(toks(10), "").blocks.empty());
}

TEST(PrefixCache, ReferenceCountsKeepSharedBlocksUntilTheLastHolder) {
  BlockManager bm(8, 4, true);
  Seq a{toks(9)}, b{toks(9)};
  ASSERT_TRUE(a.start(bm));
  ASSERT_TRUE(b.start(bm));
  EXPECT_EQ(b.hit, 8);
  EXPECT_EQ(b.table[0], a.table[0]);
  EXPECT_EQ(b.table[1], a.table[1]);
  EXPECT_NE(b.table[2], a.table[2]);  // the partial last block is its own
  EXPECT_EQ(bm.pool().refs(a.table[0]), 2);
  EXPECT_EQ(bm.free(), 8 - 4);  // 2 shared + 2 own
  bm.release(a.table);
  EXPECT_EQ(bm.pool().refs(b.table[0]), 1);
  EXPECT_EQ(bm.evictable(), 0);  // b still holds the shared ones
  EXPECT_EQ(bm.free(), 8 - 3);
  const std::vector<int32_t> shared(b.table.begin(), b.table.begin() + 2);
  bm.release(b.table);
  EXPECT_EQ(bm.evictable(), 2);  // no holder: cached, evictable, counted as free
  EXPECT_EQ(bm.free(), 8);
  EXPECT_EQ(bm.cached(), 2);
  // A later prompt reuses them: they leave the evictable list.
  Seq c{toks(12)};
  ASSERT_TRUE(c.start(bm));
  EXPECT_EQ(c.hit, 8);
  EXPECT_EQ(std::vector<int32_t>(c.table.begin(), c.table.begin() + 2), shared);
  EXPECT_EQ(bm.evictable(), 0);
}

TEST(PrefixCache, EvictsTheLeastRecentlyReleasedLeafFirst) {
  // 8 blocks of 2. a: 3 full blocks + 1 partial, released first; b: 2 full
  // + 1 partial, released later. New blocks come from the free ones first
  // (the partial blocks and the one never used), then from a's chain, leaf
  // to root, then from b's: a chain's parent outlives its children.
  BlockManager bm(8, 2, true);
  Seq a{toks(7, 100)}, b{toks(5, 200)};
  ASSERT_TRUE(a.start(bm));
  ASSERT_TRUE(b.start(bm));
  EXPECT_EQ(bm.free(), 1);
  bm.release(a.table);
  bm.release(b.table);
  EXPECT_EQ(bm.cached(), 5);
  EXPECT_EQ(bm.evictable(), 5);
  auto cached_of = [&](const Seq& s) { return bm.find_prefix(s.tokens, "").blocks.size(); };
  std::vector<int32_t> grow;
  const std::vector<std::pair<size_t, size_t>> expect = {
      {3, 2}, {3, 2}, {3, 2},  // the three free blocks
      {2, 2}, {1, 2}, {0, 2},  // a's leaf, then its parents
      {0, 1}, {0, 0}};         // then b's
  for (const auto& [in_a, in_b] : expect) {
    ASSERT_TRUE(bm.ensure(grow, int64_t(grow.size() + 1) * 2));
    EXPECT_EQ(cached_of(a), in_a);
    EXPECT_EQ(cached_of(b), in_b);
  }
  EXPECT_FALSE(bm.ensure(grow, int64_t(grow.size() + 1) * 2));
  bm.release(grow);
  EXPECT_EQ(bm.free(), 8);
  EXPECT_EQ(bm.cached(), 0);
}

TEST(PrefixCache, AReusedBlockMovesToTheBackOfTheEvictableList) {
  // a released before b, then a's first block reused (and released) after
  // b: evicted in the order a's leaf, b's leaf, b's root, a's root.
  BlockManager bm(6, 2, true);
  Seq a{toks(5, 100)}, b{toks(5, 200)};
  ASSERT_TRUE(a.start(bm));
  ASSERT_TRUE(b.start(bm));
  bm.release(a.table);
  bm.release(b.table);
  Seq c{toks(3, 100)};  // a's first block, then its own partial one
  ASSERT_TRUE(c.start(bm));
  EXPECT_EQ(c.hit, 2);
  bm.release(c.table);
  std::vector<int32_t> grow;
  ASSERT_TRUE(bm.ensure(grow, 2 * 2));  // the two free (partial) blocks
  const std::vector<std::pair<size_t, size_t>> expect = {{1, 2}, {1, 1}, {1, 0}, {0, 0}};
  for (const auto& [in_a, in_b] : expect) {
    ASSERT_TRUE(bm.ensure(grow, int64_t(grow.size() + 1) * 2));
    EXPECT_EQ(bm.find_prefix(a.tokens, "").blocks.size(), in_a);
    EXPECT_EQ(bm.find_prefix(b.tokens, "").blocks.size(), in_b);
  }
  bm.release(grow);
}

TEST(PrefixCache, EvictionUnderPressureNeverTakesAHeldBlock) {
  // a holds 3 full blocks that b reuses; a finishes; d's prompt needs more
  // than the free and evictable blocks together: refused, nothing taken,
  // the shared blocks intact. Once b finishes they are evictable, and an
  // allocation that needs them takes them.
  BlockManager bm(8, 4, true);
  Seq a{toks(13)}, b{toks(14)};
  ASSERT_TRUE(a.start(bm));  // 4 blocks, 3 cached
  ASSERT_TRUE(b.start(bm));  // reuses 3, 1 own
  EXPECT_EQ(b.hit, 12);
  Seq x{toks(6, 500)};  // another prompt: 2 blocks, 1 cached
  ASSERT_TRUE(x.start(bm));
  bm.release(x.table);  // its full block: evictable
  bm.release(a.table);  // a's partial block goes free; the 3 shared stay held by b
  EXPECT_EQ(bm.free(), 8 - 4);
  EXPECT_EQ(bm.evictable(), 1);
  std::vector<int32_t> d;
  EXPECT_FALSE(bm.ensure(d, 5 * 4));  // 5 blocks: only 4 free + evictable
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(bm.find_prefix(toks(14), "").blocks.size(), 3u);
  EXPECT_EQ(bm.find_prefix(toks(6, 500), "").blocks.size(), 1u);
  ASSERT_TRUE(bm.ensure(d, 4 * 4));  // takes the evictable one: x's block is gone
  EXPECT_EQ(bm.find_prefix(toks(6, 500), "").blocks.size(), 0u);
  for (int32_t blk : b.table) EXPECT_EQ(std::count(d.begin(), d.end(), blk), 0);
  EXPECT_EQ(bm.find_prefix(toks(14), "").blocks.size(), 3u);
  bm.release(b.table);
  EXPECT_EQ(bm.evictable(), 3);
  bm.release(d);
  EXPECT_EQ(bm.free(), 8);
}

TEST(PrefixCache, SaltsSeparateEverything) {
  BlockManager bm(16, 4, true);
  Seq a{toks(9)};
  ASSERT_TRUE(a.start(bm, "tenant-a"));
  EXPECT_EQ(bm.find_prefix(toks(9), "tenant-a").blocks.size(), 2u);
  EXPECT_EQ(bm.find_prefix(toks(9), "tenant-b").blocks.size(), 0u);
  EXPECT_EQ(bm.find_prefix(toks(9), "").blocks.size(), 0u);
  Seq b{toks(9)};
  ASSERT_TRUE(b.start(bm, "tenant-b"));  // its own copy
  EXPECT_EQ(b.hit, 0);
  EXPECT_EQ(bm.cached(), 4);
  EXPECT_EQ(bm.find_prefix(toks(9), "tenant-b").blocks,
            (std::vector<int32_t>{b.table[0], b.table[1]}));
}

TEST(PrefixCache, AFailedBatchUncachesWhatItAndLaterBatchesWrote) {
  BlockManager bm(16, 4, true);
  Seq a{toks(9)}, b{toks(9, 50)}, c{toks(9, 90)};
  ASSERT_TRUE(a.start(bm, "", 1));
  ASSERT_TRUE(b.start(bm, "", 2));
  ASSERT_TRUE(c.start(bm, "", 3));
  Seq r{toks(9, 50)};  // reuses b's blocks while batch 2 is in flight
  ASSERT_TRUE(r.start(bm, "", 3));
  EXPECT_EQ(r.hit, 8);
  bm.confirm(1);                                 // batch 1 back: a's blocks written
  EXPECT_TRUE(bm.reads_pending(r.table, 2, 2));  // r read blocks batch 2 writes
  EXPECT_EQ(bm.drop_pending(2), 4);              // batch 2 failed: b's and c's blocks
  EXPECT_EQ(bm.find_prefix(toks(9), "").blocks.size(), 2u);
  EXPECT_EQ(bm.find_prefix(toks(9, 50), "").blocks.size(), 0u);
  EXPECT_EQ(bm.find_prefix(toks(9, 90), "").blocks.size(), 0u);
  EXPECT_FALSE(bm.reads_pending(r.table, 2, 2));
  for (Seq* s : {&a, &b, &c, &r}) bm.release(s->table);
  EXPECT_EQ(bm.free(), 16);
  EXPECT_EQ(bm.cached(), 2);
  EXPECT_EQ(bm.drop_cache(), 2);  // a new epoch
  EXPECT_EQ(bm.cached(), 0);
  EXPECT_EQ(bm.evictable(), 0);
  EXPECT_EQ(bm.free(), 16);
}

TEST(PrefixCache, AnEvictedParentBreaksItsChildsLink) {
  // a's two full blocks cached; its first block is evicted and reused for
  // other content: a's second block must not be found under the new one.
  BlockManager bm(3, 2, true);
  Seq a{toks(5)};
  ASSERT_TRUE(a.start(bm));  // 3 blocks: 2 cached + 1 partial
  bm.release(a.table);       // evictable: leaf [2,4) then root [0,2)
  std::vector<int32_t> g;
  ASSERT_TRUE(bm.ensure(g, 2));  // the free partial block
  ASSERT_TRUE(bm.ensure(g, 4));  // evicts the leaf
  EXPECT_EQ(bm.find_prefix(toks(5), "").blocks.size(), 1u);
  bm.release(g);
  EXPECT_EQ(bm.cached(), 1);
}

// 100,000 random operations with caching: prompts drawn from a few shared
// prefixes; start (look up, reuse, grow, cache), grow by decodes, release.
// Every held block's count equals the tables naming it, no block is in two
// tables unless cached and at the same place, held + free + evictable =
// total, and everything returns at the end.
TEST(PrefixCache, NoLeakAndConsistentCountsUnderChurn) {
  BlockManager bm(64, 4, true);
  std::mt19937 rng(777);
  std::vector<Seq> seqs(20);
  uint64_t batch = 1;
  for (int op = 0; op < 100000; ++op) {
    Seq& s = seqs[rng() % seqs.size()];
    if (s.table.empty()) {
      s = Seq{toks(1 + int(rng() % 30), int32_t(rng() % 3) * 1000)};
      if (!s.start(bm, rng() % 4 ? "" : "x", batch++)) bm.release(s.table);
    } else if (rng() % 3) {
      s.tokens.push_back(int32_t(rng() % 7));
      if (bm.ensure(s.table, int64_t(s.tokens.size())))
        bm.cache_full_blocks(s.table, s.tokens, int64_t(s.tokens.size()), "", batch++, s.cur);
      else
        s.tokens.pop_back();
    } else {
      bm.release(s.table);
    }
    if (rng() % 2) bm.confirm(batch - 1);
    if (op % 997 == 0) {
      std::map<int32_t, int32_t> holders;
      for (const Seq& q : seqs)
        for (int32_t b : q.table) holders[b]++;
      for (auto [b, n] : holders) {
        ASSERT_EQ(bm.pool().refs(b), n) << "block " << b;
        if (n > 1) {
          ASSERT_TRUE(bm.pool().is_cached(b)) << "an uncached block in two tables";
        }
      }
      ASSERT_EQ(int32_t(holders.size()) + bm.free(), bm.total());
    }
  }
  for (Seq& s : seqs) bm.release(s.table);
  EXPECT_EQ(bm.free(), bm.total());
  EXPECT_EQ(bm.evictable(), bm.cached());
}

TEST(PrefixCache, KeyedBlocksMatchTheirKeyAndAStaleKeyIsReplaced) {
  // A pool keyed by another pool's links (the sliding-window group's by the
  // full group's): a hit needs the same key (block and generation) and the
  // same token ids; an entry under an older key of the same hash is stale.
  BlockPool full(1, 2), keyed(4, 2);
  const int32_t t[2] = {5, 6}, u[2] = {5, 7};
  const int32_t f = full.take(), k = keyed.take();
  const auto key = full.cache(f, nullptr, "", t, 0);
  ASSERT_TRUE(key);
  ASSERT_TRUE(keyed.cache_keyed(k, *key, t, 3));
  EXPECT_EQ(keyed.find_keyed(*key, t)->block, k);
  EXPECT_FALSE(keyed.find_keyed(*key, u));
  EXPECT_EQ(keyed.writer(k), 3u);
  keyed.confirm(3);
  EXPECT_EQ(keyed.writer(k), 0u);
  // The full block evicted and the same prefix cached again: a new key
  // (the block's generation moved on). The old entry no longer matches,
  // and caching under the new key replaces it.
  full.unref(f);
  const int32_t f2 = full.take();  // the pool's one block: f evicted
  EXPECT_EQ(f2, f);
  const auto key2 = full.cache(f2, nullptr, "", t, 0);
  ASSERT_TRUE(key2);
  EXPECT_FALSE(keyed.find_keyed(*key2, t));
  const int32_t k2 = keyed.take();
  ASSERT_TRUE(keyed.cache_keyed(k2, *key2, t, 0));
  EXPECT_EQ(keyed.find_keyed(*key2, t)->block, k2);
  EXPECT_FALSE(keyed.is_cached(k));
  EXPECT_EQ(keyed.cached(), 1);
}

}  // namespace
}  // namespace kvasir
