#include "daemon/scheduler_min.h"

#include <algorithm>

namespace kvasir {

std::vector<SchedRow> MinScheduler::next(std::deque<Sequence*>& waiting,
                                         std::vector<Sequence*>& running, BlockManager& blocks) {
  std::vector<SchedRow> rows;
  int32_t budget = lim_.max_tokens;
  auto take = [&](Sequence* s, bool whole) {
    const int64_t remaining = int64_t(s->tokens.size()) - s->n_scheduled;
    if (remaining <= 0 || s->awaiting || s->done || s->cancelled) return false;
    if (int32_t(rows.size()) >= lim_.max_rows || budget <= 0) return false;
    int32_t n = int32_t(std::min<int64_t>({remaining, budget, lim_.chunk_size}));
    // A prompt that fits in one micro-batch goes whole: wait for the next one.
    if (whole && n < remaining && remaining <= lim_.max_tokens && !rows.empty()) return false;
    SchedRow r{s, int32_t(s->n_scheduled), n, n == remaining};
    s->n_scheduled += n;
    s->awaiting = r.sample;
    budget -= n;
    rows.push_back(r);
    return true;
  };
  // Decodes first: their latency is what users feel.
  for (Sequence* s : running)
    if (int64_t(s->tokens.size()) - s->n_scheduled == 1) take(s, false);
  // Then prefill chunks of admitted prompts.
  for (Sequence* s : running)
    if (int64_t(s->tokens.size()) - s->n_scheduled > 1) take(s, true);
  // Then admission, FIFO: a request that does not fit blocks the ones behind
  // it (no starvation of long prompts).
  while (!waiting.empty() && int32_t(rows.size()) < lim_.max_rows && budget > 0 &&
         int32_t(running.size()) < lim_.max_num_seqs) {
    Sequence* s = waiting.front();
    if (s->cancelled) break;  // the engine drops cancelled waiters itself
    const int64_t remaining = int64_t(s->tokens.size());
    if (remaining <= lim_.max_tokens && remaining > budget && !rows.empty()) break;
    if (!blocks.ensure(s->table, reserve_tokens(*s))) break;
    waiting.pop_front();
    running.push_back(s);
    take(s, true);
  }
  return rows;
}

}  // namespace kvasir
