// RoPE + KV append in one kernel (kernels/cuda/rope_kv_append.h) against the
// CPU kernels: cpu::rope on q and k, cpu::kv_append into an F32 cache.
// Odd shapes: head dims 64/96/128 with full and partial rotation, both
// layouts, Llama-3 and linear scaling, GQA ratios 1/3/8, block sizes 16 and
// 32, several rows at offsets over shuffled block tables, and a row whose
// block id is out of range (flagged, nothing of it written).
// Tolerances: q as launch_rope's (1e-5 + 1e-5·|want|); the cache holds
// bf16(rope(k)) where the CPU's f32 rotation may differ by that much, so a
// K entry may be one bf16 rounding away (4e-3·|want| + 1e-5); V is exact.
// The argument checks run on every machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kernels/cpu/paged_kv.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/rope_kv_append.h"
#include "tests/unit/kernels_cuda/cuda_test.h"

namespace kvasir::cuda {
namespace {

using test::DeviceBuffer;

TEST(CudaRopeKvAppendArgs, RejectBadArgumentsWithoutTouchingTheDevice) {
  RopeKvAppendArgs a;
  EXPECT_EQ(launch_rope_kv_append(a, nullptr), cudaErrorInvalidValue);  // no shape
  a.kv.n_blocks = 4;
  a.kv.block_size = 16;
  a.kv.n_kv_heads = 2;
  a.kv.head_dim = 64;
  a.n_heads = 8;
  a.rot_dim = 64;
  a.batch.n_seqs = 1;
  a.batch.n_tokens = 0;
  EXPECT_EQ(launch_rope_kv_append(a, nullptr), cudaSuccess);  // nothing to do
  a.batch.n_tokens = 3;
  EXPECT_EQ(launch_rope_kv_append(a, nullptr), cudaErrorInvalidValue);  // null pointers
  a.rot_dim = 63;
  EXPECT_EQ(launch_rope_kv_append(a, nullptr), cudaErrorInvalidValue);
  a.rot_dim = 66;
  EXPECT_EQ(launch_rope_kv_append(a, nullptr), cudaErrorInvalidValue);
  a.rot_dim = 64;
  a.linear_factor = 0.f;
  EXPECT_EQ(launch_rope_kv_append(a, nullptr), cudaErrorInvalidValue);
  a.linear_factor = 1.f;
  a.layout = static_cast<RopeLayout>(9);
  EXPECT_EQ(launch_rope_kv_append(a, nullptr), cudaErrorInvalidValue);
}

struct Row {
  int pos0, n_new;
};

struct Case {
  int head_dim, rot_dim, n_kv, group, block_size;
  cpu::RopeStyle style;
  float llama3, linear;
  std::vector<Row> rows;
  bool bad_block = false;  // the last row's table points past the pool
};

void run_case(const Case& c, std::mt19937& rng) {
  const int hd = c.head_dim, nk = c.n_kv, nq = c.n_kv * c.group, bs = c.block_size;
  const int n_rows = int(c.rows.size());
  // Tables over a shuffled pool a few blocks larger than needed.
  int total = 0, max_blocks = 0;
  for (const Row& r : c.rows) {
    const int need = (r.pos0 + r.n_new + bs - 1) / bs;
    total += need;
    max_blocks = std::max(max_blocks, need);
  }
  const int n_blocks = total + 3;
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_rows));
  std::vector<int32_t> q_start{0}, pos0, flat, pos;
  for (int s = 0, next = 0; s < n_rows; ++s) {
    const Row& r = c.rows[size_t(s)];
    for (int i = 0; i < (r.pos0 + r.n_new + bs - 1) / bs; ++i)
      tables[size_t(s)].push_back(ids[size_t(next++)]);
    std::vector<int32_t> t = tables[size_t(s)];
    if (c.bad_block && s == n_rows - 1) t.back() = n_blocks + 5;
    t.resize(size_t(max_blocks), -1);
    flat.insert(flat.end(), t.begin(), t.end());
    q_start.push_back(q_start.back() + r.n_new);
    pos0.push_back(r.pos0);
    for (int i = 0; i < r.n_new; ++i) pos.push_back(r.pos0 + i);
  }
  const int T = q_start.back();
  const int width = (nq + 2 * nk) * hd;
  const std::vector<float> qkv = test::random_floats(size_t(T) * width, rng, -2.f, 2.f);

