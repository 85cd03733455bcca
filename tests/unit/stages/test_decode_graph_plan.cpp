// The plain C++ of decode graphs (stages/cuda/decode_graph_plan.h): row
// buckets, the shape a decode batch is replayed with, and the padding rows.
// Runs on every machine; in a build with the CUDA backend the padded batch
// also passes the kernels' own host check (check_attn_batch_host).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "stages/cuda/decode_graph_plan.h"
#ifdef KVASIR_TEST_HAVE_CUDA
#include "kernels/cuda/attention.h"
#include "kernels/cuda/paged_kv_layout.h"
#endif

namespace kvasir::cuda {
namespace {

TEST(DecodeGraphPlan, RowBuckets) {
  EXPECT_EQ(decode_row_buckets(1), (std::vector<int32_t>{1}));
  EXPECT_EQ(decode_row_buckets(3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(decode_row_buckets(8), (std::vector<int32_t>{1, 2, 4, 8}));
  EXPECT_EQ(decode_row_buckets(32), (std::vector<int32_t>{1, 2, 4, 8, 16, 24, 32}));
  EXPECT_EQ(decode_row_buckets(130).size(), 4u + 15u + 1u);  // 1,2,4,8, 16..128, 130
  EXPECT_EQ(decode_row_buckets(130).back(), 130);
  EXPECT_TRUE(decode_row_buckets(0).empty());
  for (int32_t max_rows : {1, 2, 3, 5, 8, 9, 32, 100, 128, 256}) {
    const std::vector<int32_t> b = decode_row_buckets(max_rows);
    EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
    for (int32_t rows = 1; rows <= max_rows; ++rows) {
      const int32_t got = decode_row_bucket(rows, max_rows);
      // The smallest bucket that holds the rows.
      const auto want = std::lower_bound(b.begin(), b.end(), rows);
      ASSERT_NE(want, b.end());
      EXPECT_EQ(got, *want) << rows << " of " << max_rows;
    }
    EXPECT_EQ(decode_row_bucket(0, max_rows), 0);
    EXPECT_EQ(decode_row_bucket(max_rows + 1, max_rows), 0);
  }
}

DecodeGraphLimits limits(int32_t max_rows, int32_t cap, int32_t heads) {
  return DecodeGraphLimits{max_rows, cap, heads, 2048, 512};
}

TEST(DecodeGraphPlan, ShapesCoverTheBatchAndStayFew) {
  for (int32_t heads : {9, 32}) {
    const DecodeGraphLimits lim = limits(128, 8192, heads);
    std::set<uint64_t> keys;
    for (int32_t rows = 1; rows <= 128; ++rows)
      for (int32_t ctx = 1; ctx <= 8192; ctx += 13) {
        const DecodeShape s = decode_graph_shape(lim, rows, ctx);
        ASSERT_GE(s.rows, rows);
        ASSERT_EQ(s.rows, decode_row_bucket(rows, 128));
        ASSERT_GE(s.context, ctx);
        ASSERT_LE(s.context, 8192);
        if (int64_t(s.rows) * heads >= 2048) {
          ASSERT_EQ(s.context, 8192) << "no split: one shape per row bucket";
        } else {
          // Split: whole partitions, a power of two of them, or the cap.
          const int32_t parts = s.context / 512;
          ASSERT_TRUE(s.context == 8192 || (s.context % 512 == 0 && (parts & (parts - 1)) == 0))
              << s.context;
          // Never more than twice the partitions the batch needs.
          ASSERT_LE(s.context, 2 * ((ctx + 511) / 512) * 512);
        }
        keys.insert(decode_graph_key(s));
      }
    // 19 row buckets; at most 5 context buckets (512 .. 8192) each.
    EXPECT_LE(keys.size(), 19u * 5u) << heads;
    std::printf("heads %d: %zu graph shapes for 128 rows x 8192 positions\n", heads, keys.size());
  }
  EXPECT_EQ(decode_graph_shape(limits(128, 8192, 32), 3, 600), (DecodeShape{4, 1024}));
  EXPECT_EQ(decode_graph_shape(limits(128, 8192, 32), 3, 1100), (DecodeShape{4, 2048}));
  EXPECT_EQ(decode_graph_shape(limits(128, 8192, 32), 1, 7000), (DecodeShape{1, 8192}));
  EXPECT_EQ(decode_graph_shape(limits(128, 3000, 32), 1, 2100), (DecodeShape{1, 3000}));
  EXPECT_EQ(decode_graph_shape(limits(128, 8192, 32), 64, 100), (DecodeShape{64, 8192}));
  EXPECT_EQ(decode_graph_shape(limits(128, 8192, 32), 1, 300), (DecodeShape{1, 512}));
  // Out of range: no graph.
  EXPECT_EQ(decode_graph_shape(limits(128, 8192, 32), 129, 10).rows, 0);
  EXPECT_EQ(decode_graph_shape(limits(128, 8192, 32), 0, 10).rows, 0);
  EXPECT_EQ(decode_graph_shape(limits(128, 8192, 32), 4, 0).rows, 0);
  EXPECT_EQ(decode_graph_shape(limits(128, 8192, 32), 4, 8193).rows, 0);
  EXPECT_EQ(decode_graph_shape(limits(0, 8192, 32), 1, 10).rows, 0);
}

TEST(DecodeGraphPlan, PaddingRowsAreOneTokenAtPositionZeroOfTheSink) {
  std::mt19937 rng(4);
  const int32_t max_table = 6, block = 16, n_blocks = 40, sink = n_blocks;
  for (int32_t n = 1; n <= 24; ++n) {
    const DecodeShape shape = decode_graph_shape(limits(32, max_table * block, 9), n, 1);
    const int32_t padded = shape.rows;
    std::vector<int32_t> q_start(size_t(padded) + 1, -7), pos0(size_t(padded), -7),
        tables(size_t(padded) * max_table, -7), pos(size_t(padded), -7), tokens(size_t(padded), -7);
    int32_t max_ctx = 0;
    q_start[0] = 0;
    for (int32_t r = 0; r < n; ++r) {
      const int32_t p = int32_t(rng() % (max_table * block));
      q_start[size_t(r) + 1] = r + 1;
      pos0[size_t(r)] = p;
      pos[size_t(r)] = p;
      tokens[size_t(r)] = 100 + r;
      for (int32_t i = 0; i < max_table; ++i)
        tables[size_t(r) * max_table + size_t(i)] = int32_t(rng() % n_blocks);
      max_ctx = std::max(max_ctx, p + 1);
    }
    const std::vector<int32_t> real_tables(tables.begin(), tables.begin() + n * max_table);
    DecodeBatchArrays a{q_start.data(), pos0.data(),   tables.data(),
                        pos.data(),     tokens.data(), max_table};
    pad_decode_rows(a, n, padded, sink);
    for (int32_t r = 0; r < padded; ++r) {
      EXPECT_EQ(q_start[size_t(r) + 1], r + 1);
      if (r < n) {
        EXPECT_EQ(tokens[size_t(r)], 100 + r);  // the batch's rows untouched
        continue;
      }
      EXPECT_EQ(pos0[size_t(r)], 0);
      EXPECT_EQ(pos[size_t(r)], 0);
      EXPECT_EQ(tokens[size_t(r)], 0);
      EXPECT_EQ(tables[size_t(r) * max_table], sink);
      for (int32_t i = 1; i < max_table; ++i)
        EXPECT_EQ(tables[size_t(r) * max_table + size_t(i)], 0);
    }
    EXPECT_TRUE(std::equal(real_tables.begin(), real_tables.end(), tables.begin()));
#ifdef KVASIR_TEST_HAVE_CUDA
    // The kernels' host check accepts the padded batch: the sink is the
    // one block past the daemon's count, the bound the graph's.
    GpuKvLayer kv;
    kv.n_blocks = n_blocks + 1;
    kv.block_size = block;
    kv.n_kv_heads = 3;
    kv.head_dim = 64;
    const DecodeShape s = decode_graph_shape(
        DecodeGraphLimits{32, max_table * block, 9, int32_t(kAttnSplitBelowPairs), kAttnPartition},
        n, max_ctx);
    ASSERT_EQ(s.rows, padded);
    EXPECT_EQ(check_attn_batch_host(kv, q_start.data(), pos0.data(), tables.data(), padded, padded,
                                    max_table, s.context),
              "");
#endif
  }
  // Nothing to pad.
  std::vector<int32_t> one = {0, 1};
  DecodeBatchArrays a{one.data(), nullptr, nullptr, nullptr, nullptr, 4};
  pad_decode_rows(a, 1, 1, 9);
  EXPECT_EQ(one, (std::vector<int32_t>{0, 1}));
}

}  // namespace
}  // namespace kvasir::cuda
