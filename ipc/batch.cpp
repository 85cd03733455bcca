#include "ipc/batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace kvasir::ipc {

namespace {
template <typename... Args>
Status refused(fmt::format_string<Args...> f, Args&&... args) {
  return Status(ErrorCode::kBatchRefused, fmt::format(f, std::forward<Args>(args)...));
}
uint64_t align64(uint64_t x) {
  return (x + 63) & ~uint64_t(63);
}
}  // namespace

uint64_t desc_bytes(const SlotDims& d) {
  uint64_t n = align64(sizeof(DescHeader));
  n += align64(sizeof(DescRow) * uint64_t(d.max_rows));
  n += align64(4ull * uint64_t(d.max_tokens));
  n += align64(4ull * uint64_t(d.max_rows) * uint64_t(d.max_table)) * uint64_t(d.tables);
  n += align64(sizeof(SamplingParams) * uint64_t(d.max_rows));
  n += align64(sizeof(BlockCopy) * uint64_t(d.max_rows));
  n += align64(sizeof(LogitBias) * kMaxLogitBias * uint64_t(d.max_rows));
  return n;
}

uint64_t result_bytes(const SlotDims& d) {
  uint64_t r = uint64_t(d.max_rows);
  return align64(sizeof(ResultHeader)) + align64(4 * r) + align64(4 * r) + align64(4 * r) +
         align64(sizeof(TopLogprob) * kMaxLogprobs * r) +
         align64(sizeof(PromptRecord) * uint64_t(d.max_tokens)) +
         align64(sizeof(DraftRecord) * uint64_t(d.max_tokens)) + align64(sizeof(ForcedRecord) * r);
}

DescView desc_view(void* base, const SlotDims& d) {
  auto* p = static_cast<char*>(base);
  DescView v;
  v.hdr = reinterpret_cast<DescHeader*>(p);
  p += align64(sizeof(DescHeader));
  v.rows = reinterpret_cast<DescRow*>(p);
  p += align64(sizeof(DescRow) * uint64_t(d.max_rows));
  v.tokens = reinterpret_cast<int32_t*>(p);
  p += align64(4ull * uint64_t(d.max_tokens));
  v.tables = reinterpret_cast<int32_t*>(p);
  p += align64(4ull * uint64_t(d.max_rows) * uint64_t(d.max_table));
  if (d.tables == 2) {
    v.swa_tables = reinterpret_cast<int32_t*>(p);
    p += align64(4ull * uint64_t(d.max_rows) * uint64_t(d.max_table));
  }
  v.sampling = reinterpret_cast<SamplingParams*>(p);
  p += align64(sizeof(SamplingParams) * uint64_t(d.max_rows));
  v.copies = reinterpret_cast<BlockCopy*>(p);
  p += align64(sizeof(BlockCopy) * uint64_t(d.max_rows));
  v.bias = reinterpret_cast<LogitBias*>(p);
  return v;
}

ResultView result_view(void* base, const SlotDims& d) {
  auto* p = static_cast<char*>(base);
  uint64_t r = uint64_t(d.max_rows);
  ResultView v;
  v.hdr = reinterpret_cast<ResultHeader*>(p);
  p += align64(sizeof(ResultHeader));
  v.token = reinterpret_cast<int32_t*>(p);
  p += align64(4 * r);
  v.logprob = reinterpret_cast<float*>(p);
  p += align64(4 * r);
  v.n_top = reinterpret_cast<int32_t*>(p);
  p += align64(4 * r);
  v.top = reinterpret_cast<TopLogprob*>(p);
  p += align64(sizeof(TopLogprob) * kMaxLogprobs * r);
  v.prompt = reinterpret_cast<PromptRecord*>(p);
  p += align64(sizeof(PromptRecord) * uint64_t(d.max_tokens));
  v.draft = reinterpret_cast<DraftRecord*>(p);
  p += align64(sizeof(DraftRecord) * uint64_t(d.max_tokens));
  v.forced = reinterpret_cast<ForcedRecord*>(p);
  return v;
}

