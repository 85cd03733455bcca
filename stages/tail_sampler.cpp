// stages/tail_sampler.cpp — see tail_sampler.h.
#include "stages/tail_sampler.h"

#include "base/check.h"
#include "base/log.h"

namespace kvasir {

void TailSampler::prepare(const ipc::Batch& b, uint64_t batch_id, int32_t n_rows) {
  if (grammar_) grammar_->prepare(b, n_rows, batch_id);
}

const uint32_t* const* TailSampler::masks(int32_t n_rows) {
  masks_.assign(size_t(n_rows), nullptr);
  if (!grammar_) return masks_.data();
  std::string error;
  for (int32_t r = 0; r < n_rows; ++r) masks_[size_t(r)] = grammar_->mask(r, &error);
  return masks_.data();
}

void TailSampler::sample(const ipc::Batch& b, uint64_t batch_id, int32_t n_rows,
                         const Logits& logits, const ipc::ResultView& out) {
  int64_t k = 0, t_off = 0;
  for (int32_t r = 0; r < n_rows; ++r) {
    const ipc::DescRow& row = b.rows[r];
    out.token[r] = -1;
    out.n_top[r] = 0;
    bool lost = false;
    const SequenceHistory* hist = feed_history(b, r, t_off, batch_id, lost);
    t_off += row.n_tokens;
    if (!row.sample) continue;
    float* row_logits = logits.rows + k++ * logits.vocab;
    std::span<const uint32_t> allowed;
    if (!row_mask(b, r, allowed)) continue;  // its grammar failed: token -1
    if (logits.device_token[r] >= 0) {       // sampled on the device: only its id came back
      out.token[r] = logits.device_token[r];
      out.logprob[r] = logits.device_logprob[r];
    } else if (lost) {
      // Its history was evicted: penalties without it would be silently
      // wrong. Token -1 fails this sequence alone.
      KV_LOG_ERROR("agent", "sequence {} lost its penalty history", row.seq_id);
      continue;
    } else {
      sample_row(b, r, row_logits, logits.vocab, hist, allowed, out);
    }
    if (b.sampling[r].grammar_entry != 0 && grammar_ && out.token[r] >= 0)
      grammar_->accept(r, out.token[r]);
  }
  if ((batch_id & 1023) == 0) histories_.evict_older_than(batch_id);
}

bool TailSampler::row_mask(const ipc::Batch& b, int32_t r, std::span<const uint32_t>& allowed) {
  if (b.sampling[r].grammar_entry == 0) return true;
  if (!grammar_) {
    KV_LOG_ERROR("agent", "sequence {}: structured output, but this tail has no grammar engine",
                 b.rows[r].seq_id);
    return false;
  }
  std::string error;
  const uint32_t* m = grammar_->mask(r, &error);
  if (!m) return false;  // logged by the grammar when it failed
  allowed = std::span<const uint32_t>(m, grammar_->mask_words());
  return true;
}

const SequenceHistory* TailSampler::feed_history(const ipc::Batch& b, int32_t r,
                                                 int64_t token_offset, uint64_t batch_id,
                                                 bool& lost) {
  const ipc::DescRow& row = b.rows[r];
  lost = false;
  if (!penalties_active(b.sampling[r])) return nullptr;
  const SequenceHistory* hist =
      histories_.feed(row.seq_id,
                      PenaltyHistories::Row{row.pos0, row.n_tokens, row.n_prompt,
                                            b.tokens.data() + token_offset, row.pad != 0},
                      batch_id);
  lost = hist == nullptr;
  return hist;
}

void TailSampler::sample_row(const ipc::Batch& b, int32_t r, float* row_logits, int32_t vocab,
                             const SequenceHistory* hist, std::span<const uint32_t> allowed,
                             const ipc::ResultView& out) {
  const ipc::DescRow& row = b.rows[r];
  const SampleResult sr = sampler_.sample(row_logits, vocab, b.sampling[r], hist,
                                          uint64_t(row.pos0 + row.n_tokens), allowed);
  if (sr.all_masked && !allowed.empty()) {  // that sequence fails alone (token -1)
    KV_LOG_ERROR("agent", "sequence {}: its grammar allows no token with a finite logit",
                 row.seq_id);
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
