#include "stages/cuda/decode_graph_plan.h"

#include <algorithm>

namespace kvasir::cuda {

std::vector<int32_t> decode_row_buckets(int32_t max_rows) {
  std::vector<int32_t> out;
  for (int32_t b : {1, 2, 4, 8})
    if (b < max_rows) out.push_back(b);
  for (int32_t b = 16; b < max_rows; b += 8) out.push_back(b);
  if (max_rows >= 1) out.push_back(max_rows);
  return out;
}

int32_t decode_row_bucket(int32_t rows, int32_t max_rows) {
  if (rows < 1 || rows > max_rows) return 0;
  if (rows <= 8) {
    int32_t b = 1;
    while (b < rows) b *= 2;
    return std::min(b, max_rows);
  }
  return std::min((rows + 7) / 8 * 8, max_rows);
}

DecodeShape decode_graph_shape(const DecodeGraphLimits& lim, int32_t n_rows, int32_t max_context) {
  if (lim.max_rows < 1 || lim.context_cap < 1 || lim.n_heads < 1 || lim.partition < 1) return {};
  const int32_t rows = decode_row_bucket(n_rows, lim.max_rows);
  if (rows == 0 || max_context < 1 || max_context > lim.context_cap) return {};
  // Enough (token, head) pairs: attention does not split, and max_context
  // only bounds the check of each token's context.
  if (int64_t(rows) * lim.n_heads >= lim.split_below_pairs) return {rows, lim.context_cap};
  const int64_t parts = (int64_t(max_context) + lim.partition - 1) / lim.partition;
  int64_t bucket = 1;
  while (bucket < parts) bucket *= 2;
  return {rows, int32_t(std::min<int64_t>(bucket * lim.partition, lim.context_cap))};
}

void pad_decode_rows(const DecodeBatchArrays& a, int32_t n_rows, int32_t padded, int32_t sink) {
  for (int32_t r = n_rows; r < padded; ++r) {
    a.q_start[r + 1] = r + 1;
    a.pos0[r] = 0;
    int32_t* t = a.tables + int64_t(r) * a.max_table;
    t[0] = sink;
    std::fill(t + 1, t + a.max_table, 0);
    a.pos[r] = 0;
    if (a.tokens) a.tokens[r] = 0;
  }
}

}  // namespace kvasir::cuda
