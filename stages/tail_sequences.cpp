// stages/tail_sequences.cpp — see tail_sequences.h.
#include "stages/tail_sequences.h"

#include <algorithm>

#include "base/log.h"

namespace kvasir {

bool TailSequences::needs(const SamplingParams& sp) {
  return penalties_active(sp) || sp.grammar_entry != 0;
}

TailSequence* TailSequences::find(uint64_t seq) {
  auto it = map_.find(seq);
  return it == map_.end() ? nullptr : &it->second;
}

// Cuts the record at pos0 (a row rewrites from there) with the row's
// n_prompt; recounts the penalties over what stays. Rare (a recompute, a
// lost step), so a recount rather than per-token decrements.
void TailSequences::rewrite(TailSequence& s, int64_t pos0, int32_t n_prompt) {
  s.tokens.resize(size_t(pos0));
  s.n_prompt = n_prompt;
  s.penalties.clear();
  for (size_t p = 0; p < s.tokens.size(); ++p) count(s, int64_t(p), s.tokens[p]);
}

// The token at position p into the penalty counts (positions not known are
// not counted: a sequence with penalties needs them all, so has none).
void TailSequences::count(TailSequence& s, int64_t p, int32_t token) {
  if (token == TailSequence::kUnknown) return;
  if (p < s.n_prompt)
    s.penalties.add_prompt(token);
  else
    s.penalties.add_output(token);
}

TailSequence& TailSequences::feed(uint64_t seq, const Row& row, uint64_t batch) {
  TailSequence& s = map_[seq];
  s.id = seq;
  s.last_batch = batch;
  const int64_t pos0 = row.pos0, end = pos0 + row.n_tokens;
  const int64_t size = int64_t(s.tokens.size());
  const int32_t* in = row.tokens;
  if (pos0 < 0) {
    s.lost = error_status(ErrorCode::kNotFound, "a row at position {}", pos0);
    return s;
  }
  if (pos0 <= row.needed_from) s.lost = Status();  // resent from what it needs: rebuilt below
  if (pos0 > size) {
    if (pos0 > row.needed_from) {
      s.lost = error_status(ErrorCode::kNotFound,
                            "the tail has no record of positions {}..{} (restarted or evicted, "
                            "and the batch does not resend them)",
                            size, pos0 - 1);
      return s;
    }
    // Positions its sequence does not need (a prompt prefix the scheduler
    // found cached): unknown, kept as kUnknown.
    s.tokens.resize(size_t(pos0), TailSequence::kUnknown);
  }
  if (!s.lost.ok()) return s;
  // Where the row's tokens first differ from the record's (or the record
  // ends), and whether the record goes on past the row's end.
  const int64_t known = int64_t(s.tokens.size());
  int64_t same = pos0;
  while (same < std::min(end, known) && s.tokens[size_t(same)] == in[same - pos0]) ++same;
  if (same < known || row.n_prompt != s.n_prompt) {
    if (size > 0) ++s.edits;  // a new record only learns its n_prompt
    // Identical up to the row's end with the same n_prompt: only the
    // positions past the end go (their counts with them).
    rewrite(s, row.n_prompt != s.n_prompt ? pos0 : same, row.n_prompt);
  }
  for (int64_t p = int64_t(s.tokens.size()); p < end; ++p) {
    count(s, p, in[p - pos0]);
    s.tokens.push_back(in[p - pos0]);
  }
  return s;
}

void TailSequences::append(TailSequence& s, int32_t token) {
  if (!s.lost.ok()) return;
  count(s, int64_t(s.tokens.size()), token);
  s.tokens.push_back(token);
}

void TailSequences::feed_batch(const ipc::Batch& b, int32_t n_rows, uint64_t batch) {
  int64_t off = 0;
  for (int32_t r = 0; r < n_rows; ++r) {
    const ipc::DescRow& row = b.rows[r];
    if (needs(b.sampling[r]))
      // A row's drafts are not the sequence's (yet): verification appends
      // the tokens it accepts (TailSampler), so they never enter the counts.
      feed(row.seq_id,
           Row{row.pos0, row.n_tokens - row.n_draft, row.n_prompt, b.tokens.data() + off,
               penalties_active(b.sampling[r]) ? 0 : row.n_prompt},
           batch);
    off += b.rows[r].n_tokens;
  }
  if (opt_.evict_every > 0 && batch % opt_.evict_every == 0) evict(batch);
}

void TailSequences::evict(uint64_t batch) {
  if (batch < opt_.evict_age) return;
  const uint64_t before = batch - opt_.evict_age;
  std::erase_if(map_, [&](const auto& kv) { return kv.second.last_batch < before; });
}

}  // namespace kvasir
