// relay/relay.cpp — the two ends of a ring link that crosses hosts
// (relay/relay.h; docs/multi-host.md, "The relay").
#include "relay/relay.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>
#include <variant>
#include <vector>

#include "base/check.h"
#include "base/log.h"

namespace kvasir::relay {
namespace {

Status bad_frame(const char* what, const std::string& why) {
  return error_status(ErrorCode::kInvalidArgument, "relay: {}: {}", what, why);
}

Status check_cut(const ipc::Segment& seg, int r) {
  if (r < 1 || r >= seg.n_stages())
    return error_status(ErrorCode::kInvalidArgument,
                        "relay: the first remote stage {} is not in [1, {})", r, seg.n_stages());
  return Status();
}

// A slice r..e-1 that ends before the tail.
Status check_slice(const ipc::Segment& seg, int r, int e) {
  KV_RETURN_IF_ERROR(check_cut(seg, r));
  if (e <= r || e >= seg.n_stages())
    return error_status(ErrorCode::kInvalidArgument,
                        "relay: a slice {}..{} does not end before the tail {}", r, e - 1,
                        seg.n_stages() - 1);
  return Status();
}

net::ByteView bytes_at(const void* p, uint64_t n) {
  return net::ByteView(static_cast<const uint8_t*>(p), size_t(n));
}

}  // namespace

namespace {

// The descriptor as a Batch frame carries it: the header, the batch's rows,
// tokens, sampling parameters and block copies, then each row's n_table
// table entries (and sliding-table entries), then each row's n_logit_bias
// biases. The slot's fixed layout is rebuilt on the far side; what lies
// past each row's counts is never read (ipc::read_desc copies no more).
// One walk for both directions: `move(slot_bytes, n)` copies n bytes
// between the slot and the frame; counts are read from the slot, which the
// caller has already filled up to them when decoding. Not ok: a count out
// of range (kBatchRefused, as ipc::read_desc would say).
template <class Move>
Status walk_desc(const ipc::DescView& v, const ipc::SlotDims& d, int32_t n_rows, int32_t n_tokens,
                 Move&& move) {
  const size_t rows = size_t(n_rows);
  move(v.hdr, sizeof(ipc::DescHeader));
  const int32_t copies = v.hdr->n_copies;
  if (copies < 0 || copies > d.max_rows)
    return error_status(ErrorCode::kBatchRefused, "{} block copies (max {})", copies, d.max_rows);
  move(v.rows, sizeof(ipc::DescRow) * rows);
  move(v.tokens, 4 * size_t(n_tokens));
  move(v.sampling, sizeof(SamplingParams) * rows);
  move(v.copies, sizeof(ipc::BlockCopy) * size_t(copies));
  for (int32_t* t : {v.tables, v.swa_tables}) {
    if (!t) continue;
    for (size_t r = 0; r < rows; ++r) {
      const int32_t n = v.rows[r].n_table;
      if (n < 0 || n > d.max_table)
        return error_status(ErrorCode::kBatchRefused, "row {}: a table of {} (max {})", r, n,
                            d.max_table);
      move(t + r * size_t(d.max_table), 4 * size_t(n));
    }
  }
  for (size_t r = 0; r < rows; ++r) {
    const size_t n = v.sampling[r].n_logit_bias;
    if (n > size_t(kMaxLogitBias))
      return error_status(ErrorCode::kBatchRefused, "row {}: {} logit biases", r, n);
    move(v.bias + r * kMaxLogitBias, sizeof(LogitBias) * n);
  }
  return Status();
}

}  // namespace

Status make_batch_frame(ipc::Segment& seg, int r, const ipc::BatchMsg& m, std::vector<uint8_t>* buf,
                        net::Batch* out) {
  KV_RETURN_IF_ERROR(check_cut(seg, r));
  const ipc::SlotDims& d = seg.dims();
  KV_RETURN_IF_ERROR(ipc::check_msg(m, d, 0));
  buf->clear();
  KV_RETURN_IF_ERROR(walk_desc(seg.desc(m.slot), d, m.n_rows, m.n_tokens, [&](void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf->insert(buf->end(), b, b + n);
  }));
  out->msg_kind = m.kind, out->msg_version = m.version, out->status = m.status;
  out->batch_id = m.batch_id, out->slot = m.slot;
  out->n_rows = m.n_rows, out->n_tokens = m.n_tokens;
  out->descriptor = *buf;
  // Only the rows in use: [n_tokens, hidden] of the [max_tokens, hidden] boundary.
  out->boundary_tokens = uint32_t(m.n_tokens), out->hidden = uint32_t(d.hidden);
  out->boundary = bytes_at(seg.boundary(m.slot, r - 1), uint64_t(m.n_tokens) * d.hidden * 4);
  return Status();
}

Status take_batch_frame(ipc::Segment& seg, int r, const net::Batch& f, uint64_t last_id,
                        ipc::BatchMsg* out) {
  KV_RETURN_IF_ERROR(check_cut(seg, r));
  const ipc::SlotDims& d = seg.dims();
  ipc::BatchMsg m;
  m.kind = f.msg_kind, m.version = f.msg_version, m.status = f.status;
  m.batch_id = f.batch_id, m.slot = f.slot, m.n_rows = f.n_rows, m.n_tokens = f.n_tokens;
  Status s = ipc::check_msg(m, d, last_id);
  if (!s.ok()) return bad_frame("batch", s.message());
  if (f.hidden != uint32_t(d.hidden) || f.boundary_tokens != uint32_t(m.n_tokens))
    return bad_frame("batch", fmt::format("boundary [{}, {}], expected [{}, {}]", f.boundary_tokens,
                                          f.hidden, m.n_tokens, d.hidden));
  if (f.boundary.size() != uint64_t(m.n_tokens) * d.hidden * 4)
    return bad_frame("batch", "boundary bytes disagree with its shape");
  // The descriptor, part by part into the slot, each count checked before
  // the part it sizes is read (the counts come from parts already copied).
  size_t at = 0;
  bool short_frame = false;
  s = walk_desc(seg.desc(m.slot), d, m.n_rows, m.n_tokens, [&](void* p, size_t n) {
    if (short_frame || f.descriptor.size() - at < n) {
      short_frame = true;
      std::memset(p, 0, n);  // counts read from here stay in range
      return;
    }
    std::memcpy(p, f.descriptor.data() + at, n);
    at += n;
  });
  if (!s.ok()) return bad_frame("batch", "descriptor: " + s.message());
  if (short_frame || at != f.descriptor.size())
    return bad_frame("batch",
                     fmt::format("a descriptor of {} bytes, its counts say {}", f.descriptor.size(),
                                 short_frame ? "more" : std::to_string(at)));
  std::memcpy(seg.boundary(m.slot, r - 1), f.boundary.data(), f.boundary.size());
  const ipc::ResultView res = seg.result(m.slot);
  std::fill_n(res.hdr->stage_busy_ns, ipc::kMaxStageTimes, uint64_t(0));
  m.sent_ns = ipc::now_ns();
  *out = m;
  return Status();
}

Status make_hidden_frame(ipc::Segment& seg, int r, int e, const ipc::BatchMsg& m,
                         net::Hidden* out) {
  KV_RETURN_IF_ERROR(check_slice(seg, r, e));
  const ipc::SlotDims& d = seg.dims();
  Status s = ipc::check_msg(m, d, 0);
  if (!s.ok()) return bad_frame("hidden", s.message());
  const ipc::ResultHeader& h = *seg.result(m.slot).hdr;
  out->msg_kind = m.kind, out->msg_version = m.version, out->status = m.status;
  out->origin = m.origin, out->batch_id = m.batch_id, out->slot = m.slot;
  out->n_rows = m.n_rows, out->n_tokens = m.n_tokens;
  out->first_stage = uint32_t(r), out->n_times = uint32_t(e - r);
  std::copy(h.stage_busy_ns + r, h.stage_busy_ns + e, out->busy_ns.begin());
  out->error.clear();
  if (m.status != int32_t(ErrorCode::kOk))
    out->error.assign(h.error, strnlen(h.error, sizeof h.error));
  out->boundary_tokens = uint32_t(m.n_tokens), out->hidden = uint32_t(d.hidden);
  out->boundary = bytes_at(seg.boundary(m.slot, e - 1), uint64_t(m.n_tokens) * d.hidden * 4);
  return Status();
}

namespace {

// Whether f is the batch `sent` coming back from the slice r..e-1: every
// field the leader knows, then the boundary's shape.
Status check_hidden(const ipc::SlotDims& d, int r, int e, const net::Hidden& f,
                    const ipc::BatchMsg& sent) {
  if (f.slot != sent.slot || f.batch_id != sent.batch_id)
    return bad_frame("hidden", fmt::format("batch {} in slot {}, but slot {} holds batch {}",
                                           f.batch_id, f.slot, sent.slot, sent.batch_id));
  if (f.msg_kind != sent.kind || f.msg_version != sent.version || f.n_rows != sent.n_rows ||
      f.n_tokens != sent.n_tokens)
    return bad_frame("hidden",
                     fmt::format("batch {}: kind {} version {}, {} rows, {} tokens; "
                                 "sent kind {} version {}, {} rows, {} tokens",
                                 f.batch_id, f.msg_kind, f.msg_version, f.n_rows, f.n_tokens,
                                 sent.kind, sent.version, sent.n_rows, sent.n_tokens));
  if (f.first_stage != uint32_t(r) || f.n_times != uint32_t(e - r))
    return bad_frame("hidden", fmt::format("batch {}: times of {} stages from {}, the slice is "
                                           "{}..{}",
                                           f.batch_id, f.n_times, f.first_stage, r, e - 1));
  if (f.hidden != uint32_t(d.hidden) || f.boundary_tokens != uint32_t(sent.n_tokens) ||
      f.boundary.size() != uint64_t(sent.n_tokens) * d.hidden * 4)
    return bad_frame("hidden", fmt::format("batch {}: boundary [{}, {}] of {} bytes, expected "
                                           "[{}, {}]",
                                           f.batch_id, f.boundary_tokens, f.hidden,
                                           f.boundary.size(), sent.n_tokens, d.hidden));
  // A status once set is never cleared: one the leader's stages set comes back as it went.
  if (sent.status != int32_t(ErrorCode::kOk) && f.status != sent.status)
    return bad_frame("hidden", fmt::format("batch {}: status {}, it went out with {}", f.batch_id,
                                           f.status, sent.status));
  return Status();
}

}  // namespace

Status take_hidden_frame(ipc::Segment& seg, int r, int e, const net::Hidden& f,
                         const ipc::BatchMsg& sent, ipc::BatchMsg* out) {
  KV_RETURN_IF_ERROR(check_slice(seg, r, e));
  KV_RETURN_IF_ERROR(check_hidden(seg.dims(), r, e, f, sent));
  std::memcpy(seg.boundary(sent.slot, e - 1), f.boundary.data(), f.boundary.size());
  ipc::ResultHeader& h = *seg.result(sent.slot).hdr;
  std::copy(f.busy_ns.begin(), f.busy_ns.begin() + (e - r), h.stage_busy_ns + r);
  ipc::BatchMsg m = sent;
  if (sent.status == int32_t(ErrorCode::kOk) && f.status != int32_t(ErrorCode::kOk)) {
    // A worker stage failed it: its text where that stage would have written it.
    m.status = f.status;
    m.origin = f.origin >= r && f.origin < e ? f.origin : r;
    std::snprintf(h.error, sizeof h.error, "%s", f.error.c_str());
  }
  m.sent_ns = ipc::now_ns();
  *out = m;
  return Status();
}

Status make_grammar_frames(ipc::Segment& seg, const ipc::BatchMsg& m,
                           const std::vector<uint64_t>& sent, std::vector<std::string>* specs,
                           std::vector<net::Grammar>* out) {
  KV_RETURN_IF_ERROR(ipc::check_msg(m, seg.dims(), 0));
  const ipc::DescView d = seg.desc(m.slot);
  const ipc::GrammarTable table = seg.grammar_table();
  specs->clear(), out->clear();
  std::vector<std::pair<uint32_t, uint64_t>> fresh;  // (entry, id), in row order
  for (int32_t r = 0; r < m.n_rows; ++r) {
    const SamplingParams& sp = d.sampling[r];
    if (sp.grammar_entry == 0) continue;  // unconstrained; else 1 + the table's index
    if (sp.grammar_entry > sent.size())
      return error_status(ErrorCode::kBatchRefused, "row {}: grammar entry {} of {}", r,
                          sp.grammar_entry - 1, sent.size());
    const std::pair<uint32_t, uint64_t> e{sp.grammar_entry - 1, sp.grammar_id};
    if (sent[e.first] == e.second || std::find(fresh.begin(), fresh.end(), e) != fresh.end())
      continue;
    std::string spec;
    KV_RETURN_IF_ERROR(table.read(int32_t(e.first), e.second, &spec));
    fresh.push_back(e);
    specs->push_back(std::move(spec));
  }
  for (size_t i = 0; i < fresh.size(); ++i) {  // views once *specs no longer grows
    const std::string& b = (*specs)[i];
    out->push_back({fresh[i].first, fresh[i].second, bytes_at(b.data(), b.size())});
  }
  return Status();
}

Status take_grammar_frame(ipc::Segment& seg, const net::Grammar& f) {
  ipc::GrammarTable table = seg.grammar_table();
  if (f.entry >= uint32_t(std::max(table.entries(), 0)))
    return bad_frame("grammar",
                     fmt::format("entry {}, the plan's table has {}", f.entry, table.entries()));
  if (f.id == 0) return bad_frame("grammar", "id 0 marks an empty entry");
  if (f.spec.size() > table.capacity())
    return bad_frame("grammar", fmt::format("a spec of {} bytes, the plan's entries hold {}",
                                            f.spec.size(), table.capacity()));
  table.write(int32_t(f.entry), f.id,
              std::string_view(reinterpret_cast<const char*>(f.spec.data()), f.spec.size()));
  return Status();
}

namespace {

// The parts of result slot m.slot that a batch of m's rows and tokens
// fills, in the order a Result frame carries them: the header, the rows'
// tokens, logprobs and alternatives, and the optional records only where
// the batch's descriptor asks for them (prompt records when a row wants
// prompt logprobs, draft records when a row drafts, forced records when
// the instance drafts under grammars). Both sides hold the same descriptor
// bytes, so both cut the same parts. m's counts must be in range.
using Part = std::pair<uint8_t*, size_t>;
std::vector<Part> result_parts(ipc::Segment& seg, const ipc::BatchMsg& m) {
  const ipc::ResultView v = seg.result(m.slot);
  const ipc::DescView d = seg.desc(m.slot);
  const size_t rows = size_t(m.n_rows), toks = size_t(m.n_tokens);
  bool prompt = false, draft = false;
  for (size_t r = 0; r < rows; ++r) {
    prompt = prompt || d.rows[r].prompt_logprobs != 0;
    draft = draft || d.rows[r].n_draft != 0;
  }
  auto part = [](void* p, size_t n) { return Part{static_cast<uint8_t*>(p), n}; };
  std::vector<Part> parts = {part(v.hdr, sizeof(ipc::ResultHeader)), part(v.token, 4 * rows),
                             part(v.logprob, 4 * rows), part(v.n_top, 4 * rows),
                             part(v.top, sizeof(ipc::TopLogprob) * kMaxLogprobs * rows)};
  if (prompt) parts.push_back(part(v.prompt, sizeof(ipc::PromptRecord) * toks));
  if (draft) parts.push_back(part(v.draft, sizeof(ipc::DraftRecord) * toks));
  if (seg.params().forced_drafts > 0)
    parts.push_back(part(v.forced, sizeof(ipc::ForcedRecord) * rows));
  return parts;
}

}  // namespace

Status make_result_frame(ipc::Segment& seg, const ipc::BatchMsg& m, std::vector<uint8_t>* buf,
                         net::Result* out) {
  Status s = ipc::check_msg(m, seg.dims(), 0);
  if (!s.ok()) return bad_frame("result", s.message());
  buf->clear();
  for (const Part& p : result_parts(seg, m)) buf->insert(buf->end(), p.first, p.first + p.second);
  out->batch_id = m.batch_id, out->slot = m.slot;
  out->bytes = *buf;
  return Status();
}

Status take_result_frame(ipc::Segment& seg, int r, const net::Result& f, const ipc::BatchMsg& sent,
                         ipc::BatchMsg* out) {
  KV_RETURN_IF_ERROR(check_cut(seg, r));
  if (f.slot != sent.slot || f.batch_id != sent.batch_id)
    return bad_frame("result", fmt::format("batch {} in slot {}, but slot {} holds batch {}",
                                           f.batch_id, f.slot, sent.slot, sent.batch_id));
  const std::vector<Part> parts = result_parts(seg, sent);
  size_t want = 0;
  for (const Part& p : parts) want += p.second;
  if (f.bytes.size() != want)
    return bad_frame("result",
                     fmt::format("{} bytes, the batch's result is {}", f.bytes.size(), want));
  ipc::ResultHeader h;
  std::memcpy(&h, f.bytes.data(), sizeof h);
  if (h.batch_id != sent.batch_id)
    return bad_frame("result",
                     fmt::format("slot says batch {}, expected {}", h.batch_id, sent.batch_id));
  const ipc::ResultView res = seg.result(sent.slot);
  uint64_t ours[ipc::kMaxStageTimes];
  std::memcpy(ours, res.hdr->stage_busy_ns, sizeof ours);
  size_t at = 0;
  for (const Part& p : parts) {
    std::memcpy(p.first, f.bytes.data() + at, p.second);
    at += p.second;
  }
  std::memcpy(res.hdr->stage_busy_ns, ours, sizeof(uint64_t) * size_t(r));
  ipc::BatchMsg m = sent;
  // A worker stage that failed the batch said so in the tail's status; the
  // slot does not say which stage, so the first remote one stands for it.
  if (h.status != sent.status) m.status = h.status, m.origin = r;
  m.sent_ns = ipc::now_ns();
  *out = m;
  return Status();
}

}  // namespace kvasir::relay
