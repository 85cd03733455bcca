// kv_append + paged_attention against naive attention over a dense history.
//
// Each case builds, for every row, a dense history K, V: [P, n_kv, hd]
// (rounded through f16 when the cache is F16, so the reference sees exactly
// what the cache holds), writes positions [0, pos0) in earlier kv_append
// calls (as earlier prefill chunks would), then appends the row's new tokens
// and runs paged_attention. Block tables are shuffled over a pool larger than
// needed, so rows share no layout assumption.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "base/check.h"
#include "kernels/cpu/paged_kv.h"
#include "kernels/cpu/simd.h"
#include "reference.h"

namespace kvasir::cpu {
namespace {

struct RowSpec {
  int pos0;
  int n_tokens;
};

struct Case {
  int head_dim, n_kv, group, block_size;
  DType type;
  std::vector<RowSpec> rows;
  int window = 0;  // > 0: sliding-window attention over the last `window` positions
  bool sinks = false;  // a random sink logit per query head (gpt-oss)
};

struct SimdGuard {
  ~SimdGuard() { simd_reset_for_testing(); }  // back to the start-up mode
};

float round_kv(float v, DType t) {
  return t == DType::F16 ? fp16_to_f32(f32_to_fp16(v)) : v;
}

// Runs one case; returns the max abs error against the reference.
double run_case(const Case& c, ThreadPool* pool, std::mt19937& rng) {
  const int hd = c.head_dim, nkv = c.n_kv, nh = c.n_kv * c.group, bs = c.block_size;
  const int n_rows = int(c.rows.size());
  std::normal_distribution<float> nd(0.f, 1.f);

  // Tables: shuffled physical ids from a pool with spare blocks.
  std::vector<int> need(static_cast<size_t>(n_rows));
  int total_blocks = 0;
  for (int r = 0; r < n_rows; ++r) {
    const int last = c.rows[size_t(r)].pos0 + c.rows[size_t(r)].n_tokens - 1;
    need[size_t(r)] = last / bs + 1;
    total_blocks += need[size_t(r)];
  }
  const int n_blocks = total_blocks + 5;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_rows));
  for (int r = 0, next = 0; r < n_rows; ++r)
    for (int b = 0; b < need[size_t(r)]; ++b) tables[size_t(r)].push_back(ids[size_t(next++)]);

  const size_t elem = c.type == DType::F16 ? 2 : 4;
  const size_t cache_elems = size_t(n_blocks) * nkv * bs * hd;
  std::vector<uint8_t> kmem(cache_elems * elem, 0xff), vmem(cache_elems * elem, 0xff);  // NaN fill
  KvLayerView kv{kmem.data(), vmem.data(), c.type, n_blocks, bs, nkv, hd};

