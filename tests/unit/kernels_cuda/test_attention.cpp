// kv_append + paged attention on the GPU against the CPU kernels
// (kernels/cpu/paged_kv.h) over a sweep: head dims 64/96/128, GQA ratios
// 1/4/8, block sizes 16/32, contexts 1..8192, decode batches (split-KV) and
// prefill chunks (not split), odd pool sizes with shuffled block tables.
//
// K/V are drawn already rounded to bf16 and the CPU cache is F32, so both
// caches hold identical values: the cache comparison is exact, and the
// attention outputs differ only by f32 summation order and the final bf16
// rounding of the GPU output: |got - want| <= 1e-4 + 8e-3 * |want|.
// The host-side batch check runs on every machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "kernels/cpu/paged_kv.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/paged_kv_layout.h"
#include "tests/unit/kernels_cuda/cuda_test.h"

namespace kvasir::cuda {
namespace {

using test::DeviceBuffer;

// ---- host-side batch check: CPU only -----------------------------------------

TEST(CudaAttnBatchCheck, AcceptsGoodBatchesAndNamesTheFirstProblem) {
  GpuKvLayer kv;
  kv.n_blocks = 10;
  kv.block_size = 16;
  kv.n_kv_heads = 2;
  kv.head_dim = 64;
  // Two sequences: 3 new tokens at 30..32 (blocks 0..2), 1 token at 0.
  std::vector<int32_t> q_start = {0, 3, 4}, pos0 = {30, 0};
  std::vector<int32_t> tables = {4, 9, 0, 1, -7, -7};  // max_blocks 3; seq 1 uses entry 0 only
  auto check = [&](int32_t max_context = 33) {
    return check_attn_batch_host(kv, q_start.data(), pos0.data(), tables.data(), 2, 4, 3,
                                 max_context);
  };
  EXPECT_EQ(check(), "");
  EXPECT_NE(check(32).find("exceeds max_context"), std::string::npos);
  tables[2] = 10;
  EXPECT_NE(check().find("maps to block 10"), std::string::npos);
  tables[2] = 0;
  pos0[0] = 40;  // position 42 needs 3 blocks of 16: still fits 3; 50 would not
  EXPECT_EQ(check(43), "");
  pos0[0] = 46;  // last position 48 needs block 3: the table has 3
  EXPECT_NE(check(49).find("needs 4 blocks"), std::string::npos);
  pos0[0] = 30;
  q_start = {0, 3, 2};
  EXPECT_NE(check().find("q_start"), std::string::npos);
  q_start = {1, 3, 4};
  EXPECT_NE(check().find("q_start[0]"), std::string::npos);
  q_start = {0, 3, 4};
  pos0[1] = -1;
  EXPECT_NE(check().find("pos0 -1"), std::string::npos);
  pos0[1] = 0;
  kv.block_size = 0;
  EXPECT_NE(check().find("bad layout"), std::string::npos);
  kv.block_size = 16;
  EXPECT_EQ(check_attn_batch_host(kv, nullptr, nullptr, nullptr, 0, 0, 0, 0), "");
  EXPECT_NE(check_attn_batch_host(kv, nullptr, nullptr, nullptr, 0, 5, 0, 0), "");
  EXPECT_NE(check_attn_batch_host(kv, q_start.data(), nullptr, tables.data(), 2, 4, 3, 33), "");
}

TEST(CudaAttnLaunchers, RejectBadArgumentsWithoutTouchingTheDevice) {
  PagedAttentionArgs a;
  a.kv.n_blocks = 4;
  a.kv.n_kv_heads = 2;
  a.kv.head_dim = 64;
  a.n_heads = 3;  // not a multiple of n_kv_heads
  a.scale = 0.125f;
  a.batch.n_tokens = 1;
  a.batch.n_seqs = 1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_paged_attention(a, nullptr));
  a.n_heads = 4;
  a.kv.head_dim = 258;  // too large
  EXPECT_EQ(cudaErrorInvalidValue, launch_paged_attention(a, nullptr));
  a.kv.head_dim = 63;  // odd
  EXPECT_EQ(cudaErrorInvalidValue, launch_paged_attention(a, nullptr));
  a.kv.head_dim = 64;
  EXPECT_EQ(cudaErrorInvalidValue, launch_paged_attention(a, nullptr));  // null pointers
  a.batch.n_tokens = 0;
  EXPECT_EQ(cudaSuccess, launch_paged_attention(a, nullptr));

  KvAppendArgs k;
  k.kv = a.kv;
  k.batch.n_tokens = 2;
  k.batch.n_seqs = 1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_kv_append(k, nullptr));
  k.kv.block_size = -1;
  EXPECT_EQ(cudaErrorInvalidValue, launch_kv_append(k, nullptr));

