// stages/cuda/decode_graph_plan.h — which shape a decode step runs with when
// it is replayed as a CUDA graph, and the padding rows that fill it. Plain
// C++ (no CUDA): tested on every machine (tests/unit/stages/test_decode_graph_plan).
//
// A captured graph fixes every launch's grid and arguments, so one graph
// serves one shape. The stage captures one per bucket (docs/cuda.md):
//   rows     the batch's rows (one token each) rounded up to 1, 2, 4, 8,
//            then multiples of 8, at most the plan's max_rows; the extra
//            rows are padding;
//   context  the attention's max_context (GpuAttnBatch), which sizes the
//            split-KV grid: the number of kAttnPartition-position partitions
//            rounded up to a power of two (never past the longest context a
//            row can have), or that longest context when the batch has
//            enough (token, head) pairs not to split at all. A bound above a
//            row's true context only adds partitions that hold nothing,
//            which the merge skips: the result is the same as with the
//            batch's own bound.
// The batch arrays, positions and sampling controls live in device buffers
// at fixed addresses, written before each launch; the graph reads them.
#pragma once

#include <cstdint>
#include <vector>

namespace kvasir::cuda {

// 1, 2, 4, 8, 16, 24, … up to max_rows (max_rows itself the last).
std::vector<int32_t> decode_row_buckets(int32_t max_rows);

// The smallest bucket >= rows; 0 when rows is outside 1..max_rows.
int32_t decode_row_bucket(int32_t rows, int32_t max_rows);

struct DecodeGraphLimits {
  int32_t max_rows = 0;           // the plan's rows per micro-batch
  int32_t context_cap = 0;        // max_table · block_size: no row's context exceeds it
  int32_t n_heads = 0;            // query heads
  int32_t split_below_pairs = 0;  // kernels/cuda/attention.h: kAttnSplitBelowPairs
  int32_t partition = 0;          // kAttnPartition
};

struct DecodeShape {
  int32_t rows = 0;     // padded rows = tokens; 0: no graph for this batch
  int32_t context = 0;  // max_context of the launch, >= the batch's
  bool operator==(const DecodeShape& o) const { return rows == o.rows && context == o.context; }
};

// The shape a decode-only batch (n_rows rows of one token, longest context
// max_context) is replayed with; rows 0 when it cannot be (n_rows outside
// 1..max_rows, max_context outside 1..context_cap, limits malformed).
DecodeShape decode_graph_shape(const DecodeGraphLimits& lim, int32_t n_rows, int32_t max_context);

// One key per shape (for the stage's map of graphs).
inline uint64_t decode_graph_key(const DecodeShape& s) {
  return (uint64_t(uint32_t(s.rows)) << 32) | uint32_t(s.context);
}

// The packed batch arrays of the executor (host side), as in
// kernels/cuda/paged_kv_layout.h: q_start[rows + 1], pos0[rows],
// tables[rows][max_table], pos[tokens], tokens[tokens] (null when the stage
// does not embed).
struct DecodeBatchArrays {
  int32_t* q_start = nullptr;
  int32_t* pos0 = nullptr;
  int32_t* tables = nullptr;
  int32_t* pos = nullptr;
  int32_t* tokens = nullptr;
  int32_t max_table = 0;
};

// Rows n_rows .. padded-1 as padding: one token each (token id 0) at
// position 0 of block `sink`, a KV block no sequence owns (the stage
// allocates one more than the daemon's count). Their keys and values go
// there; what they compute is never read. Rows 0 .. n_rows-1 (and
// q_start[0 .. n_rows]) must already hold the batch, one token per row.
void pad_decode_rows(const DecodeBatchArrays& a, int32_t n_rows, int32_t padded, int32_t sink);

}  // namespace kvasir::cuda
