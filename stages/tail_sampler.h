// stages/tail_sampler.h — the tail's share of a batch: each row's tokens
// go into its sequence's record (stages/tail_sequences.h: the penalty
// counts, the grammar's matcher), and after the forward pass each sampled
// row's token (with its logprob and top-N alternatives) into the batch's
// result slot and into the record. Structured outputs
// (stages/tail_grammar.h): a constrained row samples under its grammar's
// token mask, and its token moves the grammar on. The agent
// (stages/agent.h) owns one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ipc/batch.h"
#include "stages/sampler.h"
#include "stages/tail_grammar.h"
#include "stages/tail_sequences.h"

namespace kvasir {

class TailSampler {
 public:
  // What the forward pass left for the sampler.
  struct Logits {
    // [rows with sample set, vocab], in row order, a drafting row's last
    // 1 + n_draft positions each (ForwardRow::n_draft); a row sampled on
    // the device leaves its row unused.
    float* rows = nullptr;
    int32_t vocab = 0;
    // [n_rows]: the id a device sampled for row r and its raw logprob, or
    // -1 where the host samples from `rows` (ForwardBatch::sampled_token).
    const int32_t* device_token = nullptr;
    const float* device_logprob = nullptr;
  };

  // Structured outputs: without a grammar, constrained rows fail (token -1).
  void set_grammar(std::shared_ptr<TailGrammar> grammar) { grammar_ = std::move(grammar); }
  TailGrammar* grammar() const { return grammar_.get(); }

  // Before the forward pass: the rows into their sequences' records, and
  // the constrained rows' grammar parts and mask jobs (TailGrammar::prepare).
  void prepare(const ipc::Batch& b, uint64_t batch_id, int32_t n_rows);
  // The masks of the first n_rows rows, waiting for them: [n_rows] pointers,
  // null where a row is unconstrained (or its grammar failed: sample() fails
  // it). For a backend that samples on its device (ForwardBatch::token_masks).
  const uint32_t* const* masks(int32_t n_rows);

  // Samples the first n_rows rows of b (batch batch_id) into `out`: every
  // row's token is -1 and n_top 0 unless it is sampled. A drafting row
  // (DescRow::n_draft = k, docs/speculative.md) is verified: the target's
  // token t_i at each of its last 1 + k positions, sampled as without
  // speculation (its record holding t_0..t_{i-1} as output), until i = k
  // or t_i differs from the draft after it; t_0 goes where a row's token
  // goes, t_1.. into out.draft at the drafts' indices (the rest token -1).
  // A drafting row under a grammar samples each t_i under the mask for
  // the output holding t_0..t_{i-1}. A constrained row's grammar-forced
  // tokens after its last emitted one go into out.forced (when the
  // grammar computes them: TailGrammarOptions::forced_drafts). A row whose
  // sequence's record was lost, or whose grammar failed, keeps token -1
  // (that sequence fails alone). Feeds the records first if prepare() did
  // not (for this batch). Throws kvasir::Error (the batch fails)
  // when a row's logits are all NaN or -inf, or its sampling controls are
  // invalid.
  void sample(const ipc::Batch& b, uint64_t batch_id, int32_t n_rows, const Logits& logits,
              const ipc::ResultView& out);

 private:
  // The record row r samples with (null: it keeps none); false when it was
  // lost (logged).
  bool record(const ipc::Batch& b, int32_t r, TailSequence*& rec);
  // Row r's mask into `allowed` (empty: unconstrained); false when its
  // grammar failed (`token` then says whose fault: kTokenGrammarRefused,
  // or left as it was).
  bool row_mask(const ipc::Batch& b, int32_t r, std::span<const uint32_t>& allowed, int32_t& token);
  void write_forced(const ipc::Batch& b, int32_t r, const TailSequence* rec,
                    const ipc::ResultView& out);
  void sample_row(const ipc::Batch& b, int32_t r, float* row_logits, int32_t vocab,
                  const SequenceHistory* hist, std::span<const uint32_t> allowed,
                  const ipc::ResultView& out);
  void verify_row(const ipc::Batch& b, int32_t r, int64_t first, float* row_logits, int32_t vocab,
                  TailSequence* rec, const ipc::ResultView& out);

  Sampler sampler_;
  std::shared_ptr<TailGrammar> grammar_;
  // After grammar_: destroyed first, so the grammar parts wait for their
  // jobs while the grammar lives.
  TailSequences seqs_;
  bool fed_ = false;        // prepare() fed seqs_ the rows of batch fed_batch_
  uint64_t fed_batch_ = 0;
  std::vector<const uint32_t*> masks_;  // [n_rows] for the device
};

}  // namespace kvasir