  EXPECT_EQ(paged_attention_workspace_bytes(1, 32, 128, 512), 0u);  // one partition: none
  EXPECT_EQ(paged_attention_workspace_bytes(1, 32, 128, 513), 2u * 32 * 130 * 4);
  EXPECT_EQ(paged_attention_workspace_bytes(1, 32, 128, 8192), 16u * 32 * 130 * 4);
  EXPECT_EQ(paged_attention_workspace_bytes(100, 32, 128, 8192), 0u);  // enough pairs: no split
}

// ---- GPU against CPU ---------------------------------------------------------

struct Seq {
  int pos0, n_new;
};

struct Case {
  const char* name;
  int head_dim, n_kv, group, block_size;
  std::vector<Seq> seqs;
  // Workspace given to the launcher: -1 = what it asks for.
  int64_t workspace = -1;
};

// Host copies of a packed batch.
struct HostBatch {
  std::vector<int32_t> q_start, pos0, tables;
  int32_t max_blocks = 0, max_context = 0, n_tokens = 0;
};

HostBatch make_batch(const std::vector<Seq>& seqs, const std::vector<std::vector<int32_t>>& tables,
                     int32_t max_blocks) {
  HostBatch b;
  b.q_start.push_back(0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    b.q_start.push_back(b.q_start.back() + seqs[s].n_new);
    b.pos0.push_back(seqs[s].pos0);
    b.max_context = std::max(b.max_context, seqs[s].pos0 + seqs[s].n_new);
    std::vector<int32_t> row = tables[s];
    row.resize(size_t(max_blocks), -1);
    b.tables.insert(b.tables.end(), row.begin(), row.end());
  }
  b.n_tokens = b.q_start.back();
  b.max_blocks = max_blocks;
  return b;
}

struct DeviceBatch {
  DeviceBuffer<int32_t> q_start, pos0, tables;
  GpuAttnBatch view;
  explicit DeviceBatch(const HostBatch& h) : q_start(h.q_start), pos0(h.pos0), tables(h.tables) {
    view.q_start = q_start.get();
    view.pos0 = pos0.get();
    view.block_tables = tables.get();
    view.n_seqs = int32_t(h.pos0.size());
    view.n_tokens = h.n_tokens;
    view.max_blocks = h.max_blocks;
    view.max_context = h.max_context;
  }
};

std::vector<float> bf16_floats(size_t n, std::mt19937& rng, float lo, float hi) {
  std::vector<float> v = test::random_floats(n, rng, lo, hi);
  for (float& x : v) x = test::round_bf16(x);
  return v;
}

