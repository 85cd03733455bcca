// kernels/cpu/paged_kv.h — the paged KV cache, described once for kernels
// and host code.
//
// A layer's cache is two arrays (K and V) of n_blocks physical blocks:
//
//   K, V: [n_blocks][n_kv_heads][block_size][head_dim]   of `type` (F16 or F32)
//
// A sequence owns a block table: logical block i (positions
// i*block_size .. (i+1)*block_size-1) lives in physical block table[i].
// Laying a block out head-major keeps one head group's keys contiguous, so
// attention reads each block once per KV head and serves all the query heads
// of that group (GQA) from it.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "kernels/cpu/thread_pool.h"

namespace kvasir::cpu {

struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  DType type = DType::F16;  // F16 or F32
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
};

// One sequence's slice of a batch: n_tokens new tokens at positions
// pos0 .. pos0 + n_tokens - 1, whose keys/values go to (and whose queries
// read from) the blocks in block_table[0 .. n_table).
struct AttnRow {
  int32_t pos0 = 0;
  int32_t n_tokens = 0;
  const int32_t* block_table = nullptr;
  int32_t n_table = 0;
};

// A sliding-window layer's table may be *unmapped* (-1) before its row's
// window: a sliding group frees a sequence's blocks once the window has
// passed them (docs/scheduler.md, "Sliding-window groups"). Neither kernel
// reads an entry before max(0, pos0 - window + 1) / block_size; both check
// every entry from there on.

// Writes the new tokens' keys/values (k, v: [T, n_kv_heads, head_dim] f32,
// T = sum of n_tokens, rows in order) into their blocks. Throws
// kvasir::Error if a position falls outside a row's table or a block id is
// out of range (with window > 0, entries before the row's window are not
// checked: see above).
void kv_append(const KvLayerView& kv, const AttnRow* rows, int n_rows, const float* k,
               const float* v, int32_t window = 0);

// Causal attention of each new token over its sequence's positions 0..pos,
// or, with window > 0 (a sliding-window layer: Gemma 3's local layers), over
// the last `window` of them, pos - window + 1 .. pos (llama.cpp's standard
// sliding window: key p is masked when pos - p >= window). The window is a
// mask: the table entries before it are neither read nor required to be
// mapped (see above). window 0 is full attention.
// q, out: [T, n_heads, head_dim] f32. n_heads % n_kv_heads == 0.
// Call after kv_append for the same rows. A token's output depends only on
// its query, its row's cache up to its position and the SIMD level, bit for
// bit: not on the other rows of the call nor on how a sequence's tokens are
// split into calls (prefill chunks, a prefix-cache hit, decode steps).
// sinks (gpt-oss's attention sinks): nullptr, or [n_heads] f32, a learned
// logit per query head that joins the softmax's denominator only (a key no
// value goes with), as llama.cpp's soft_max_ext takes them:
//   out = Σ_j e^(s_j) v_j / (Σ_j e^(s_j) + e^(sink_h)).
void paged_attention(const KvLayerView& kv, const AttnRow* rows, int n_rows, const float* q,
                     int n_heads, float scale, float* out, ThreadPool* pool, int32_t window = 0,
                     const float* sinks = nullptr);

}  // namespace kvasir::cpu
