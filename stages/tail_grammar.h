// stages/tail_grammar.h — structured outputs at the tail stage: one grammar
// matcher per constrained sequence, the token mask of each row it samples,
// and the bookkeeping that keeps the matcher equal to the sequence's output
// through preemption, recompute and restarts (docs/structured-outputs.md).
//
// A constrained row's SamplingParams name an entry of the segment's grammar
// table (ipc/grammar_table.h). The tail reads the spec there the first time
// it meets an entry id and starts compiling it at once
// (GrammarCompiler::compile_async: the daemon only checked it, so this is
// its one compilation; a spec the tail saw before, under any id, is a cache
// hit). The compilation runs beside the prompt's forward pass; the tail
// waits for it only when it must mask the sequence's first sampled token,
// at most the compile deadline after the spec arrived.
//
// What the tail knows of each sequence is its record (stages/
// tail_sequences.h: the tokens by position, rebuilt from rows through
// preemption, recompute and restarts, lost at a hole). The grammar keeps
// its part of the record: the matcher, which a mask job brings to the
// record's output: it rolls back to the longest common prefix of what it
// accepted and the output, accepts the rest, then fills the mask of the
// next token. So a recompute after preemption finds the matcher already
// there; a step lost with a stage (its sampled token never applied) rolls
// back one token; a restarted tail rebuilds each matcher from the generated
// tokens its recompute resends (a fast-forward).
//
// Mask jobs run on a few worker threads, on a copy of the output, and never
// wait for a compilation (a job starts once its grammar is compiled). After
// a row is sampled, its token joins the record and the next mask is filled
// at once, while the batch travels the ring and the tail runs other
// micro-batches; by the time the sequence's next decode comes back the mask
// is usually ready. prepare() starts the jobs that are not (a new sequence,
// a rollback) and mask() waits for them.
//
// Tail thread only (prepare, mask, accept); the jobs touch a sequence's
// matcher and mask only while the tail thread is not.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "ipc/batch.h"
#include "ipc/grammar_table.h"
#include "stages/tail_sequences.h"

namespace kvasir {

class ModelFile;
namespace grammar {
class Vocabulary;
}

struct TailGrammarOptions {
  int compile_workers = 2;  // the tail's GrammarCompiler
  int mask_workers = 2;     // threads filling masks
  size_t cache_capacity = 128;
  // The longest a spec may take to compile, counted from when the tail met
  // it (the daemon's grammar.compile_timeout default): past it, the
  // sequence fails.
  std::chrono::milliseconds compile_timeout{10000};
  uint64_t evict_age = 4096;  // batches without a row before a spec is forgotten
  // Speculative decoding: with each mask job, the grammar-forced tokens
  // after the output (at most this many; 0 = none): forced().
  int32_t forced_drafts = 0;
};

struct TailGrammarStats {
  uint64_t masks = 0;          // masks filled
  uint64_t mask_ns = 0;        // time filling them (worker threads)
  uint64_t waits = 0;          // masks the tail thread had to wait for
  uint64_t wait_ns = 0;        // time it waited (the ring's cost of masking)
  uint64_t fast_forwards = 0;  // tokens accepted to catch up (recompute, restart)
  uint64_t rollbacks = 0;      // tokens rolled back (a lost step)
  uint64_t failures = 0;       // sequences failed (lost record, bad spec, refused token)
  size_t sequences = 0;        // grammar parts of records held now
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

  // Before the forward pass, after seqs.feed_batch(b, n_rows, batch_id):
  // each constrained row's grammar part of its record (made anew when its
  // spec differs), the compilation of each spec first met started, and the
  // mask jobs of the rows that sample and have none ready (once their
  // grammar is compiled; else mask() runs it).
  virtual void prepare(const ipc::Batch& b, int32_t n_rows, uint64_t batch_id,
                       TailSequences& seqs) = 0;

  // After prepare: sets *out to row r's mask (bit id%32 of word id/32: id
  // may come next), or to null where row r is unconstrained or does not
  // sample; waits for the row's compilation (its deadline) and mask job.
  // Errors (*out null): the record was lost (kNotFound); the spec could
  // not be read (the table's code) or decoded, or did not compile
  // (kInvalidArgument, kQueueFull, kStopping: GrammarCompiler::compile);
  // the output broke the grammar (kInvalidArgument). Logged once per
  // sequence. *out stays valid until the next prepare().
  virtual Status mask(int32_t r, const uint32_t** out) = 0;

  // Row r (constrained, sampled) drew the token TailSequences::append just
  // put in its record: the next mask starts filling. row_ends: the row
  // draws nothing more in this batch (a plain row's token, a speculative
  // row's last verified one), so its job also finds the forced tokens
  // after it, first; a verifying row's earlier positions skip that work.
  virtual void accept(int32_t r, bool row_ends) = 0;

  // After accept(r, true): the grammar-forced tokens that follow row r's
  // record's output now (grammar::Matcher::forced_tokens, at most
  // options.forced_drafts; the scheduler drafts them for the sequence's
  // next row). Waits for the row's job only until it has found them; the
  // next mask goes on filling while the batch travels. Empty where the
  // row is unconstrained, its grammar failed, the output ended, forced
  // drafts are off, or the last accept did not end the row. Valid until
  // the next accept(r) or prepare().
  virtual std::span<const int32_t> forced(int32_t r) = 0;

  virtual TailGrammarStats stats() const = 0;
};

}  // namespace kvasir