void run_case(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(c.name);
  const int hd = c.head_dim, n_kv = c.n_kv, n_heads = c.n_kv * c.group, bs = c.block_size;
  const int n_seqs = int(c.seqs.size());

  // Block tables: shuffled ids over a pool a few (odd number) blocks larger.
  std::vector<int32_t> need(static_cast<size_t>(n_seqs));
  int total_blocks = 0, max_blocks = 0;
  for (int s = 0; s < n_seqs; ++s) {
    need[size_t(s)] = (c.seqs[size_t(s)].pos0 + c.seqs[size_t(s)].n_new + bs - 1) / bs;
    total_blocks += need[size_t(s)];
    max_blocks = std::max(max_blocks, need[size_t(s)]);
  }
  const int n_blocks = total_blocks + 3;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_seqs));
  for (int s = 0, next = 0; s < n_seqs; ++s)
    for (int b = 0; b < need[size_t(s)]; ++b) tables[size_t(s)].push_back(ids[size_t(next++)]);

  // History (positions 0 .. pos0-1, as earlier chunks wrote them) and new tokens.
  std::vector<Seq> hist_seqs, new_seqs = c.seqs;
  for (const Seq& s : c.seqs) hist_seqs.push_back(Seq{0, s.pos0});
  const HostBatch hb = make_batch(hist_seqs, tables, max_blocks + 1);
  const HostBatch nb = make_batch(new_seqs, tables, max_blocks + 1);
  const size_t per_tok = size_t(n_kv) * hd;
  const std::vector<float> hk = bf16_floats(size_t(hb.n_tokens) * per_tok, rng, -1.f, 1.f);
  const std::vector<float> hv = bf16_floats(size_t(hb.n_tokens) * per_tok, rng, -1.f, 1.f);
  const std::vector<float> k = bf16_floats(size_t(nb.n_tokens) * per_tok, rng, -1.f, 1.f);
  const std::vector<float> v = bf16_floats(size_t(nb.n_tokens) * per_tok, rng, -1.f, 1.f);
  const std::vector<float> q =
      test::random_floats(size_t(nb.n_tokens) * n_heads * hd, rng, -3.f, 3.f);
  const float scale = 1.f / std::sqrt(float(hd));

  GpuKvLayer kv;
  kv.n_blocks = n_blocks;
  kv.block_size = bs;
  kv.n_kv_heads = n_kv;
  kv.head_dim = hd;
  ASSERT_EQ(check_attn_batch_host(kv, hb.q_start.data(), hb.pos0.data(), hb.tables.data(), n_seqs,
                                  hb.n_tokens, hb.max_blocks, hb.max_context),
            "");
  ASSERT_EQ(check_attn_batch_host(kv, nb.q_start.data(), nb.pos0.data(), nb.tables.data(), n_seqs,
                                  nb.n_tokens, nb.max_blocks, nb.max_context),
            "");

  // CPU reference: F32 cache holding the same (bf16-exact) values.
  const size_t cache_elems = size_t(n_blocks) * n_kv * bs * hd;
  std::vector<float> ck(cache_elems, 0.f), cv(cache_elems, 0.f);
  cpu::KvLayerView ckv;
  ckv.k = ck.data();
  ckv.v = cv.data();
  ckv.type = DType::F32;
  ckv.n_blocks = n_blocks;
  ckv.block_size = bs;
  ckv.n_kv_heads = n_kv;
  ckv.head_dim = hd;
  auto cpu_rows = [&](const std::vector<Seq>& seqs) {
    std::vector<cpu::AttnRow> rows;
    for (size_t s = 0; s < seqs.size(); ++s)
      rows.push_back(
          cpu::AttnRow{seqs[s].pos0, seqs[s].n_new, tables[s].data(), int32_t(tables[s].size())});
    return rows;
  };
  const std::vector<cpu::AttnRow> hrows = cpu_rows(hist_seqs), nrows = cpu_rows(new_seqs);
  cpu::kv_append(ckv, hrows.data(), n_seqs, hk.data(), hv.data());
  cpu::kv_append(ckv, nrows.data(), n_seqs, k.data(), v.data());
  std::vector<float> want(q.size());
  cpu::paged_attention(ckv, nrows.data(), n_seqs, q.data(), n_heads, scale, want.data(), nullptr);

  // GPU.
  DeviceBuffer<uint16_t> gk(cache_elems), gv(cache_elems);
  gk.fill_bytes(0);
  gv.fill_bytes(0);
  kv.k = reinterpret_cast<__nv_bfloat16*>(gk.get());
  kv.v = reinterpret_cast<__nv_bfloat16*>(gv.get());
  DeviceBatch dhb(hb), dnb(nb);
  DeviceBuffer<float> dhk(hk), dhv(hv), dk(k), dv(v), dq(q);
  DeviceBuffer<uint16_t> dout(q.size());
  DeviceBuffer<int32_t> err(std::vector<int32_t>{0});
  KvAppendArgs ka;
  ka.kv = kv;
  ka.batch = dhb.view;
  ka.k = dhk.get();
  ka.v = dhv.get();
  ka.error = err.get();
  KV_CUDA_OK(launch_kv_append(ka, nullptr));
  ka.batch = dnb.view;
  ka.k = dk.get();
  ka.v = dv.get();
  KV_CUDA_OK(launch_kv_append(ka, nullptr));

  const size_t ws_want = paged_attention_workspace_bytes(nb.n_tokens, n_heads, hd, nb.max_context);
  const size_t ws = c.workspace < 0 ? ws_want : size_t(c.workspace);
  DeviceBuffer<float> dws((ws + 3) / 4);
  PagedAttentionArgs pa;
  pa.kv = kv;
  pa.batch = dnb.view;
  pa.q = dq.get();
  pa.n_heads = n_heads;
  pa.scale = scale;
  pa.out = reinterpret_cast<__nv_bfloat16*>(dout.get());
  pa.workspace = ws > 0 ? dws.get() : nullptr;
  pa.workspace_bytes = ws;
  pa.error = err.get();
  KV_CUDA_OK(launch_paged_attention(pa, nullptr));
  KV_CUDA_OK(cudaDeviceSynchronize());

  EXPECT_EQ(err.read()[0], kErrorNone);
  EXPECT_EQ(test::from_bf16(gk.read()), ck);  // identical caches, every slot
  EXPECT_EQ(test::from_bf16(gv.read()), cv);
  const std::vector<float> got = test::from_bf16(dout.read());
  EXPECT_EQ(test::count_nan(got), 0u);
  EXPECT_LE(test::worst_error(got, want, 1e-4, 8e-3), 1.0);
}

