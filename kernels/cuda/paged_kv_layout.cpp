// Host-side check of a paged-attention batch before it is uploaded: every
// index the CUDA kernels will follow, so a malformed batch is refused with a
// message instead of being caught (later, as a flag) by the device checks.
#include "kernels/cuda/paged_kv_layout.h"

#include <fmt/format.h>

namespace kvasir::cuda {

std::string check_attn_batch_host(const GpuKvLayer& kv, const int32_t* q_start, const int32_t* pos0,
                                  const int32_t* block_tables, int32_t n_seqs, int32_t n_tokens,
                                  int32_t max_blocks, int32_t max_context) {
  if (kv.n_blocks < 0 || kv.block_size <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0)
    return fmt::format("paged KV: bad layout ({} blocks of {} tokens, {} kv heads of dim {})",
                       kv.n_blocks, kv.block_size, kv.n_kv_heads, kv.head_dim);
  if (n_seqs < 0 || n_tokens < 0 || max_blocks < 0 || max_context < 0)
    return fmt::format("batch: negative size (seqs {}, tokens {}, max_blocks {}, max_context {})",
                       n_seqs, n_tokens, max_blocks, max_context);
  if (n_seqs == 0) return n_tokens == 0 ? "" : "batch: tokens but no sequences";
  if (q_start == nullptr || pos0 == nullptr || block_tables == nullptr)
    return "batch: null q_start, pos0 or block_tables";
  if (q_start[0] != 0) return fmt::format("batch: q_start[0] = {} (want 0)", q_start[0]);
  if (q_start[n_seqs] != n_tokens)
    return fmt::format("batch: q_start[{}] = {} but n_tokens = {}", n_seqs, q_start[n_seqs],
                       n_tokens);
  for (int32_t s = 0; s < n_seqs; ++s) {
    const int64_t n_new = int64_t(q_start[s + 1]) - q_start[s];
    if (n_new < 0) return fmt::format("batch: q_start decreases at sequence {}", s);
    if (pos0[s] < 0) return fmt::format("batch: sequence {}: pos0 {} < 0", s, pos0[s]);
    if (n_new == 0) continue;
    const int64_t ctx = int64_t(pos0[s]) + n_new;  // positions 0 .. ctx - 1
    if (ctx > max_context)
      return fmt::format("batch: sequence {}: context {} exceeds max_context {}", s, ctx,
                         max_context);
    const int64_t need = (ctx - 1) / kv.block_size + 1;
    if (need > max_blocks)
      return fmt::format("batch: sequence {}: position {} needs {} blocks but the table has {}", s,
                         ctx - 1, need, max_blocks);
    const int32_t* table = block_tables + int64_t(s) * max_blocks;
    for (int64_t b = 0; b < need; ++b)
      if (table[b] < 0 || table[b] >= kv.n_blocks)
        return fmt::format("batch: sequence {}: logical block {} maps to block {} outside [0, {})",
                           s, b, table[b], kv.n_blocks);
  }
  return {};
}

}  // namespace kvasir::cuda
