#include "daemon/engine/descriptor.h"

#include <algorithm>

namespace kvasir {

void encode_batch(const SchedulerOutput& out, uint64_t batch_id, int32_t max_table, ipc::Batch& b,
                  int32_t tables) {
  b.batch_id = batch_id;
  b.rows.clear();
  b.tokens.clear();
  b.sampling.clear();
  b.copies.clear();
  // Grown, never shrunk nor cleared: a 256-row batch's tables are 512 KiB
  // at max_table 512, and zero-filling them cost more than the ids' copy.
  const size_t need = out.rows.size() * size_t(max_table);
  if (b.tables.size() < need) b.tables.resize(need);
  if (tables == 2 && b.swa_tables.size() < need) b.swa_tables.resize(need);
  for (size_t r = 0; r < out.rows.size(); ++r) {
    const ScheduledRow& row = out.rows[r];
    ipc::DescRow dr;
    // Each choice its own penalty history; padding a filler's, which keeps none.
    dr.seq_id = row.pad ? filler_key(row.id, row.index) : sequence_key(row.id, row.index);
    dr.pos0 = row.pos0;
    dr.n_tokens = row.n_tokens;
    dr.n_table = int32_t(row.table.size());
    dr.sample = row.sample;
    dr.n_prompt = row.n_prompt;
    dr.n_draft = uint8_t(row.n_draft);
    if (row.prompt_logprobs >= 0) {
      dr.prompt_logprobs = uint8_t(row.prompt_logprobs + 1);
      dr.next_token = row.next_token;
    }
    b.rows.push_back(dr);
    b.tokens.insert(b.tokens.end(), row.tokens.begin(), row.tokens.end());
    std::copy(row.table.begin(), row.table.end(), b.tables.begin() + int64_t(r) * max_table);
    if (tables == 2)  // the scheduler keeps both tables of a sequence as long
      std::copy(row.swa_table.begin(), row.swa_table.end(),
                b.swa_tables.begin() + int64_t(r) * max_table);
    b.sampling.push_back(row.sampling);
    b.sampling.back().n_logit_bias = 0;
    if (row.logit_bias && !row.logit_bias->empty()) {
      // Bridge::check_request bounded it; row r's entries from r × kMaxLogitBias.
      const size_t n = std::min(row.logit_bias->size(), size_t(kMaxLogitBias));
      if (b.bias.size() < (r + 1) * size_t(kMaxLogitBias))
        b.bias.resize((r + 1) * size_t(kMaxLogitBias));
      std::copy_n(row.logit_bias->begin(), n, b.bias.begin() + int64_t(r) * kMaxLogitBias);
      b.sampling.back().n_logit_bias = uint16_t(n);
    }
    if (row.copy_src >= 0) b.copies.push_back(ipc::BlockCopy{row.copy_src, row.copy_dst});
  }
  b.n_tokens = int32_t(b.tokens.size());
}

}  // namespace kvasir
