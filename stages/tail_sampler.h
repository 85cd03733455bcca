// stages/tail_sampler.h — the tail's share of a batch after its forward
// pass: each row's tokens go into the penalty histories of its sequence,
// and each sampled row's token (with its logprob and top-N alternatives)
// into the batch's result slot. The agent (stages/agent.h) owns one.
#pragma once

#include <cstdint>

#include "ipc/batch.h"
#include "stages/sampler.h"

namespace kvasir {

class TailSampler {
 public:
  // What the forward pass left for the sampler.
  struct Logits {
    // [rows with sample set, vocab], in row order; a row sampled on the
    // device leaves its row unused.
    float* rows = nullptr;
    int32_t vocab = 0;
    // [n_rows]: the id a device sampled for row r and its raw logprob, or
    // -1 where the host samples from `rows` (ForwardBatch::sampled_token).
    const int32_t* device_token = nullptr;
    const float* device_logprob = nullptr;
  };

  // Samples the first n_rows rows of b (batch batch_id) into `out`: every
  // row's token is -1 and n_top 0 unless it is sampled. A row whose
  // sequence lost its penalty history keeps token -1 (that sequence fails
  // alone). Throws kvasir::Error (the batch fails) when a row's logits are
  // all NaN or -inf, or its sampling controls are invalid.
  void sample(const ipc::Batch& b, uint64_t batch_id, int32_t n_rows, const Logits& logits,
              const ipc::ResultView& out);

 private:
  // The history row r samples with (null: no penalties); lost: it had one
  // and it was evicted.
  const SequenceHistory* feed_history(const ipc::Batch& b, int32_t r, int64_t token_offset,
                                      uint64_t batch_id, bool& lost);
  void sample_row(const ipc::Batch& b, int32_t r, float* row_logits, int32_t vocab,
                  const SequenceHistory* hist, const ipc::ResultView& out);

  Sampler sampler_;
  PenaltyHistories histories_;  // by position (stages/sampler.h)
};

}  // namespace kvasir