  // CPU: split q, k, v; rope; append into an F32 cache.
  cpu::RopeConfig rc;
  rc.head_dim = hd;
  rc.rot_dim = c.rot_dim;
  rc.theta = 500000.f;
  rc.style = c.style;
  rc.llama3_factor = c.llama3;
  rc.linear_factor = c.linear;
  const std::vector<float> inv = cpu::rope_inv_freq(rc);
  std::vector<float> q(size_t(T) * nq * hd), k(size_t(T) * nk * hd), v(size_t(T) * nk * hd);
  for (int t = 0; t < T; ++t) {
    const float* row = qkv.data() + size_t(t) * width;
    std::copy(row, row + nq * hd, q.begin() + size_t(t) * nq * hd);
    std::copy(row + nq * hd, row + (nq + nk) * hd, k.begin() + size_t(t) * nk * hd);
    std::copy(row + (nq + nk) * hd, row + width, v.begin() + size_t(t) * nk * hd);
  }
  cpu::rope(rc, inv.data(), pos.data(), T, nq, q.data());
  cpu::rope(rc, inv.data(), pos.data(), T, nk, k.data());
  const size_t cache = size_t(n_blocks) * nk * bs * hd;
  std::vector<float> ck(cache, 0.f), cv(cache, 0.f);
  cpu::KvLayerView ckv{ck.data(), cv.data(), DType::F32, n_blocks, bs, nk, hd};
  std::vector<cpu::AttnRow> crow;
  for (int s = 0; s < n_rows - (c.bad_block ? 1 : 0); ++s)
    crow.push_back(cpu::AttnRow{c.rows[size_t(s)].pos0, c.rows[size_t(s)].n_new,
                                tables[size_t(s)].data(), int32_t(tables[size_t(s)].size())});
  cpu::kv_append(ckv, crow.data(), int(crow.size()), k.data(), v.data());

  // GPU.
  DeviceBuffer<float> dqkv(qkv), dq(q.size()), dinv(inv);
  DeviceBuffer<int32_t> dqs(q_start), dp0(pos0), dtab(flat), dpos(pos),
      err(std::vector<int32_t>{0});
  DeviceBuffer<uint16_t> gk(cache), gv(cache);
  gk.fill_bytes(0);
  gv.fill_bytes(0);
  RopeKvAppendArgs a;
  a.qkv = dqkv.get();
  a.q_out = dq.get();
  a.kv = GpuKvLayer{reinterpret_cast<__nv_bfloat16*>(gk.get()),
                    reinterpret_cast<__nv_bfloat16*>(gv.get()),
                    n_blocks,
                    bs,
                    nk,
                    hd};
  a.batch.q_start = dqs.get();
  a.batch.pos0 = dp0.get();
  a.batch.block_tables = dtab.get();
  a.batch.n_seqs = n_rows;
  a.batch.n_tokens = T;
  a.batch.max_blocks = max_blocks;
  a.pos = dpos.get();
  a.inv_freq = dinv.get();
  a.n_heads = nq;
  a.rot_dim = c.rot_dim;
  a.layout = c.style == cpu::RopeStyle::kHalf ? RopeLayout::kHalf : RopeLayout::kAdjacent;
  a.linear_factor = c.linear;
  a.error = err.get();
  KV_CUDA_OK(launch_rope_kv_append(a, nullptr));
  KV_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(err.read()[0], c.bad_block ? kErrorBlockId : kErrorNone);
  EXPECT_LE(test::worst_error(dq.read(), q, 1e-5, 1e-5), 1.0);  // every row, the bad one too
  std::vector<float> want_k(cache);
  for (size_t i = 0; i < cache; ++i) want_k[i] = test::round_bf16(ck[i]);
  EXPECT_LE(test::worst_error(test::from_bf16(gk.read()), want_k, 1e-5, 4e-3), 1.0);
  std::vector<float> want_v(cache);
  for (size_t i = 0; i < cache; ++i) want_v[i] = test::round_bf16(cv[i]);
  EXPECT_EQ(test::from_bf16(gv.read()), want_v);
}

TEST(CudaRopeKvAppend, MatchesCpuRopeThenKvAppend) {
  KV_REQUIRE_CUDA();
  std::mt19937 rng(31);
  using S = cpu::RopeStyle;
  const std::vector<Case> cases = {
      {64, 64, 3, 3, 16, S::kAdjacent, 0.f, 1.f, {{0, 20}, {5, 1}, {31, 2}}},  // SmolLM2-like
      {64, 32, 2, 1, 16, S::kHalf, 0.f, 1.f, {{0, 7}, {100, 3}}},              // partial rotation
      {128, 128, 8, 4, 16, S::kHalf, 8.f, 1.f, {{0, 1}, {4095, 1}, {777, 1}, {16, 1}}},  // decode
      {128, 96, 1, 8, 32, S::kAdjacent, 0.f, 4.f, {{40, 33}}},                           // linear
      {96, 96, 2, 2, 32, S::kHalf, 0.f, 1.f, {{0, 5}, {64, 9}}, /*bad_block=*/true},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    run_case(cases[i], rng);
  }
}

}  // namespace
}  // namespace kvasir::cuda
