// stages/tail_grammar.h — structured outputs at the tail stage: one grammar
// matcher per constrained sequence, the token mask of each row it samples,
// and the bookkeeping that keeps the matcher equal to the sequence's output
// through preemption, recompute and restarts (docs/structured-outputs.md).
//
// A constrained row's SamplingParams name an entry of the segment's grammar
// table (ipc/grammar_table.h). The tail reads the spec there the first time
// it meets an entry id, compiles it with its own GrammarCompiler (the
// daemon compiled it once already, on arrival, so it compiles here too; a
// spec the tail saw before is a cache hit), and keeps per sequence:
//
//   want   the tokens the sequence generated, by output position, as the
//          batches' rows tell them (like the penalty histories of
//          stages/sampler.h: each row rewrites the positions it covers,
//          and a row that samples position q says the output is exactly
//          the q - n_prompt tokens before it);
//   the matcher, which a mask job brings to `want`: it rolls back to the
//          longest common prefix of what it accepted and `want`, accepts
//          the rest, then fills the mask of the next token.
//
// So a recompute after preemption (every position resent from 0) finds the
// matcher already there; a step lost with a stage (its sampled token never
// applied) rolls back one token; a restarted tail starts with no matchers
// and rebuilds each from the generated tokens its recompute resends (a
// fast-forward); a row for a sequence the tail has no record of, whose
// earlier output the batch does not resend, fails that sequence.
//
// Mask jobs run on a few worker threads. After a row is sampled, its token
// joins `want` and the next mask is filled at once, while the batch travels
// the ring and the tail runs other micro-batches; by the time the sequence's
// next decode comes back the mask is usually ready. prepare() starts the
// jobs that are not (a new sequence, a rollback) and mask() waits for them.
//
// Tail thread only (prepare, mask, accept); the jobs touch a sequence's
// matcher and mask only while the tail thread is not.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ipc/batch.h"
#include "ipc/grammar_table.h"

namespace kvasir {

class ModelFile;
namespace grammar {
class Vocabulary;
}

struct TailGrammarOptions {
  int compile_workers = 2;  // the tail's GrammarCompiler
  int mask_workers = 2;     // threads filling masks
  size_t cache_capacity = 128;
  // The daemon enforces the compile deadline on arrival; the tail only
  // compiles what compiled there, so its own bound is generous.
  std::chrono::milliseconds compile_timeout{120000};
  uint64_t evict_age = 4096;  // batches without a row before a sequence is forgotten
};

struct TailGrammarStats {
  uint64_t masks = 0;          // masks filled
  uint64_t mask_ns = 0;        // time filling them (worker threads)
  uint64_t waits = 0;          // masks the tail thread had to wait for
  uint64_t wait_ns = 0;        // time it waited (the ring's cost of masking)
  uint64_t fast_forwards = 0;  // tokens accepted to catch up (recompute, restart)
  uint64_t rollbacks = 0;      // tokens rolled back (a lost step)
  uint64_t failures = 0;       // sequences failed (lost record, bad spec, refused token)
  size_t sequences = 0;        // matchers held now
};

class TailGrammar {
 public:
  // The tail's grammar for `model` (its tokenizer makes the vocabulary,
  // `logits_width` wide) over `table`. Null, logged, when the table is
  // empty, this build has no grammar engine, or the model has no tokenizer:
  // constrained rows then fail.
  static std::unique_ptr<TailGrammar> create(const ModelFile& model, int32_t logits_width,
                                             const ipc::GrammarTable& table,
                                             const TailGrammarOptions& options = {});
  // Over a vocabulary at hand (tests); never null.
  static std::unique_ptr<TailGrammar> create(std::shared_ptr<const grammar::Vocabulary> vocab,
                                             const ipc::GrammarTable& table,
                                             const TailGrammarOptions& options = {});
  virtual ~TailGrammar() = default;

  // Mask width in 32-bit words.
  virtual size_t mask_words() const = 0;

  // Before the forward pass: reads the row tokens of the first n_rows rows
  // of b into each constrained sequence's record and starts the mask jobs
  // of the rows that sample and have none ready.
  virtual void prepare(const ipc::Batch& b, int32_t n_rows, uint64_t batch_id) = 0;

  // After prepare: row r's mask (bit id%32 of word id/32: id may come
  // next), waiting for its job; null where row r is unconstrained or does
  // not sample. *error is set (and null returned) when the row's grammar
  // failed: its spec could not be read or compiled, its sequence's record
  // was lost, or its output broke the grammar. The pointer stays valid
  // until the next prepare().
  virtual const uint32_t* mask(int32_t r, std::string* error) = 0;

  // Row r (constrained, sampled) drew `token`: it joins the sequence's
  // output and the next mask starts filling.
  virtual void accept(int32_t r, int32_t token) = 0;

  virtual TailGrammarStats stats() const = 0;
};

}  // namespace kvasir
