// tests/unit/kernels_cuda/moe_test_util.h — shared by the MoE kernel tests
// (test_moe.cpp, test_moe_ffn.cpp): the shapes swept, random expert choices,
// the host grouping of moe_group.h and the device buffers for it.
#pragma once

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda/moe_group.h"
#include "tests/unit/kernels_cuda/cuda_test.h"

namespace kvasir::cuda::test {

inline const __nv_bfloat16* as_bf(const uint16_t* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}
inline __nv_bfloat16* as_bf(uint16_t* p) {
  return reinterpret_cast<__nv_bfloat16*>(p);
}

struct Shape {
  int64_t n;
  int32_t n_experts, top_k;
};

// Token counts 1, 3, 17, 130 over (n_experts, top_k) pairs that span the MoE
// models served: 8 experts (Mixtral) to 128 (Qwen3-MoE), top 1 to 8.
inline std::vector<Shape> shapes() {
  std::vector<Shape> r;
  for (int64_t n : {1, 3, 17, 130})
    for (auto [e, k] : {std::pair{8, 1}, {8, 2}, {60, 2}, {60, 8}, {128, 8}})
      r.push_back({n, e, k});
  return r;
}

// k distinct experts per token (as a router gives) or, when `skewed`, any of
// the first three experts with repeats (long runs per expert, many tiles).
inline std::vector<int32_t> random_ids(const Shape& s, bool skewed, std::mt19937& rng) {
  std::vector<int32_t> ids(size_t(s.n * s.top_k));
  std::vector<int32_t> all(size_t(s.n_experts));
  for (int64_t t = 0; t < s.n; ++t) {
    for (int32_t e = 0; e < s.n_experts; ++e) all[size_t(e)] = e;
    std::shuffle(all.begin(), all.end(), rng);
    for (int32_t j = 0; j < s.top_k; ++j) {
      ids[size_t(t * s.top_k + j)] =
          skewed ? int32_t(rng() % uint32_t(std::min(3, s.n_experts))) : all[size_t(j)];
    }
  }
  return ids;
}

// The grouping as moe_group.h defines it (the CPU's counting sort; bad ids
// dropped).
struct HostGroup {
  std::vector<int32_t> offsets, slots, pos, tile_expert, tile_row;
  std::vector<uint16_t> xs;
};

inline HostGroup host_group(const std::vector<int32_t>& ids, const Shape& s,
                            const std::vector<uint16_t>& x, int64_t hidden) {
  const int64_t pairs = s.n * s.top_k;
  HostGroup g;
  g.offsets.assign(size_t(s.n_experts) + 1, 0);
  for (int32_t e : ids)
    if (e >= 0 && e < s.n_experts) ++g.offsets[size_t(e) + 1];
  for (int32_t e = 0; e < s.n_experts; ++e) g.offsets[size_t(e) + 1] += g.offsets[size_t(e)];
  std::vector<int32_t> cursor(g.offsets.begin(), g.offsets.end() - 1);
  g.slots.assign(size_t(pairs), -1);
  g.pos.assign(size_t(pairs), -1);
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t e = ids[size_t(i)];
    if (e < 0 || e >= s.n_experts) continue;
    const int32_t r = cursor[size_t(e)]++;
    g.slots[size_t(r)] = int32_t(i);
    g.pos[size_t(i)] = r;
  }
  const int64_t max_tiles = moe_max_tiles(pairs, s.n_experts);
  g.tile_expert.assign(size_t(max_tiles), -1);
  g.tile_row.assign(size_t(max_tiles), 0);
  size_t q = 0;
  for (int32_t e = 0; e < s.n_experts; ++e) {
    for (int32_t r0 = g.offsets[size_t(e)]; r0 < g.offsets[size_t(e) + 1]; r0 += kMoeTileRows) {
      g.tile_expert[q] = e;
      g.tile_row[q] = r0;
      ++q;
    }
  }
  g.xs.assign(size_t(pairs * hidden), 0);
  for (int32_t r = 0; r < g.offsets.back(); ++r) {
    const int64_t t = g.slots[size_t(r)] / s.top_k;
    std::copy_n(x.begin() + t * hidden, hidden, g.xs.begin() + int64_t(r) * hidden);
  }
  return g;
}

// The device grouping's buffers, sized for a shape.
struct DeviceGroup {
  DeviceBuffer<int32_t> offsets, slots, pos, tile_expert, tile_row;
  DeviceBuffer<uint16_t> xs;
  DeviceGroup(const Shape& s, int64_t hidden)
      : offsets(size_t(s.n_experts) + 1),
        slots(size_t(s.n * s.top_k)),
        pos(size_t(s.n * s.top_k)),
        tile_expert(size_t(moe_max_tiles(s.n * s.top_k, s.n_experts))),
        tile_row(size_t(moe_max_tiles(s.n * s.top_k, s.n_experts))),
        xs(size_t(s.n * s.top_k * hidden)) {}
  MoeGroupArgs args(const Shape& s, const int32_t* ids, const uint16_t* x, int64_t hidden,
                    int32_t* error) {
    MoeGroupArgs a;
    a.ids = ids;
    a.x = as_bf(x);
    a.n = s.n;
    a.top_k = s.top_k;
    a.n_experts = s.n_experts;
    a.hidden = hidden;
    a.offsets = offsets.get();
    a.slots = slots.get();
    a.pos = pos.get();
    a.tile_expert = tile_expert.get();
    a.tile_row = tile_row.get();
    a.xs = as_bf(xs.get());
    a.error = error;
    return a;
  }
};

inline std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, float scale = 1.f) {
  return to_bf16(random_floats(n, rng, -scale, scale));
}

}  // namespace kvasir::cuda::test
