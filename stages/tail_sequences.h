// stages/tail_sequences.h — the tail's one record per sequence: the tokens
// the batches' rows told it, by position, and what the tail derives from
// them (the penalty counts, the grammar's matcher, and what speculative
// decoding will keep), under one eviction rule and one rebuild path.
//
// The tail is never told when a sequence starts, is preempted, recomputed
// or finished; it sees rows (ipc/batch.h). So a record is built by
// position: a row rewrites the positions it covers and the record ends
// where the row ends (what followed was a step lost with a stage, or the
// recompute of a preemption resends it). A recompute (every position
// resent from 0, the generated tokens included, with the same n_prompt)
// rebuilds exactly the record the sequence had, and a restarted tail
// rebuilds it from the resent rows the same way. A row that starts past the
// record's end where the sequence needs the positions it skips (a hole: the
// tail restarted or evicted the record, and the batch does not resend them;
// Row::needed_from) marks the record lost: its derived state would be
// silently wrong, so the caller fails that sequence (token -1) until a row
// from what it needs rebuilds it.
//
// Which sequences have a record: those whose rows need one (penalties, a
// grammar: TailSequences::needs). Forgotten after evict_age batches without
// a row (finished sequences: the tail is never told).
//
// Tail thread only. A Part's own threads (the grammar's mask jobs) work on
// copies, never on the record.
#pragma once

#include <cstdint>
#include <algorithm>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "ipc/batch.h"
#include "stages/sampler.h"

namespace kvasir {

struct TailSequence {
  // Per-sequence state a tail component keeps beside the tokens: the
  // grammar's matcher and mask (stages/tail_grammar.cpp), and the place for
  // what speculative decoding keeps per sequence (its draft tokens, their
  // acceptance). A Part reads `tokens`/`edits` to follow the sequence; it is
  // destroyed with the record (eviction, a new spec), so a Part with work
  // on other threads waits for it in its destructor.
  struct Part {
    virtual ~Part() = default;
  };

  static constexpr int32_t kUnknown = -1;  // a position no row has told (not needed)

  uint64_t id = 0;
  int32_t n_prompt = 0;         // positions below it: the prompt
  std::vector<int32_t> tokens;  // [positions up to the last told] the token at each
  // Bumped whenever `tokens` changes other than by growing (a position
  // rewritten with another token, positions dropped) or n_prompt moves: a
  // Part that follows the tokens compares it to know it must look back.
  uint64_t edits = 0;
  uint64_t last_batch = 0;
  // Not ok (kNotFound, naming the positions) while the record has a hole.
  Status lost;
  SequenceHistory penalties;  // tokens counted as prompt / output (stages/sampler.h)
  std::unique_ptr<Part> grammar;
  std::unique_ptr<Part> speculative;  // reserved: speculative decoding's per-sequence state

  // The generated tokens: positions n_prompt.. (empty while prefilling).
  std::span<const int32_t> output() const {
    const size_t n = std::min(tokens.size(), size_t(std::max(n_prompt, 0)));
    return std::span<const int32_t>(tokens).subspan(n);
  }
};

struct TailSequencesOptions {
  uint64_t evict_age = 4096;   // batches without a row before a record is forgotten
  uint64_t evict_every = 256;  // batches between two eviction sweeps
};

class TailSequences {
 public:
  explicit TailSequences(TailSequencesOptions options = {}) : opt_(options) {}

  // Whether a row with these parameters keeps a record.
  static bool needs(const SamplingParams& sp);

  // One row of a sequence, as a batch carries it (ipc::DescRow).
  struct Row {
    int64_t pos0 = 0;
    int32_t n_tokens = 0;
    int32_t n_prompt = 0;             // positions below: the prompt
    const int32_t* tokens = nullptr;  // [n_tokens]
    // The first position what the tail derives needs: 0 for penalties
    // (they count the prompt), n_prompt for a grammar alone (the prompt
    // prefix the scheduler found cached is never sent).
    int64_t needed_from = 0;
  };
  // Accounts for `row` of sequence `seq`, seen in batch `batch`, and
  // returns its record (made if new), covering positions [0, pos0 +
  // n_tokens) unless lost.
  TailSequence& feed(uint64_t seq, const Row& row, uint64_t batch);
  // feed() for every row of the first n_rows of b that needs() a record,
  // then the eviction sweep when its turn has come.
  void feed_batch(const ipc::Batch& b, int32_t n_rows, uint64_t batch);
  // The token the tail sampled for the record's next position: it joins the
  // record at once (the next row carries it again and finds it there).
  void append(TailSequence& s, int32_t token);

  TailSequence* find(uint64_t seq);
  // Forgets the records with no row in the last evict_age batches.
  void evict(uint64_t batch);
  size_t size() const { return map_.size(); }

 private:
  void rewrite(TailSequence& s, int64_t pos0, int32_t n_prompt);
  static void count(TailSequence& s, int64_t p, int32_t token);

  TailSequencesOptions opt_;
  std::unordered_map<uint64_t, TailSequence> map_;  // by sequence id (nodes stay put)
};

}  // namespace kvasir
