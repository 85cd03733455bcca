// stages/tail_sampler.cpp — see tail_sampler.h.
#include "stages/tail_sampler.h"

#include <algorithm>

#include "base/check.h"
#include "base/log.h"

namespace kvasir {

void TailSampler::prepare(const ipc::Batch& b, uint64_t batch_id, int32_t n_rows) {
  seqs_.feed_batch(b, n_rows, batch_id);
  fed_ = true;
  fed_batch_ = batch_id;
  if (grammar_) grammar_->prepare(b, n_rows, batch_id, seqs_);
}

const uint32_t* const* TailSampler::masks(int32_t n_rows) {
  masks_.assign(size_t(n_rows), nullptr);
  if (!grammar_) return masks_.data();
  for (int32_t r = 0; r < n_rows; ++r) (void)grammar_->mask(r, &masks_[size_t(r)]);
  return masks_.data();
}

void TailSampler::sample(const ipc::Batch& b, uint64_t batch_id, int32_t n_rows,
                         const Logits& logits, const ipc::ResultView& out) {
  if (!fed_ || fed_batch_ != batch_id) seqs_.feed_batch(b, n_rows, batch_id);
  fed_ = false;
  int64_t k = 0, first = 0;
  for (int32_t r = 0; r < n_rows; ++r) {
    const ipc::DescRow& row = b.rows[r];
    const int64_t row_first = first;
    first += row.n_tokens;
    out.token[r] = ipc::kTokenFailed;
    out.n_top[r] = 0;
    if (out.forced) out.forced[r].n = 0;
    if (!row.sample) continue;
    float* row_logits = logits.rows + k * logits.vocab;
    k += 1 + row.n_draft;
    for (int32_t j = 0; j < row.n_draft; ++j)
      out.draft[row_first + row.n_tokens - row.n_draft + j] = ipc::DraftRecord{};
    TailSequence* rec = nullptr;
    if (!record(b, r, rec)) continue;  // lost: token -1
    if (row.n_draft > 0) {
      verify_row(b, r, row_first, row_logits, logits.vocab, rec, out);
      write_forced(b, r, rec, out);
      continue;
    }
    std::span<const uint32_t> allowed;
    if (!row_mask(b, r, allowed, out.token[r])) continue;  // its grammar failed: the token says why
    if (logits.device_token[r] >= 0) {       // sampled on the device: only its id came back
      out.token[r] = logits.device_token[r];
      out.logprob[r] = logits.device_logprob[r];
    } else {
      const bool pen = rec && penalties_active(b.sampling[r]);
      sample_row(b, r, row_logits, logits.vocab, pen ? &rec->penalties : nullptr, allowed, out);
    }
    if (!rec || out.token[r] < 0) continue;
    seqs_.append(*rec, out.token[r]);
    if (b.sampling[r].grammar_entry != 0 && grammar_) grammar_->accept(r, /*row_ends=*/true);
    write_forced(b, r, rec, out);
  }
}

// A constrained row's grammar-forced tokens after what it emitted: the
// scheduler's drafts for the sequence's next row (ipc::ForcedRecord).
void TailSampler::write_forced(const ipc::Batch& b, int32_t r, const TailSequence* rec,
                               const ipc::ResultView& out) {
  if (!out.forced || !rec || !grammar_ || b.sampling[r].grammar_entry == 0 || out.token[r] < 0)
    return;
  const std::span<const int32_t> f = grammar_->forced(r);
  ipc::ForcedRecord& fr = out.forced[r];
  fr.n = int32_t(std::min<size_t>(f.size(), ipc::kMaxForced));
  std::copy_n(f.begin(), fr.n, fr.token);
}

bool TailSampler::record(const ipc::Batch& b, int32_t r, TailSequence*& rec) {
  rec = nullptr;
  if (!TailSequences::needs(b.sampling[r])) return true;
  rec = seqs_.find(b.rows[r].seq_id);
  if (rec && rec->lost.ok()) return true;
  // Its record was evicted or never made: penalties or a grammar without
  // it would be silently wrong. Token -1 fails this sequence alone.
  KV_LOG_ERROR("agent", "sequence {} lost its record at the tail: {}", b.rows[r].seq_id,
               rec ? rec->lost.message() : std::string("none"));
  return false;
}

bool TailSampler::row_mask(const ipc::Batch& b, int32_t r, std::span<const uint32_t>& allowed,
                           int32_t& token) {
  if (b.sampling[r].grammar_entry == 0) return true;
  if (!grammar_) {
    KV_LOG_ERROR("agent", "sequence {}: structured output, but this tail has no grammar engine",
                 b.rows[r].seq_id);
    return false;
  }
  const uint32_t* m = nullptr;
  // Logged by the grammar when it failed. A spec refused (too complex to
  // compile in time, a token it refuses) is the request's fault.
  if (Status st = grammar_->mask(r, &m); !st.ok()) {
    if (st.code() == ErrorCode::kInvalidArgument) token = ipc::kTokenGrammarRefused;
    return false;
  }
  allowed = std::span<const uint32_t>(m, grammar_->mask_words());
  return true;
}

void TailSampler::sample_row(const ipc::Batch& b, int32_t r, float* row_logits, int32_t vocab,
                             const SequenceHistory* hist, std::span<const uint32_t> allowed,
                             const ipc::ResultView& out) {
  const ipc::DescRow& row = b.rows[r];
  const SampleResult sr =
      sampler_.sample(row_logits, vocab, b.sampling[r], hist, uint64_t(row.pos0 + row.n_tokens),
                      allowed, b.row_bias(r));
  if (sr.all_masked && !allowed.empty()) {  // that sequence fails alone: its spec's fault
    KV_LOG_ERROR("agent", "sequence {}: its grammar allows no token with a finite logit",
                 row.seq_id);
    out.token[r] = ipc::kTokenGrammarRefused;
    return;
  }
  KV_CHECK(!sr.all_masked, "row {} (sequence {}): every logit is NaN or -inf", r, row.seq_id);
  out.token[r] = sr.token;
  out.logprob[r] = sr.logprob;
  out.n_top[r] = sr.n_top;
  for (int i = 0; i < sr.n_top && i < kMaxLogprobs; ++i)
    out.top[r * kMaxLogprobs + i] = ipc::TopLogprob{sr.top[i].first, sr.top[i].second};
}

}  // namespace kvasir