  // Dense histories, [P, nkv, hd] per row.
  std::vector<std::vector<float>> kh(static_cast<size_t>(n_rows)), vh(static_cast<size_t>(n_rows));
  for (int r = 0; r < n_rows; ++r) {
    const int P = c.rows[size_t(r)].pos0 + c.rows[size_t(r)].n_tokens;
    for (int i = 0; i < P * nkv * hd; ++i) {
      kh[size_t(r)].push_back(round_kv(nd(rng), c.type));
      vh[size_t(r)].push_back(round_kv(nd(rng), c.type));
    }
  }
  auto row_of = [&](int r, int pos0, int n) {
    AttnRow a;
    a.pos0 = pos0;
    a.n_tokens = n;
    a.block_table = tables[size_t(r)].data();
    a.n_table = int32_t(tables[size_t(r)].size());
    return a;
  };
  // Earlier chunks: history [0, pos0) in pieces of up to 23 tokens, one row per call.
  for (int r = 0; r < n_rows; ++r)
    for (int p = 0; p < c.rows[size_t(r)].pos0; p += 23) {
      const int n = std::min(23, c.rows[size_t(r)].pos0 - p);
      const AttnRow a = row_of(r, p, n);
      kv_append(kv, &a, 1, kh[size_t(r)].data() + size_t(p) * nkv * hd,
                vh[size_t(r)].data() + size_t(p) * nkv * hd);
    }
  // This batch: every row's new tokens at once.
  std::vector<AttnRow> rows;
  std::vector<float> knew, vnew, q;
  for (int r = 0; r < n_rows; ++r) {
    const RowSpec s = c.rows[size_t(r)];
    rows.push_back(row_of(r, s.pos0, s.n_tokens));
    const size_t b = size_t(s.pos0) * nkv * hd, e = size_t(s.pos0 + s.n_tokens) * nkv * hd;
    knew.insert(knew.end(), kh[size_t(r)].begin() + long(b), kh[size_t(r)].begin() + long(e));
    vnew.insert(vnew.end(), vh[size_t(r)].begin() + long(b), vh[size_t(r)].begin() + long(e));
    for (int i = 0; i < s.n_tokens * nh * hd; ++i) q.push_back(nd(rng));
  }
  kv_append(kv, rows.data(), n_rows, knew.data(), vnew.data());
  std::vector<float> out(q.size(), NAN);
  const float scale = 1.f / std::sqrt(float(hd));
  // Sinks around the scores' range (|s| ~ 1) and one far above it (output ~0).
  std::vector<float> sinks;
  for (int h = 0; c.sinks && h < nh; ++h)
    sinks.push_back(h == nh - 1 && nh > 1 ? 30.f : 2.f * nd(rng));
  paged_attention(kv, rows.data(), n_rows, q.data(), nh, scale, out.data(), pool, c.window,
                  c.sinks ? sinks.data() : nullptr);

  double max_err = 0;
  std::vector<float> want(static_cast<size_t>(hd));
  size_t tok = 0;
  for (int r = 0; r < n_rows; ++r) {
    for (int t = 0; t < c.rows[size_t(r)].n_tokens; ++t, ++tok) {
      for (int h = 0; h < nh; ++h) {
        const float* qv = q.data() + (tok * nh + size_t(h)) * hd;
        ref::attend(qv, kh[size_t(r)].data(), vh[size_t(r)].data(), nkv, hd, h / c.group,
                    c.rows[size_t(r)].pos0 + t, scale, want.data(), c.window,
                    c.sinks ? double(sinks[size_t(h)]) : NAN);
        const float* o = out.data() + (tok * nh + size_t(h)) * hd;
        for (int i = 0; i < hd; ++i) {
          if (!std::isfinite(o[i])) return INFINITY;
          max_err = std::max(max_err, double(std::fabs(o[i] - want[size_t(i)])));
        }
      }
    }
  }
  return max_err;
}

