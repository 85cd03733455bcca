// kernels/cpu/attention_internal.h — what attention.cpp shares with the tiled
// path (attention_tiled.cpp). Not part of the kernels' face.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu/paged_kv.h"

namespace kvasir::cpu::detail {

// One work item: new tokens [t0, t1) of one row, for one kv head (all the
// query heads of its group).
struct AttnItem {
  int32_t row;
  int32_t head;  // kv head
  int32_t t0, t1;
};

// What every item of one paged_attention call reads.
struct AttnJob {
  const KvLayerView* kv;
  const AttnRow* rows;
  const int64_t* tok_off;  // [n_rows] first global token of each row
  const float* q;          // [T, n_heads, hd]
  float* out;              // [T, n_heads, hd]
  int n_heads;
  int group;  // query heads per kv head
  float scale;
  int32_t window;  // > 0: a query at pos sees keys pos - window + 1 .. pos; 0: all
  const float* sinks;  // [n_heads] or nullptr: a logit per query head in the denominator
};

// What a query's accumulated Σ e^(s - m)·v is multiplied by: 1 / Σ e^(s - m),
// with a sink the denominator's extra term e^(sink - m) (gpt-oss). A sink far
// above every score overflows that term to inf: the output goes to 0, its
// limit.
inline float out_factor(const AttnJob& job, int64_t q_head, float m, float l) {
  return job.sinks ? 1.f / (l + std::exp(job.sinks[q_head] - m)) : 1.f / l;
}

// The first position a query at `pos` may see.
inline int64_t window_start(const AttnJob& job, int64_t pos) {
  return job.window > 0 && pos - job.window + 1 > 0 ? pos - job.window + 1 : 0;
}

// The tiled path: keys in tiles of 64, transposed once per tile and shared by
// every query of the item. Every item of a call takes it when the CPU and
// the head dim allow, decodes included: one path for all, so a sequence's
// bits do not depend on how its tokens were split (paged_kv.h). Each call
// handles one item and writes its outputs; kv.head_dim must be a multiple of
// tiled_head_dim_multiple(avx512) for the variant used (8 for AVX2, 16 for
// AVX-512). Defined for x86 only.
int tiled_head_dim_multiple(bool avx512);
void attend_item_tiled_avx2(const AttnJob& job, const AttnItem& it);
void attend_item_tiled_avx512(const AttnJob& job, const AttnItem& it);

}  // namespace kvasir::cpu::detail
