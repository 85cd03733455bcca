// The matmul driver: validation, activation quantisation, tiling and the
// split over the pool. Per-format dot kernels: matmul_quant.cpp,
// matmul_kquant.cpp, matmul_mxfp4.cpp, matmul_float.cpp.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "base/check.h"
#include "base/half.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/rows16.h"

namespace kvasir::cpu {
namespace {

using detail::BlockQ8x;
using detail::kQK;
using detail::load_u16;

bool is_kquant(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}
bool is_quant(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 ||
         t == DType::MXFP4 || is_kquant(t);
}
bool is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

// The form a weight type's kernels take the activations in: f32 as they are,
// 8-bit blocks of 32 (BlockQ8x) or of 256 (BlockQ8K, the K-quants).
enum class ActKind { kF32, kQ8x, kQ8K };
ActKind act_kind(DType t) {
  return is_kquant(t) ? ActKind::kQ8K : is_quant(t) ? ActKind::kQ8x : ActKind::kF32;
}

// Row bytes of w after checking type, shape and size.
uint64_t checked_row_bytes(const TensorView& w) {
  KV_CHECK(is_quant(w.type) || is_float(w.type), "matmul: weight type {} is not supported on CPU",
           dtype_name(w.type));
  KV_CHECK(w.cols() > 0 && w.rows() >= 0, "matmul: bad weight shape [{} x {}]", w.rows(), w.cols());
  const auto rb = dtype_row_bytes(w.type, w.cols());
  KV_CHECK(rb.has_value(), "matmul: {} rows of {} are not a multiple of the block size {}",
           dtype_name(w.type), w.cols(), dtype_info(w.type).block);
  uint64_t need = 0;
  KV_CHECK(!__builtin_mul_overflow(*rb, uint64_t(w.rows()), &need) && w.nbytes >= need,
           "matmul: tensor holds {} bytes, shape [{} x {}] {} needs {}", w.nbytes, w.rows(),
           w.cols(), dtype_name(w.type), need);
  KV_CHECK(w.data != nullptr || need == 0, "matmul: weight has no data");
  return *rb;
}

// Activation tile: as many rows as fit ~32 KiB, a multiple of 4, in [4, 64].
int64_t act_tile(int64_t x_row_bytes) {
  int64_t t = 32768 / std::max<int64_t>(x_row_bytes, 1);
  t = std::clamp<int64_t>(t, 4, 64);
  return t & ~int64_t(3);
}

constexpr int64_t kRowTile = 16;  // weight rows per tile (a few KiB, stays in L1)

std::atomic<int> g_max_nw{detail::kMaxNW};

// Whether K-quant batches run matmul_kquant_batch.cpp's kernel (where the
// level has one): KVASIR_KQUANT_BATCH=0 keeps the decode tiles, for
// comparisons. -1: the environment not read yet.
std::atomic<int> g_kquant_batch{-1};
// From 8 rows: at 4 the unpacking, amortised over 4 rows only, left the
// kernel level with the tiles (0.96-1.27x over the 1B shapes, measured with
// the kernel taking n = 4 in bench_kernels_matmul's kbatch mode); at 8 it
// won (1.07-1.30x).
constexpr int64_t kKQuantBatchRows = 8;

// Likewise for MXFP4's batch kernel (KVASIR_MXFP4_BATCH=0: the decode
// tiles), from kMxfp4BatchRows rows.
std::atomic<int> g_mxfp4_batch{-1};
constexpr int64_t kMxfp4BatchRows = 4;

bool mxfp4_batch_on() {
  int v = g_mxfp4_batch.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("KVASIR_MXFP4_BATCH");
    v = e && std::strcmp(e, "0") == 0 ? 0 : 1;
    g_mxfp4_batch.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

bool kquant_batch_on() {
  int v = g_kquant_batch.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("KVASIR_KQUANT_BATCH");
    v = e && std::strcmp(e, "0") == 0 ? 0 : 1;
    g_kquant_batch.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

}  // namespace

void detail::set_kquant_batch_for_bench(bool on) {
  g_kquant_batch.store(on ? 1 : 0, std::memory_order_relaxed);
}

void detail::set_mxfp4_batch_for_bench(bool on) {
  g_mxfp4_batch.store(on ? 1 : 0, std::memory_order_relaxed);
}

void detail::set_max_tile_rows_for_bench(int nw) {
  g_max_nw.store(std::clamp(nw, 1, detail::kMaxNW), std::memory_order_relaxed);
}

detail::DotFn detail::wide_dot_kernel(DType type, SimdLevel level) {
  return type != DType::MXFP4 && !is_kquant(type) && is_quant(type) ? quant_wide_kernel(type, level)
                                                                     : nullptr;
}

detail::DotFn detail::dot_kernel(DType type, SimdLevel level) {
  return type == DType::MXFP4 ? mxfp4_dot_kernel(level)
         : is_kquant(type)    ? kquant_dot_kernel(type, level)
         : is_quant(type)     ? quant_dot_kernel(type, level)
                              : float_dot_kernel(type, level);
}

int detail::decode_streams(DType type, SimdLevel level, int64_t cols) {
  return is_kquant(type) ? kquant_decode_streams(type, level, cols) : 2;
}

namespace {
// Whether a batch of n rows of w runs on the AMX tiles, and with which kept
// copy (null: packed per call). One lookup of the copy, none where the
// tiles are out of the question.
bool use_amx(const TensorView& w, RowsClass rc, int64_t n,
             std::shared_ptr<const detail::AmxPacked>* kept) {
  if (rc != RowsClass::kBatch) return false;
  const int from = detail::kernel_amx_packed_rows(w.type);
  const bool unpacked = n >= detail::kAmxRows && detail::kernel_amx(w.type);
  if (!unpacked && !(from > 0 && n >= from)) return false;
  *kept = detail::amx_find_packed(w);
  return unpacked || *kept;
}

void matmul_checked(const TensorView& w, uint64_t row_bytes, const float* x, int64_t n, float* y,
                    ThreadPool* pool, SimdLevel level);
}  // namespace

void matmul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  const uint64_t row_bytes = checked_row_bytes(w);
  KV_CHECK(n >= 0, "matmul: negative row count {}", n);
  if (n == 0 || w.rows() == 0) return;
  if (const auto kept16 = detail::rows16_find(w)) {  // keep_rows16: every n, the same bits
    KV_CHECK(x != nullptr && y != nullptr, "matmul: null activation or output");
    return rows16_matmul(kept16->view, x, n, y, pool);
  }
  const RowsClass rc = rows_class(n);
  const SimdLevel level = detail::kernel_level(w.type, rc, w.cols());
  std::shared_ptr<const detail::AmxPacked> kept;
  if (use_amx(w, rc, n, &kept))
    return detail::amx_matmul(w, x, n, y, pool, /*emulate=*/false, kept.get());
  matmul_checked(w, row_bytes, x, n, y, pool, level);
}

void detail::matmul_at(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool,
                       SimdLevel level) {
  const uint64_t row_bytes = checked_row_bytes(w);
  KV_CHECK(n >= 0, "matmul: negative row count {}", n);
  matmul_checked(w, row_bytes, x, n, y, pool, level);
}

namespace {

// Decode (fewer than 4 activation rows, or up to kMaxNXWide where the type
// has a wide tile — a decode row carrying speculative drafts — with 2
// streams): the rows r0..r1 of a thread as `streams` (4 or 2) runs of q
// rows, tiles taking row r of every run — (r, r + q, r + 2q, r + 3q) — so
// that that many weight streams far apart are read side by side. One core's sequential read of one stream is capped by
// how far its prefetchers run ahead — two streams read interleaved go
// faster than one, four faster than two — and single-stream decode reads
// every weight once (docs/kernels.md, "Weight streams in decode", has the
// figures). Rows left over take the next smaller count; kernels with 1-row
// tiles run a tile's rows one after the other.
void decode_rows(detail::DotFn dot, int streams, const uint8_t* w, uint64_t row_bytes,
                 const void* x, int64_t x_stride, int64_t n, int64_t cols, float* y, int64_t rows,
                 int64_t r0, int64_t r1) {
  const int nx = int(n);
  float tmp[4 * detail::kMaxNXWide];  // [nx, s]
  int64_t r = r0;
  for (int s = streams; s >= 2; s /= 2) {
    const int64_t q = (r1 - r) / s;
    for (int64_t k = r; k < r + q; ++k) {
      dot(w + uint64_t(k) * row_bytes, q * int64_t(row_bytes), s, x, x_stride, nx, cols, tmp, s);
      for (int j = 0; j < nx; ++j)
        for (int i = 0; i < s; ++i) y[j * rows + k + i * q] = tmp[j * s + i];
    }
    r += s * q;
  }
  for (; r < r1; ++r)
    dot(w + uint64_t(r) * row_bytes, int64_t(row_bytes), 1, x, x_stride, nx, cols, y + r, rows);
}

// The activations in a kernel's input form: x itself, or [n, nb] Q8 blocks
// (BlockQ8x, or BlockQ8K for the K-quants) quantised at `level` into the
// calling thread's grow-only buffer (valid until that thread's next call).
struct Activations {
  const void* data = nullptr;
  int64_t stride = 0;     // in elements of the kernel's input
  int64_t row_bytes = 0;  // one row of them
  size_t elem = 0;        // bytes of one element
};

// x [n, cols] into [n, cols / kPer] blocks by quantize_row.
template <class Block, int kPer>
Activations quantize_rows(const float* x, int64_t n, int64_t cols, SimdLevel level,
                          ThreadPool* pool,
                          void (*quantize_row)(const float*, int64_t, Block*, SimdLevel)) {
  thread_local std::vector<Block> xq;  // grow-only
  const int64_t nb = cols / kPer;
  if (xq.size() < size_t(n * nb)) xq.resize(size_t(n * nb));
  Block* xqp = xq.data();
  auto quantize = [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) quantize_row(x + i * cols, cols, xqp + i * nb, level);
  };
  if (pool && n * cols >= (int64_t(1) << 16))
    pool->parallel_for(n, quantize);
  else
    quantize(0, n, 0);
  return {xqp, nb, nb * int64_t(sizeof(Block)), sizeof(Block)};
}

Activations prepare_activations(const float* x, int64_t n, int64_t cols, ActKind kind,
                                SimdLevel level, ThreadPool* pool) {
  switch (kind) {
    case ActKind::kQ8x:
      return quantize_rows<BlockQ8x, kQK>(x, n, cols, level, pool, detail::quantize_row_q8x);
    case ActKind::kQ8K:
      return quantize_rows<detail::BlockQ8K, detail::kQK_K>(x, n, cols, level, pool,
                                                            detail::quantize_row_q8k);
    default:
      return {x, cols, cols * 4, sizeof(float)};
  }
}

// One weight's product, ready to run on any range of its output rows.
struct RowJob {
  detail::DotFn dot = nullptr;
  int streams = 2;  // one activation row's weight streams (decode_rows; measured at n = 1)
  detail::BatchFn batch = nullptr;         // n >= kMaxNX rows of a plain weight: its own blocking
  detail::KQuantBatchFn kbatch = nullptr;  // n >= kMaxNX rows of a K-quant: likewise
  const uint8_t* w = nullptr;
  uint64_t row_bytes = 0;
  int64_t rows = 0, cols = 0, n = 0;
  float* y = nullptr;  // [n, rows]
  detail::DotFn wide = nullptr;  // kMaxNX < n <= kMaxNXWide rows, where the type has one
  detail::Mxfp4BatchFn mbatch = nullptr;  // n >= kMxfp4BatchRows rows of MXFP4: its own blocking
};

// Output rows [r0, r1) of one product. Batch: two adjacent weight rows per
// register tile with full 4-row activation tiles (an activation block
// loaded once for both; bench_kernels_matmul ... tiles, docs/kernels.md).
// Decode pairs rows far apart instead (decode_rows: for the memory
// streams, not for sharing). Plain weights (F32/F16/BF16) in a batch run
// their own kernel (j.batch, matmul_float.cpp: wider tiles, cache
// blocks). A row's arithmetic does not depend on the range or the tile it
// falls in.
void run_rows(const RowJob& j, const Activations& a, int64_t r0, int64_t r1) {
  if (j.wide)  // 5..kMaxNXWide rows: one pass over the weight pairs
    return decode_rows(j.wide, 2, j.w, j.row_bytes, a.data, a.stride, j.n, j.cols, j.y, j.rows,
                       r0, r1);
  if (j.mbatch)
    return j.mbatch(j.w, int64_t(j.row_bytes), r0, r1, static_cast<const BlockQ8x*>(a.data), j.n,
                    j.cols, j.y, j.rows);
  if (j.n < detail::kMaxNX || (j.n == detail::kMaxNX && !j.batch && !j.kbatch))
    return decode_rows(j.dot, j.n == 1 ? j.streams : 2, j.w, j.row_bytes, a.data, a.stride, j.n,
                       j.cols, j.y, j.rows, r0, r1);
  if (j.batch)
    return j.batch(j.w, int64_t(j.row_bytes), r0, r1, static_cast<const float*>(a.data), j.n,
                   j.cols, j.y, j.rows);
  if (j.kbatch)
    return j.kbatch(j.w, int64_t(j.row_bytes), r0, r1, static_cast<const detail::BlockQ8K*>(a.data),
                    j.n, j.cols, j.y, j.rows);
  const int64_t tile = act_tile(a.row_bytes);
  const int max_nw = g_max_nw.load(std::memory_order_relaxed);
  for (int64_t rb = r0; rb < r1; rb += kRowTile) {
    const int64_t re = std::min(rb + kRowTile, r1);
    for (int64_t jb = 0; jb < j.n; jb += tile) {
      const int64_t je = std::min(jb + tile, j.n);
      for (int64_t r = rb; r < re; r += max_nw) {
        const int nw = int(std::min<int64_t>(max_nw, re - r));
        const uint8_t* wr = j.w + uint64_t(r) * j.row_bytes;
        for (int64_t k = jb; k < je; k += detail::kMaxNX) {
          const int nx = int(std::min<int64_t>(detail::kMaxNX, je - k));
          const void* xk = static_cast<const uint8_t*>(a.data) + size_t(k * a.stride) * a.elem;
          j.dot(wr, int64_t(j.row_bytes), nw, xk, a.stride, nx, j.cols, j.y + k * j.rows + r,
                j.rows);
        }
      }
    }
  }
}

RowJob row_job(const TensorView& w, uint64_t row_bytes, int64_t n, float* y, SimdLevel level) {
  KV_CHECK(y != nullptr, "matmul: null output");
  RowJob j{detail::dot_kernel(w.type, level),
           detail::decode_streams(w.type, level, w.cols()),
           n >= detail::kMaxNX ? detail::float_batch_kernel(w.type, level) : nullptr,
           nullptr,
           static_cast<const uint8_t*>(w.data),
           row_bytes,
           w.rows(),
           w.cols(),
           n,
           y};
  if (n > detail::kMaxNX && n <= detail::kMaxNXWide) j.wide = detail::wide_dot_kernel(w.type, level);
  if (n >= kKQuantBatchRows && kquant_batch_on())
    j.kbatch = detail::kquant_batch_kernel(w.type, level);
  if (w.type == DType::MXFP4 && n >= kMxfp4BatchRows && mxfp4_batch_on())
    j.mbatch = detail::mxfp4_batch_kernel(level);
  KV_CHECK(j.dot != nullptr, "matmul: no kernel for {}", dtype_name(w.type));
  return j;
}

// Tiny products are not worth waking the pool.
bool worth_the_pool(const ThreadPool* pool, int64_t rows, int64_t n, int64_t cols) {
  return pool && pool->size() > 1 && rows >= 2 * kRowTile &&
         double(rows) * double(n) * double(cols) >= 1e5;
}

void matmul_checked(const TensorView& w, uint64_t row_bytes, const float* x, int64_t n, float* y,
                    ThreadPool* pool, SimdLevel level) {
  const int64_t rows = w.rows(), cols = w.cols();
  if (n == 0 || rows == 0) return;
  KV_CHECK(x != nullptr, "matmul: null activation");
  const RowJob job = row_job(w, row_bytes, n, y, level);
  const Activations a = prepare_activations(x, n, cols, act_kind(w.type), level, pool);
  auto body = [&](int64_t r0, int64_t r1, int) { run_rows(job, a, r0, r1); };
  if (worth_the_pool(pool, rows, n, cols))
    pool->parallel_for(rows, body);
  else
    body(0, rows, 0);
}

// A group with weights kept repacked (keep_rows16): all of them, as one
// rows16 call; some, one matmul each (each then takes its own family).
// False where none is kept.
bool group_rows16(const MatmulOut* outs, int count, const float* x, int64_t n, ThreadPool* pool) {
  Rows16View views[kMaxRows16Group];
  float* ys[kMaxRows16Group];
  std::shared_ptr<const detail::Rows16Kept> kept[kMaxRows16Group];
  int found = 0;
  for (int i = 0; i < count; ++i) {
    auto k = detail::rows16_find(*outs[i].w);
    if (!k) continue;
    if (found < kMaxRows16Group) kept[found] = k, views[found] = k->view, ys[found] = outs[i].y;
    ++found;
  }
  if (found == 0) return false;
  if (found < count || found > kMaxRows16Group) {
    for (int i = 0; i < count; ++i) matmul(*outs[i].w, x, n, outs[i].y, pool);
    return true;
  }
  KV_CHECK(x != nullptr, "matmul: null activation");
  for (int i = 0; i < count; ++i) KV_CHECK(ys[i] != nullptr, "matmul: null output");
  rows16_matmul_group(views, ys, count, x, n, pool);
  return true;
}

}  // namespace

void matmul_group(const MatmulOut* outs, int count, const float* x, int64_t n, ThreadPool* pool) {
  KV_CHECK(count >= 0 && (count == 0 || outs != nullptr), "matmul_group: null products");
  KV_CHECK(n >= 0, "matmul: negative row count {}", n);
  if (n == 0 || count == 0) return;
  for (int i = 0; i < count; ++i) {  // every product checked before any runs
    KV_CHECK(outs[i].w != nullptr, "matmul_group: product {} has no weight", i);
    KV_CHECK(outs[i].w->cols() == outs[0].w->cols(),
             "matmul_group: product {} has {} columns, product 0 {}", i, outs[i].w->cols(),
             outs[0].w->cols());
  }
  if (group_rows16(outs, count, x, n, pool)) return;
  constexpr int kMax = 8;
  const RowsClass rc = rows_class(n);
  uint64_t row_bytes[kMax];
  SimdLevel level = SimdLevel::kScalar;
  ActKind kind = ActKind::kF32;
  bool fuse = count <= kMax;
  for (int i = 0; i < count && fuse; ++i) {
    const TensorView& w = *outs[i].w;
    row_bytes[i] = checked_row_bytes(w);
    const SimdLevel l = detail::kernel_level(w.type, rc, w.cols());
    std::shared_ptr<const detail::AmxPacked> kept;
    const bool amx = use_amx(w, rc, n, &kept);
    if (i == 0) level = l, kind = act_kind(w.type);
    fuse = !amx && l == level && act_kind(w.type) == kind;
  }
  if (!fuse) {
    for (int i = 0; i < count; ++i) matmul(*outs[i].w, x, n, outs[i].y, pool);
    return;
  }
  KV_CHECK(x != nullptr, "matmul: null activation");
  RowJob jobs[kMax];
  int64_t start[kMax + 1] = {0};  // product i's rows are [start[i], start[i + 1]) of all
  for (int i = 0; i < count; ++i) {
    jobs[i] = row_job(*outs[i].w, row_bytes[i], n, outs[i].y, level);
    start[i + 1] = start[i] + jobs[i].rows;
  }
  const int64_t total = start[count], cols = outs[0].w->cols();
  if (total == 0) return;
  const Activations a = prepare_activations(x, n, cols, kind, level, pool);
  auto body = [&](int64_t r0, int64_t r1, int) {
    for (int i = 0; i < count; ++i) {
      const int64_t b = std::max(r0, start[i]), e = std::min(r1, start[i + 1]);
      if (b < e) run_rows(jobs[i], a, b - start[i], e - start[i]);
    }
  };
  if (worth_the_pool(pool, total, n, cols))
    pool->parallel_for(total, body);
  else
    body(0, total, 0);
}

bool keep_packed(const TensorView& w, uint64_t budget_bytes) {
  static const bool off = [] {
    const char* e = std::getenv("KVASIR_AMX_PACK");
    return e && std::strcmp(e, "0") == 0;
  }();
  if (off || simd_level_forced() || !detail::amx_supports(w.type) || !detail::amx_usable())
    return false;
  if (simd_kernel_choice(w.type, RowsClass::kBatch, w.cols()).reason == ChoiceReason::kPending)
    return false;
  if (!detail::kernel_amx(w.type) && detail::kernel_amx_packed_rows(w.type) == 0) return false;
  return detail::amx_keep_packed(w, budget_bytes);
}

void drop_packed(const TensorView& w) {
  detail::amx_drop_packed(w);
}

void dequantize_row(const TensorView& w, int64_t r, float* out) {
  const uint64_t row_bytes = checked_row_bytes(w);
  KV_CHECK(r >= 0 && r < w.rows(), "dequantize_row: row {} out of range [0, {})", r, w.rows());
  KV_CHECK(out != nullptr, "dequantize_row: null output");
  if (const auto kept16 = detail::rows16_find(w))  // the same bits from the group blocks
    return rows16_dequantize_row(kept16->view, r, out);
  const auto* row = static_cast<const uint8_t*>(w.data) + uint64_t(r) * row_bytes;
  const int64_t cols = w.cols();
  switch (w.type) {
    case DType::F32:
      std::memcpy(out, row, size_t(cols) * 4);
      return;
    case DType::F16:
      for (int64_t c = 0; c < cols; ++c) out[c] = fp16_to_f32(load_u16(row + 2 * c));
      return;
    case DType::BF16:
      for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(load_u16(row + 2 * c));
      return;
    case DType::Q8_0:
      for (int64_t b = 0; b < cols / kQK; ++b) {
        const uint8_t* blk = row + b * 34;
        const float d = fp16_to_f32(load_u16(blk));
        for (int i = 0; i < kQK; ++i) out[b * kQK + i] = d * float(int8_t(blk[2 + i]));
      }
      return;
    case DType::Q4_0:
    case DType::Q4_1: {
      const bool q41 = w.type == DType::Q4_1;
      const int64_t bytes = q41 ? 20 : 18;
      for (int64_t b = 0; b < cols / kQK; ++b) {
        const uint8_t* blk = row + b * bytes;
        const float d = fp16_to_f32(load_u16(blk));
        const uint8_t* qs = blk + (q41 ? 4 : 2);
        float* o = out + b * kQK;
        if (q41) {
          const float m = fp16_to_f32(load_u16(blk + 2));
          for (int i = 0; i < kQK / 2; ++i) {
            o[i] = d * float(qs[i] & 0x0f) + m;
            o[i + kQK / 2] = d * float(qs[i] >> 4) + m;
          }
        } else {
          for (int i = 0; i < kQK / 2; ++i) {
            o[i] = d * float(int(qs[i] & 0x0f) - 8);
            o[i + kQK / 2] = d * float(int(qs[i] >> 4) - 8);
          }
        }
      }
      return;
    }
    case DType::Q5_0:  // f16 d, u32 qh (bit j: weight j's fifth bit), Q4_0's nibbles
      for (int64_t b = 0; b < cols / kQK; ++b) {
        const uint8_t* blk = row + b * 22;
        const float d = fp16_to_f32(load_u16(blk));
        uint32_t qh;
        std::memcpy(&qh, blk + 2, 4);
        for (int i = 0; i < kQK / 2; ++i) {
          const int lo = (blk[6 + i] & 0x0f) | int((qh >> i) & 1) << 4;
          const int hi = (blk[6 + i] >> 4) | int((qh >> (i + kQK / 2)) & 1) << 4;
          out[b * kQK + i] = d * float(lo - 16);
          out[b * kQK + i + kQK / 2] = d * float(hi - 16);
        }
      }
      return;
    case DType::MXFP4:
      detail::dequantize_row_mxfp4(row, cols, out);
      return;
    case DType::Q4_K:
    case DType::Q5_K:
      for (int64_t b = 0; b < cols / kq::kSuper; ++b)
        kq::dequant_q45_k(row + b * (w.type == DType::Q5_K ? kq::kQ5KBytes : kq::kQ4KBytes),
                          w.type == DType::Q5_K, out + b * kq::kSuper);
      return;
    case DType::Q6_K:
      for (int64_t b = 0; b < cols / kq::kSuper; ++b)
        kq::dequant_q6_k(row + b * kq::kQ6KBytes, out + b * kq::kSuper);
      return;
    default:
      KV_FAIL("dequantize_row: type {} is not supported", dtype_name(w.type));
  }
}

}  // namespace kvasir::cpu
