// kernels/cuda/moe_ffn.cpp — see moe_ffn.h. Host code only: carves the
// workspace and launches the MoE kernels in order.
#include "kernels/cuda/moe_ffn.h"

#include "kernels/cuda/moe_combine.h"
#include "kernels/cuda/moe_gemm.h"
#include "kernels/cuda/moe_group.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/swiglu.h"

namespace kvasir::cuda {
namespace {

constexpr int64_t kLimit = int64_t(1) << 50;  // elements, as the other launchers
constexpr size_t kAlign = 256;

// Byte offsets of the workspace's parts; total 0 = invalid shapes.
struct Layout {
  size_t offsets = 0, slots = 0, pos = 0, tile_expert = 0, tile_row = 0;
  size_t xs = 0, gate = 0, up = 0, act = 0, ys = 0;
  size_t total = 0;
  int64_t pairs = 0, tiles = 0;
};

Layout layout(int64_t n, int32_t top_k, int32_t n_experts, int64_t hidden, int64_t ffn) {
  Layout l;
  if (n < 0 || top_k < 1 || top_k > kMoeMaxTopK || n_experts < 1 || n_experts > kMoeMaxExperts ||
      hidden < 1 || ffn < 1)
    return l;
  if (n > INT32_MAX / top_k) return l;
  const int64_t pairs = n * top_k;
  const int64_t widest = hidden > ffn ? hidden : ffn;
  if (pairs > 0 && widest > kLimit / pairs) return l;
  l.pairs = pairs;
  l.tiles = moe_max_tiles(pairs, n_experts);
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += (bytes + kAlign - 1) / kAlign * kAlign;
    return here;
  };
  const size_t p = size_t(pairs);
  l.offsets = take(sizeof(int32_t) * (size_t(n_experts) + 1));
  l.slots = take(sizeof(int32_t) * p);
  l.pos = take(sizeof(int32_t) * p);
  l.tile_expert = take(sizeof(int32_t) * size_t(l.tiles));
  l.tile_row = take(sizeof(int32_t) * size_t(l.tiles));
  l.xs = take(sizeof(__nv_bfloat16) * p * size_t(hidden));
  l.gate = take(sizeof(float) * p * size_t(ffn));
  l.up = take(sizeof(float) * p * size_t(ffn));
  l.act = take(sizeof(__nv_bfloat16) * p * size_t(ffn));
  l.ys = take(sizeof(float) * p * size_t(hidden));
  l.total = at;
  return l;
}

// The workspace layout and the expert stacks' sizes (elements) do not
// overflow. Checked before the empty-batch shortcut, as the other launchers.
bool sizes_fit(const MoeFfnArgs& a, const Layout& l) {
  return l.total != 0 && a.ffn <= kLimit / a.hidden && a.ffn * a.hidden <= kLimit / a.n_experts;
}

// Every buffer is there and the workspace is large enough (a non-empty batch).
bool buffers_given(const MoeFfnArgs& a, const Layout& l) {
  return a.x != nullptr && a.ids != nullptr && a.weights != nullptr && a.gate != nullptr &&
         a.up != nullptr && a.down != nullptr && a.out != nullptr && a.workspace != nullptr &&
         a.workspace_bytes >= l.total;
}

}  // namespace

size_t moe_ffn_workspace_bytes(int64_t n, int32_t top_k, int32_t n_experts, int64_t hidden,
                               int64_t ffn) {
  return layout(n, top_k, n_experts, hidden, ffn).total;
}

cudaError_t launch_moe_ffn(const MoeFfnArgs& a, cudaStream_t stream) {
  const Layout l = layout(a.n, a.top_k, a.n_experts, a.hidden, a.ffn);
  if (!sizes_fit(a, l)) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  if (!buffers_given(a, l)) return cudaErrorInvalidValue;
  char* ws = static_cast<char*>(a.workspace);
  auto i32 = [&](size_t off) { return reinterpret_cast<int32_t*>(ws + off); };
  auto f32 = [&](size_t off) { return reinterpret_cast<float*>(ws + off); };
  auto bf16 = [&](size_t off) { return reinterpret_cast<__nv_bfloat16*>(ws + off); };

  MoeGroupArgs g;
  g.ids = a.ids;
  g.x = a.x;
  g.n = a.n;
  g.top_k = a.top_k;
  g.n_experts = a.n_experts;
  g.hidden = a.hidden;
  g.offsets = i32(l.offsets);
  g.slots = i32(l.slots);
  g.pos = i32(l.pos);
  g.tile_expert = i32(l.tile_expert);
  g.tile_row = i32(l.tile_row);
  g.xs = bf16(l.xs);
  g.error = a.error;
  if (cudaError_t e = launch_moe_group(g, stream); e != cudaSuccess) return e;

  MoeGemmArgs m;
  m.offsets = g.offsets;
  m.tile_expert = g.tile_expert;
  m.tile_row = g.tile_row;
  m.n_tiles = l.tiles;
  m.rows = l.pairs;
  m.n_experts = a.n_experts;
  m.error = a.error;
  m.xs = g.xs;  // gate and up: [pairs, hidden] -> [pairs, ffn]
  m.n_out = a.ffn;
  m.k = a.hidden;
  m.w = a.gate;
  m.y = f32(l.gate);
  if (cudaError_t e = launch_moe_gemm(m, stream); e != cudaSuccess) return e;
  m.w = a.up;
  m.y = f32(l.up);
  if (cudaError_t e = launch_moe_gemm(m, stream); e != cudaSuccess) return e;

  // Over all pairs: rows of dropped pairs (bad ids) hold stale values, which
  // no later kernel reads back into the output.
  SwiGluArgs s;
  s.gate = f32(l.gate);
  s.up = f32(l.up);
  s.n_rows = l.pairs;
  s.n_ff = a.ffn;
  s.out = bf16(l.act);
  if (cudaError_t e = launch_swiglu(s, stream); e != cudaSuccess) return e;

  m.xs = s.out;  // down: [pairs, ffn] -> [pairs, hidden]
  m.n_out = a.hidden;
  m.k = a.ffn;
  m.w = a.down;
  m.y = f32(l.ys);
  if (cudaError_t e = launch_moe_gemm(m, stream); e != cudaSuccess) return e;

  MoeCombineArgs c;
  c.y = m.y;
  c.rows = l.pairs;
  c.ids = a.ids;
  c.pos = g.pos;
  c.weights = a.weights;
  c.n = a.n;
  c.top_k = a.top_k;
  c.hidden = a.hidden;
  c.out = a.out;
  c.accumulate = a.accumulate;
  c.error = a.error;
  return launch_moe_combine(c, stream);
}

}  // namespace kvasir::cuda