// Scalar, and each vector level the CPU has that takes its own attention
// path (AVX2: per-block and tiled; AVX-512: the 16-lane tiled path).
std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> levels{SimdLevel::kScalar};
  if (simd_level_supported() >= SimdLevel::kAvx2) levels.push_back(SimdLevel::kAvx2);
  if (simd_level_supported() >= SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

TEST(PagedAttention, SweepAgainstNaive) {
  SimdGuard guard;
  std::mt19937 rng(42);
  const std::vector<SimdLevel> levels = supported_levels();
  std::unique_ptr<ThreadPool> pools[] = {nullptr, std::make_unique<ThreadPool>(3)};
  // Mixed batches: decodes (1 token) at odd contexts, a first prefill, a
  // later prefill chunk (pos0 > 0, several tokens, crossing blocks).
  const std::vector<std::vector<RowSpec>> batches = {
      {{0, 1}},
      {{16, 1}},
      {{0, 17}, {99, 1}, {40, 21}, {0, 1}},
      {{83, 17}, {5, 12}, {16, 1}},
  };
  for (DType type : {DType::F16, DType::F32})
    for (int hd : {64, 128})
      for (int group : {1, 3, 4})
        for (int bs : {1, 16})
          for (const auto& rows : batches)
            for (SimdLevel level : levels)
              for (auto& pool : pools) {
                set_simd_level_for_testing(level);
                const Case c{hd, 2, group, bs, type, rows};
                const double err = run_case(c, pool.get(), rng);
                ASSERT_LT(err, 2e-5)
                    << dtype_name(type) << " hd=" << hd << " group=" << group << " bs=" << bs
                    << " rows=" << rows.size() << " " << simd_level_name(level);
              }
}

TEST(PagedAttention, TiledPathAtTileEdgesAndOddHeadDims) {
  // Items of many queries take the tiled path (64-key tiles): contexts that
  // end just before, on and just after a tile edge, chunks that start inside
  // a tile, head dims that leave a remainder of output vectors (72: AVX-512
  // falls back to 8 lanes; 80, 96: 16-lane slices of 4 and 1) and blocks
  // that do not divide the tile (5).
  SimdGuard guard;
  std::mt19937 rng(11);
  ThreadPool pool(2);
  const std::vector<std::vector<RowSpec>> batches = {
      {{0, 63}, {1, 64}, {0, 65}},
      {{60, 16}, {127, 3}, {128, 1}, {200, 40}},
      {{0, 12}},
  };
  for (SimdLevel level : supported_levels())
    for (int hd : {64, 72, 80, 96})
      for (int group : {1, 3})
        for (int bs : {5, 16})
          for (const auto& rows : batches) {
            set_simd_level_for_testing(level);
            const Case c{hd, 3, group, bs, DType::F16, rows};
            const double err = run_case(c, &pool, rng);
            ASSERT_LT(err, 2e-5) << "hd=" << hd << " group=" << group << " bs=" << bs << " "
                                 << simd_level_name(level);
          }
}

TEST(PagedAttention, SlidingWindowEqualsMaskedNaive) {
  // Sliding-window layers (Gemma 3's local ones): each query sees the last
  // `window` positions. Windows smaller than a block, than a tile (64), not
  // dividing either, and wider than the context (= full attention); rows
  // whose window starts inside a block, inside a tile, and chunks whose
  // first and last tokens' windows begin in different blocks.
  SimdGuard guard;
  std::mt19937 rng(23);
  ThreadPool pool(3);
  const std::vector<std::vector<RowSpec>> batches = {
      {{0, 1}, {30, 1}, {200, 1}},
      {{0, 40}, {70, 33}, {150, 16}},
      {{5, 90}, {300, 2}},
  };
  for (SimdLevel level : supported_levels())
    for (int window : {1, 7, 16, 50, 64, 100, 1000})
      for (int bs : {5, 16})
        for (int group : {1, 4})
          for (const auto& rows : batches) {
            set_simd_level_for_testing(level);
            const Case c{64, 1, group, bs, DType::F16, rows, window};
            const double err = run_case(c, &pool, rng);
            ASSERT_LT(err, 2e-5) << "window=" << window << " bs=" << bs << " group=" << group
                                 << " " << simd_level_name(level);
          }
}

TEST(PagedAttention, SinksEqualNaive) {
  // gpt-oss: a learned logit per query head in every softmax's denominator,
  // on full and sliding (128) layers alike; both the per-block and the
  // tiled paths (head dims 64 and 72: AVX-512 tiles and its 8-lane fallback).
  SimdGuard guard;
  std::mt19937 rng(31);
  ThreadPool pool(2);
  const std::vector<std::vector<RowSpec>> batches = {
      {{0, 1}, {30, 1}, {200, 1}},
      {{0, 40}, {70, 33}, {150, 16}},
  };
  for (SimdLevel level : supported_levels())
    for (int window : {0, 128})
      for (int hd : {64, 72})
        for (int group : {1, 4})
          for (const auto& rows : batches) {
            set_simd_level_for_testing(level);
            Case c{hd, 2, group, 16, DType::F16, rows, window};
            c.sinks = true;
            const double err = run_case(c, &pool, rng);
            ASSERT_LT(err, 2e-5) << "window=" << window << " hd=" << hd << " group=" << group << " "
                                 << simd_level_name(level);
          }
}

TEST(PagedAttention, SameBitsHoweverTheTokensAreSplit) {
  // 40 tokens at positions 60..99 of one sequence, attended (a) as one row,
  // (b) as 40 one-token rows in one call, (c) in pieces of 3, 16 and 21 beside
  // an unrelated decode: every output equal bit for bit. Greedy outputs with
  // and without a prefix-cache hit, chunked or not, rely on it.
  SimdGuard guard;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int hd = 64, nkv = 3, nh = 9, bs = 16, P = 100, p0 = 60, T = P - p0;
  std::vector<int32_t> table(8);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> other_table = {7};  // the unrelated row: block 7, unused by the sequence
  std::vector<uint16_t> kmem(size_t(8) * nkv * bs * hd), vmem(kmem.size());
  const KvLayerView kv{kmem.data(), vmem.data(), DType::F16, 8, bs, nkv, hd};
  std::vector<float> k(size_t(P) * nkv * hd), v(k.size()), q(size_t(T) * nh * hd);
  for (auto* buf : {&k, &v, &q})
    for (float& x : *buf) x = nd(rng);
  const AttnRow all{0, P, table.data(), 7};
  kv_append(kv, &all, 1, k.data(), v.data());
  const float kOtherQ[nh * hd] = {};
  ThreadPool pool(2);
  for (SimdLevel level : supported_levels()) {
    set_simd_level_for_testing(level);
    std::vector<float> whole(q.size()), single(q.size()), pieces(q.size());
    const AttnRow one{p0, T, table.data(), 7};
    paged_attention(kv, &one, 1, q.data(), nh, 0.125f, whole.data(), &pool);
    std::vector<AttnRow> rows;
    for (int t = 0; t < T; ++t) rows.push_back({p0 + t, 1, table.data(), 7});
    paged_attention(kv, rows.data(), T, q.data(), nh, 0.125f, single.data(), &pool);
    int t0 = 0;
    for (int n : {3, 16, 21}) {
      const AttnRow both[2] = {{3, 1, other_table.data(), 1}, {p0 + t0, n, table.data(), 7}};
      std::vector<float> qq(kOtherQ, kOtherQ + nh * hd), out(size_t(1 + n) * nh * hd);
      qq.insert(qq.end(), q.begin() + long(t0) * nh * hd, q.begin() + long(t0 + n) * nh * hd);
      paged_attention(kv, both, 2, qq.data(), nh, 0.125f, out.data(), nullptr);
      std::copy(out.begin() + nh * hd, out.end(), pieces.begin() + long(t0) * nh * hd);
      t0 += n;
    }
    EXPECT_EQ(0, std::memcmp(whole.data(), single.data(), whole.size() * sizeof(float)))
        << simd_level_name(level);
    EXPECT_EQ(0, std::memcmp(whole.data(), pieces.data(), whole.size() * sizeof(float)))
        << simd_level_name(level);
  }
}

TEST(PagedAttention, SlidingWindowReadsNothingBeforeIt) {
  // A sliding group frees a sequence's blocks once its window has passed
  // them: those table entries become -1. The same queries over a table with
  // every entry before the row's window unmapped give the same bits as over
  // the whole table, on every SIMD path (the tiled one gathers whole tiles
  // of 64, which start before the window), and kv_append writes the row
  // through it. An unmapped entry inside the window is refused.
  SimdGuard guard;
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int hd = 64, nkv = 1, nh = 4, bs = 16, P = 300, n_blocks = 20;
  std::vector<int32_t> table(n_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<uint16_t> kmem(size_t(n_blocks) * nkv * bs * hd), vmem(kmem.size());
  const KvLayerView kv{kmem.data(), vmem.data(), DType::F16, n_blocks, bs, nkv, hd};
  std::vector<float> k(size_t(P) * nkv * hd), v(k.size());
  for (auto* buf : {&k, &v})
    for (float& x : *buf) x = nd(rng);
  ThreadPool pool(2);
  for (int window : {1, 20, 50, 100})
    for (auto [p0, T] : {std::pair{250, 1}, {200, 37}, {130, 70}}) {
      const AttnRow all{0, p0, table.data(), n_blocks};
      kv_append(kv, &all, 1, k.data(), v.data());
      std::vector<int32_t> slid = table;
      const int first = std::max(0, p0 - window + 1) / bs;
      std::fill(slid.begin(), slid.begin() + first, -1);
      const AttnRow row{p0, T, slid.data(), n_blocks};
      kv_append(kv, &row, 1, k.data() + size_t(p0) * nkv * hd, v.data() + size_t(p0) * nkv * hd,
                window);
      std::vector<float> q(size_t(T) * nh * hd);
      for (float& x : q) x = nd(rng);
      for (SimdLevel level : supported_levels()) {
        set_simd_level_for_testing(level);
        std::vector<float> whole(q.size()), freed(q.size());
        const AttnRow full{p0, T, table.data(), n_blocks};
        paged_attention(kv, &full, 1, q.data(), nh, 0.125f, whole.data(), &pool, window);
        paged_attention(kv, &row, 1, q.data(), nh, 0.125f, freed.data(), &pool, window);
        EXPECT_EQ(0, std::memcmp(whole.data(), freed.data(), whole.size() * sizeof(float)))
            << "window " << window << " p0 " << p0 << " " << simd_level_name(level);
      }
      if (first > 0) {
        slid[size_t(first)] = -1;  // the window's first block: must be there
        const AttnRow bad{p0, T, slid.data(), n_blocks};
        std::vector<float> out(q.size());
        EXPECT_THROW(paged_attention(kv, &bad, 1, q.data(), nh, 0.125f, out.data(), &pool, window),
                     Error);
      }
    }
}

TEST(PagedAttention, LongPrefillChunkedAcrossThreads) {
  // A 100-token prompt in one go plus decodes: items are split in token chunks.
  std::mt19937 rng(8);
  ThreadPool pool(2);
  const Case c{64, 3, 3, 16, DType::F16, {{0, 100}, {50, 1}, {7, 1}}};
  EXPECT_LT(run_case(c, &pool, rng), 2e-5);
}

struct Fixture {
  std::vector<uint16_t> k, v;
  KvLayerView kv;
  std::vector<int32_t> table{2, 0};
  std::vector<float> x;
  Fixture() : k(4 * 2 * 4 * 8), v(4 * 2 * 4 * 8), x(64 * 2 * 8, 0.5f) {
    kv = KvLayerView{k.data(), v.data(), DType::F16, 4, 4, 2, 8};
  }
  AttnRow row(int pos0, int n) {
    AttnRow a;
    a.pos0 = pos0;
    a.n_tokens = n;
    a.block_table = table.data();
    a.n_table = int32_t(table.size());
    return a;
  }
};

TEST(PagedKv, PositionBeyondTableThrows) {
  Fixture f;
  const AttnRow ok = f.row(0, 8), bad = f.row(6, 3);  // position 8 → logical block 2 of 2
  EXPECT_NO_THROW(kv_append(f.kv, &ok, 1, f.x.data(), f.x.data()));
  EXPECT_THROW(kv_append(f.kv, &bad, 1, f.x.data(), f.x.data()), kvasir::Error);
  std::vector<float> q(3 * 4 * 8, 1.f), out(q.size());
  EXPECT_THROW(paged_attention(f.kv, &bad, 1, q.data(), 4, 0.3f, out.data(), nullptr),
               kvasir::Error);
}

TEST(PagedKv, OutOfRangeBlockIdThrowsBeforeWriting) {
  Fixture f;
  f.table = {1, 4};  // 4 is not < n_blocks
  const AttnRow a = f.row(0, 6);
  EXPECT_THROW(kv_append(f.kv, &a, 1, f.x.data(), f.x.data()), kvasir::Error);
  for (uint16_t h : f.k) ASSERT_EQ(h, 0);  // nothing written
  f.table = {-1, 0};
  EXPECT_THROW(kv_append(f.kv, &a, 1, f.x.data(), f.x.data()), kvasir::Error);
  std::vector<float> q(6 * 4 * 8, 1.f), out(q.size());
  EXPECT_THROW(paged_attention(f.kv, &a, 1, q.data(), 4, 0.3f, out.data(), nullptr), kvasir::Error);
}

TEST(PagedKv, RejectsBadHeadsAndLayout) {
  Fixture f;
  const AttnRow a = f.row(0, 1);
  std::vector<float> q(5 * 8, 1.f), out(q.size());
  kv_append(f.kv, &a, 1, f.x.data(), f.x.data());
  EXPECT_THROW(paged_attention(f.kv, &a, 1, q.data(), 5, 0.3f, out.data(), nullptr),
               kvasir::Error);  // 5 heads over 2 kv heads
  KvLayerView bad = f.kv;
  bad.type = DType::Q8_0;
  EXPECT_THROW(kv_append(bad, &a, 1, f.x.data(), f.x.data()), kvasir::Error);
  bad = f.kv;
  bad.block_size = 0;
  EXPECT_THROW(kv_append(bad, &a, 1, f.x.data(), f.x.data()), kvasir::Error);
  const AttnRow neg = f.row(-1, 1);
  EXPECT_THROW(kv_append(f.kv, &neg, 1, f.x.data(), f.x.data()), kvasir::Error);
}

TEST(PagedKv, AppendWritesTheDocumentedLayout) {
  // K[phys][head][slot][dim]: token at position 5 (block_size 4) → logical 1,
  // slot 1 → physical table[1] = 0.
  Fixture f;
  std::vector<float> kx(2 * 8), vx(2 * 8);
  for (int i = 0; i < 16; ++i) kx[size_t(i)] = float(i), vx[size_t(i)] = float(-i);
  const AttnRow a = f.row(5, 1);
  kv_append(f.kv, &a, 1, kx.data(), vx.data());
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 8; ++d) {
      const size_t off = ((0 * 2 + size_t(h)) * 4 + 1) * 8 + size_t(d);
      EXPECT_EQ(fp16_to_f32(f.k[off]), float(h * 8 + d));
      EXPECT_EQ(fp16_to_f32(f.v[off]), -float(h * 8 + d));
    }
}

// An F16 cache holds f32_to_fp16's bits at every SIMD level (the append
// converts 8 at a time where F16C is there): ties to even, subnormals,
// overflow to infinity, NaNs (a payload the hardware would keep partly)
// in groups of 8 and in the scalar tail of a head of 19.
TEST(PagedKv, F16AppendHasTheScalarConversionsBits) {
  SimdGuard guard;
  auto from_bits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  const float specials[] = {1.f + 0x1p-11f,  1.f + 0x3p-11f,         -0x1p-25f,
                            0x1.8p-25f,      0x1p-14f,               0x1.ffcp-15f,
                            65519.f,         65520.f,                -1e9f,
                            -0.f,            from_bits(0x7fd5a000u), from_bits(0xff80a000u),
                            INFINITY,        0x1.ff8p-15f};
  const int hd = 19, n_tok = 7, n_blocks = 1;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> kx(size_t(n_tok * hd)), vx(kx.size());  // [n_tok, 1, hd]
  for (size_t i = 0; i < kx.size(); ++i) {
    kx[i] = i % 3 == 0 ? specials[i / 3 % std::size(specials)] : nd(rng);
    vx[i] = i % 5 == 1 ? specials[(i / 5 + 4) % std::size(specials)] : nd(rng) * 1e-5f;
  }
  std::vector<int32_t> table{0};
  AttnRow a;
  a.pos0 = 0;
  a.n_tokens = n_tok;
  a.block_table = table.data();
  a.n_table = 1;
  for (int l = 0; l < kSimdLevels; ++l) {
    if (!simd_level_available(SimdLevel(l))) continue;
    set_simd_level_for_testing(SimdLevel(l));
    std::vector<uint16_t> k(size_t(n_tok * hd), 0xdead), v(k.size(), 0xdead);
    const KvLayerView kv{k.data(), v.data(), DType::F16, n_blocks, n_tok, 1, hd};
    kv_append(kv, &a, 1, kx.data(), vx.data());
    for (size_t i = 0; i < k.size(); ++i) {
      ASSERT_EQ(k[i], f32_to_fp16(kx[i])) << simd_level_name(SimdLevel(l)) << " k " << i;
      ASSERT_EQ(v[i], f32_to_fp16(vx[i])) << simd_level_name(SimdLevel(l)) << " v " << i;
    }
  }
}

}  // namespace
}  // namespace kvasir::cpu