Status check_msg(const BatchMsg& m, const SlotDims& d, uint64_t last_batch_id) {
  if (m.kind != kMsgBatch || m.version != kMsgVersion)
    return refused("message kind {} version {} (expected {} version {})", m.kind, m.version,
                   kMsgBatch, kMsgVersion);
  if (m.slot >= uint32_t(d.inflight))
    return refused("batch {}: slot {} out of range [0, {})", m.batch_id, m.slot, d.inflight);
  if (m.batch_id <= last_batch_id)
    return refused("batch id {} does not follow {} (ids increase)", m.batch_id, last_batch_id);
  if (m.n_rows < 1 || m.n_rows > d.max_rows)
    return refused("batch {}: {} rows out of range [1, {}]", m.batch_id, m.n_rows, d.max_rows);
  if (m.n_tokens < m.n_rows || m.n_tokens > d.max_tokens)
    return refused("batch {}: {} tokens out of range [{}, {}]", m.batch_id, m.n_tokens, m.n_rows,
                   d.max_tokens);
  return Status();
}

namespace {
// The block copies of a descriptor whose header is h (copied into out.copies).
Status read_copies(const DescView& v, const DescHeader& h, const BatchMsg& m, const SlotDims& d,
                   int32_t n_blocks, Batch& out) {
  if (h.n_copies < 0 || h.n_copies > d.max_rows)
    return refused("batch {}: {} block copies (max {})", m.batch_id, h.n_copies, d.max_rows);
  out.copies.assign(v.copies, v.copies + h.n_copies);
  for (size_t i = 0; i < out.copies.size(); ++i) {
    const BlockCopy& c = out.copies[i];
    if (c.src < 0 || c.src >= n_blocks || c.dst < 0 || c.dst >= n_blocks || c.src == c.dst)
      return refused("batch {}: block copy {} -> {} (pool [0, {}))", m.batch_id, c.src, c.dst,
                     n_blocks);
    for (size_t j = 0; j < i; ++j)
      if (out.copies[j].dst == c.dst || out.copies[j].dst == c.src || out.copies[j].src == c.dst)
        return refused("batch {}: block copies {} and {} overlap", m.batch_id, j, i);
  }
  return Status();
}

// Row r's sliding table (d.tables 2), copied into out.swa_tables: a run of
// unmapped entries, then ids of the sliding pool; the row's own positions
// all mapped. (Whether its window is mapped is the kernels' check.)
Status read_swa_table(const DescView& v, const BatchMsg& m, const SlotDims& d, int32_t r,
                      int32_t n_blocks_swa, int32_t block_size, Batch& out) {
  const DescRow& row = out.rows[size_t(r)];
  int32_t* t = out.swa_tables.data() + int64_t(r) * d.max_table;
  const int32_t* src = v.swa_tables + int64_t(r) * d.max_table;
  std::copy(src, src + row.n_table, t);
  int32_t i = 0;
  while (i < row.n_table && t[i] == -1) ++i;
  if (int64_t(i) * block_size > row.pos0)
    return refused("batch {} row {}: sliding table unmapped up to block {}, past position {}",
                   m.batch_id, r, i, row.pos0);
  for (; i < row.n_table; ++i)
    if (t[i] < 0 || t[i] >= n_blocks_swa)
      return refused("batch {} row {}: sliding block id {} out of range [0, {})", m.batch_id, r,
                     t[i], n_blocks_swa);
  return Status();
}
}  // namespace

