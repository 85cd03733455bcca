// stages/tail_prompt.cpp — see tail_prompt.h.
#include "stages/tail_prompt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace kvasir {
namespace {

// The record of `next` under one position's logits: the raw log-softmax
// (NaN counts as -inf, as in the sampler), the rank (the tokens at least
// as likely, itself included, as vLLM counts it: 1 = the most likely),
// and the k most likely tokens (ties keep the lower id).
void score_position(const float* x, int32_t vocab, int32_t next, int k, ipc::PromptRecord& rec) {
  const float ninf = -std::numeric_limits<float>::infinity();
  auto val = [&](int32_t i) { return std::isnan(x[i]) ? ninf : x[i]; };
  float mx = ninf;
  for (int32_t i = 0; i < vocab; ++i) mx = std::max(mx, val(i));
  double sum = 0;
  if (mx != ninf)
    for (int32_t i = 0; i < vocab; ++i) sum += std::exp(double(val(i)) - double(mx));
  const double lse = mx == ninf ? 0.0 : double(mx) + std::log(sum);
  const float own = val(next);
  int32_t rank = 0;
  ipc::TopLogprob top[kMaxLogprobs];
  float tv[kMaxLogprobs];
  int n = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    const float v = val(i);
    if (v >= own) ++rank;
    if (k == 0 || (n == k && !(v > tv[n - 1]))) continue;
    int j = n < k ? n++ : n - 1;
    for (; j > 0 && v > tv[j - 1]; --j) {
      tv[j] = tv[j - 1];
      top[j] = top[j - 1];
    }
    tv[j] = v;
    top[j].token = i;
  }
  rec.token = next;
  rec.logprob = own == ninf ? ninf : float(double(own) - lse);
  rec.rank = rank;
  rec.n_top = n;
  for (int j = 0; j < n; ++j) {
    rec.top[j].token = top[j].token;
    rec.top[j].logprob = tv[j] == ninf ? ninf : float(double(tv[j]) - lse);
  }
}

}  // namespace

bool wants_prompt_logprobs(const ipc::Batch& b, int32_t n_rows) {
  for (int32_t r = 0; r < n_rows; ++r)
    if (b.rows[r].prompt_logprobs != 0) return true;
  return false;
}

bool has_drafts(const ipc::Batch& b, int32_t n_rows) {
  for (int32_t r = 0; r < n_rows; ++r)
    if (b.rows[r].n_draft != 0) return true;
  return false;
}

void score_prompt(const ipc::Batch& b, int32_t n_rows, const float* logits, int32_t vocab,
                  ipc::PromptRecord* out) {
  int64_t t0 = 0;
  for (int32_t r = 0; r < n_rows; ++r) {
    const ipc::DescRow& row = b.rows[r];
    const int64_t first = t0;
    t0 += row.n_tokens;
    if (row.prompt_logprobs == 0) continue;
    const int k = std::min<int>(row.prompt_logprobs - 1, std::min<int32_t>(kMaxLogprobs, vocab));
    for (int32_t i = 0; i < row.n_tokens; ++i) {
      ipc::PromptRecord rec;
      const int64_t t = first + i;
      const int64_t pos = int64_t(row.pos0) + i + 1;
      const int32_t next = i + 1 < row.n_tokens ? b.tokens[size_t(t + 1)] : row.next_token;
      if (pos < row.n_prompt && next >= 0 && next < vocab) {
        rec.position = int32_t(pos);
        score_position(logits + t * vocab, vocab, next, k, rec);
      }
      std::memcpy(&out[t], &rec, sizeof rec);
    }
  }
}

void pack_sampled_logits(const ipc::Batch& b, int32_t n_rows, float* logits, int32_t vocab) {
  // Row k's destination never lies past its source (k <= its last token
  // index) nor over a later row's source: in order, each move is safe.
  // A drafting row's last 1 + n_draft tokens move together, in order.
  int64_t t = 0, k = 0;
  for (int32_t r = 0; r < n_rows; ++r) {
    t += b.rows[r].n_tokens;
    if (!b.rows[r].sample) continue;
    const int64_t n = 1 + b.rows[r].n_draft;
    if (k != t - n)
      std::memmove(logits + k * vocab, logits + (t - n) * vocab,
                   size_t(n) * size_t(vocab) * sizeof(float));
    k += n;
  }
}

}  // namespace kvasir