namespace kvasir {

void TailSampler::verify_row(const ipc::Batch& b, int32_t r, int64_t first, float* row_logits,
                             int32_t vocab, TailSequence* rec, const ipc::ResultView& out) {
  const ipc::DescRow& row = b.rows[r];
  const int32_t k = row.n_draft;
  const int64_t d1 = first + row.n_tokens - k;  // the first draft's token index
  const bool pen = rec && penalties_active(b.sampling[r]);
  // t_0's position: the one an ordinary row would sample. The draw is keyed
  // by (seed, position), so t_i is the token the sequence gets there
  // without speculation once t_0..t_{i-1} are its tokens.
  const uint64_t pos = uint64_t(row.pos0) + uint64_t(row.n_tokens - k);
  const bool constrained = b.sampling[r].grammar_entry != 0;
  for (int32_t i = 0; i <= k; ++i) {
    // Under a grammar, t_i's mask is the one for the output holding
    // t_0..t_{i-1}: accept() below started it. A grammar that fails or
    // allows nothing past t_0 ends the run there; the next row meets it.
    std::span<const uint32_t> allowed;
    int32_t refused = ipc::kTokenFailed;
    if (!row_mask(b, r, allowed, i == 0 ? out.token[r] : refused)) return;
    const SampleResult sr =
        sampler_.sample(row_logits + int64_t(i) * vocab, vocab, b.sampling[r],
                        pen ? &rec->penalties : nullptr, pos + uint64_t(i), allowed, b.row_bias(r));
    if (sr.all_masked && !allowed.empty()) {
      if (i > 0) return;
      KV_LOG_ERROR("agent", "sequence {}: its grammar allows no token with a finite logit",
                   row.seq_id);
      out.token[r] = ipc::kTokenGrammarRefused;
      return;
    }
    KV_CHECK(!sr.all_masked, "row {} (sequence {}): every logit is NaN or -inf", r, row.seq_id);
    if (i == 0) {
      out.token[r] = sr.token;
      out.logprob[r] = sr.logprob;
      out.n_top[r] = sr.n_top;
      for (int j = 0; j < sr.n_top && j < kMaxLogprobs; ++j)
        out.top[r * kMaxLogprobs + j] = ipc::TopLogprob{sr.top[j].first, sr.top[j].second};
    } else {
      ipc::DraftRecord& d = out.draft[d1 + i - 1];
      d.token = sr.token;
      d.logprob = sr.logprob;
      d.n_top = sr.n_top;
      for (int j = 0; j < sr.n_top && j < kMaxLogprobs; ++j)
        d.top[j] = ipc::TopLogprob{sr.top[j].first, sr.top[j].second};
    }
    const bool last = i == k || sr.token != b.tokens[size_t(d1 + i)];
    if (rec) seqs_.append(*rec, sr.token);  // before t_{i+1}: its penalties count it
    if (rec && constrained && grammar_) grammar_->accept(r, last);
    if (last) break;
  }
}

}  // namespace kvasir