Status read_desc(const DescView& v, const BatchMsg& m, const SlotDims& d, int32_t n_blocks,
                 int32_t block_size, Batch& out, int32_t n_blocks_swa) {
  DescHeader h;
  std::memcpy(&h, v.hdr, sizeof h);
  if (h.batch_id != m.batch_id || h.n_rows != m.n_rows || h.n_tokens != m.n_tokens)
    return refused(
        "slot {}: descriptor (batch {}, {} rows, {} tokens) does not match the "
        "message (batch {}, {} rows, {} tokens)",
        m.slot, h.batch_id, h.n_rows, h.n_tokens, m.batch_id, m.n_rows, m.n_tokens);
  const int32_t nr = m.n_rows, nt = m.n_tokens;  // already range-checked by check_msg
  out.batch_id = h.batch_id;
  out.n_tokens = nt;
  out.rows.assign(v.rows, v.rows + nr);
  out.tokens.assign(v.tokens, v.tokens + nt);
  // Each row's own ids only, into buffers reused batch after batch: a
  // 256-row batch's whole tables are 512 KiB at max_table 512, a few
  // times the ids a row holds; what lies past a row's n_table is stale.
  if (out.tables.size() < size_t(nr) * size_t(d.max_table))
    out.tables.resize(size_t(nr) * size_t(d.max_table));
  if (d.tables == 2 && out.swa_tables.size() < size_t(nr) * size_t(d.max_table))
    out.swa_tables.resize(size_t(nr) * size_t(d.max_table));
  out.sampling.assign(v.sampling, v.sampling + nr);
  if (out.bias.size() < size_t(nr) * size_t(kMaxLogitBias))
    out.bias.resize(size_t(nr) * size_t(kMaxLogitBias));
  int64_t sum = 0;
  for (int32_t r = 0; r < nr; ++r) {
    const DescRow& row = out.rows[r];
    if (row.n_tokens < 1 || row.n_tokens > nt)
      return refused("batch {} row {}: {} tokens", m.batch_id, r, row.n_tokens);
    sum += row.n_tokens;
    if (row.n_table < 0 || row.n_table > d.max_table)
      return refused("batch {} row {}: table of {} blocks (max {})", m.batch_id, r, row.n_table,
                     d.max_table);
    if (row.pos0 < 0 || int64_t(row.pos0) + row.n_tokens > int64_t(row.n_table) * block_size)
      return refused("batch {} row {}: positions {}..{} outside its {} blocks", m.batch_id, r,
                     row.pos0, int64_t(row.pos0) + row.n_tokens - 1, row.n_table);
    int32_t* t = out.tables.data() + int64_t(r) * d.max_table;
    std::copy(v.tables + int64_t(r) * d.max_table, v.tables + int64_t(r) * d.max_table + row.n_table,
              t);
    for (int32_t i = 0; i < row.n_table; ++i)
      if (t[i] < 0 || t[i] >= n_blocks)
        return refused("batch {} row {}: block id {} out of range [0, {})", m.batch_id, r, t[i],
                       n_blocks);
    if (d.tables == 2) {
      const Status st = read_swa_table(v, m, d, r, n_blocks_swa, block_size, out);
      if (!st.ok()) return st;
    }
    if (row.sample > 1)
      return refused("batch {} row {}: sample flag {}", m.batch_id, r, row.sample);
    if (row.n_prompt < 0)
      return refused("batch {} row {}: n_prompt {} < 0", m.batch_id, r, row.n_prompt);
    const int32_t nb = out.sampling[r].n_logit_bias;
    if (nb > kMaxLogitBias)
      return refused("batch {} row {}: {} logit biases (max {})", m.batch_id, r, nb, kMaxLogitBias);
    std::copy_n(v.bias + int64_t(r) * kMaxLogitBias, nb,
                out.bias.data() + int64_t(r) * kMaxLogitBias);
    if (row.n_draft > 0 && (!row.sample || row.n_draft >= row.n_tokens))
      return refused("batch {} row {}: {} drafts in {} tokens{}", m.batch_id, r, row.n_draft,
                     row.n_tokens, row.sample ? "" : " (a row not sampled)");
    if (row.prompt_logprobs > kMaxLogprobs + 1)
      return refused("batch {} row {}: prompt_logprobs {}", m.batch_id, r, row.prompt_logprobs);
  }
  if (sum != nt)
    return refused("batch {}: rows carry {} tokens, header says {}", m.batch_id, sum, nt);
  return read_copies(v, h, m, d, n_blocks, out);
}

void write_desc(const DescView& v, const Batch& b, const SlotDims& d) {
  const int32_t nr = int32_t(b.rows.size());
  std::copy(b.rows.begin(), b.rows.end(), v.rows);
  std::copy(b.tokens.begin(), b.tokens.end(), v.tokens);
  for (int32_t r = 0; r < nr; ++r) {
    const int32_t* src = b.tables.data() + int64_t(r) * d.max_table;
    std::copy(src, src + b.rows[r].n_table, v.tables + int64_t(r) * d.max_table);
    if (d.tables == 2) {
      const int32_t* swa = b.swa_tables.data() + int64_t(r) * d.max_table;
      std::copy(swa, swa + b.rows[r].n_table, v.swa_tables + int64_t(r) * d.max_table);
    }
  }
  std::copy(b.sampling.begin(), b.sampling.end(), v.sampling);
  std::copy(b.copies.begin(), b.copies.end(), v.copies);
  for (int32_t r = 0; r < nr; ++r) {
    const std::span<const LogitBias> bias = b.row_bias(r);
    std::copy(bias.begin(), bias.end(), v.bias + int64_t(r) * kMaxLogitBias);
  }
  DescHeader h{b.batch_id, nr, b.n_tokens, int32_t(b.copies.size()), 0};
  std::memcpy(v.hdr, &h, sizeof h);
}

}  // namespace kvasir::ipc