TEST(CudaPagedAttention, SweepMatchesCpu) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(21);
  const std::vector<Case> cases = {
      {"decode hd64 mha, contexts 1..8192 (split-KV)",
       64,
       3,
       1,
       16,
       {{0, 1}, {16, 1}, {100, 1}, {8191, 1}}},
      {"mixed hd128 gqa4: decode + prefill chunks",
       128,
       2,
       4,
       16,
       {{0, 1}, {2047, 1}, {513, 1}, {0, 37}, {300, 64}}},
      {"prefill hd64 gqa8 bs32 (no split) + one long decode", 64, 1, 8, 32, {{0, 300}, {4000, 1}}},
      {"decode hd128 gqa4 32 heads, partition edges",
       128,
       8,
       4,
       16,
       {{0, 1}, {6, 1}, {63, 1}, {510, 1}, {511, 1}, {512, 1}, {1024, 1}, {8191, 1}}},
      {"hd96 (partial lanes) gqa1 prefill at an offset", 96, 2, 1, 16, {{33, 50}, {0, 17}}},
      {"mixed hd128 gqa4, no workspace (unsplit fallback)",
       128,
       2,
       4,
       16,
       {{0, 1}, {2047, 1}, {513, 1}, {0, 37}},
       0},
      {"mixed hd128 gqa4, workspace too small for all partitions",
       128,
       2,
       4,
       16,
       {{0, 1}, {2047, 1}, {513, 1}, {0, 37}},
       4096},
      {"long prefill chunk hd128 gqa8 at 6000", 128, 1, 8, 16, {{6000, 200}}},
  };
  for (const Case& c : cases) run_case(c, rng);
}

TEST(CudaPagedAttention, BadBlockIdIsFlaggedNotFollowed) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(22);
  const int hd = 64, n_kv = 1, n_heads = 2, bs = 16, n_blocks = 5;
  // Sequence 0 is fine (blocks 0, 1); sequence 1's second block is out of range.
  const HostBatch b = make_batch({{20, 1}, {20, 1}}, {{0, 1}, {2, n_blocks + 7}}, 2);
  GpuKvLayer kv;
  kv.n_blocks = n_blocks;
  kv.block_size = bs;
  kv.n_kv_heads = n_kv;
  kv.head_dim = hd;
  EXPECT_NE(check_attn_batch_host(kv, b.q_start.data(), b.pos0.data(), b.tables.data(), 2,
                                  b.n_tokens, b.max_blocks, b.max_context),
            "");
  const size_t cache_elems = size_t(n_blocks) * n_kv * bs * hd;
  DeviceBuffer<uint16_t> gk(test::to_bf16(test::random_floats(cache_elems, rng)));
  DeviceBuffer<uint16_t> gv(test::to_bf16(test::random_floats(cache_elems, rng)));
  const std::vector<uint16_t> k_before = gk.read();
  kv.k = reinterpret_cast<__nv_bfloat16*>(gk.get());
  kv.v = reinterpret_cast<__nv_bfloat16*>(gv.get());
  DeviceBatch db(b);
  DeviceBuffer<float> dq(test::random_floats(size_t(2) * n_heads * hd, rng));
  DeviceBuffer<float> dk(test::random_floats(size_t(2) * n_kv * hd, rng));
  DeviceBuffer<uint16_t> dout(size_t(2) * n_heads * hd);
  DeviceBuffer<int32_t> err(std::vector<int32_t>{0});

  PagedAttentionArgs pa;
  pa.kv = kv;
  pa.batch = db.view;
  pa.q = dq.get();
  pa.n_heads = n_heads;
  pa.scale = 0.125f;
  pa.out = reinterpret_cast<__nv_bfloat16*>(dout.get());
  pa.error = err.get();
  KV_CUDA_OK(launch_paged_attention(pa, nullptr));
  KV_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(err.read()[0], kErrorBlockId);
  const std::vector<float> out = test::from_bf16(dout.read());
  for (int i = 0; i < n_heads * hd; ++i) {
    EXPECT_FALSE(std::isnan(out[size_t(i)]));                // sequence 0: fine
    EXPECT_TRUE(std::isnan(out[size_t(n_heads * hd + i)]));  // sequence 1: poisoned
  }

  // kv_append of the same batch writes sequence 0's token only.
  err.fill_bytes(0);
  KvAppendArgs ka;
  ka.kv = kv;
  ka.batch = db.view;
  ka.k = dk.get();
  ka.v = dk.get();
  ka.error = err.get();
  KV_CUDA_OK(launch_kv_append(ka, nullptr));
  KV_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(err.read()[0], kErrorBlockId);
  const std::vector<uint16_t> k_after = gk.read();
  size_t changed = 0;
  for (size_t i = 0; i < k_after.size(); ++i) changed += k_after[i] != k_before[i];
  EXPECT_LE(changed, size_t(n_kv * hd));  // at most the one good token's slot
  // Position 20 of sequence 0 -> block 1, slot 4.
  for (int d = 0; d < hd; ++d)
    EXPECT_EQ(k_after[size_t((1 * n_kv * bs + 4) * hd + d)], f32_to_bf16(dk.read()[size_t(d)]));
}

}  // namespace
}  // namespace kvasir::cuda
