// relay/relay.cpp — the two ends of a ring link that crosses hosts
// (relay/relay.h; docs/multi-host.md, "The relay").
#include "relay/relay.h"

#include <algorithm>
#include <cstring>
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

net::ByteView bytes_at(const void* p, uint64_t n) {
  return net::ByteView(static_cast<const uint8_t*>(p), size_t(n));
}

}  // namespace

Status make_batch_frame(ipc::Segment& seg, int r, const ipc::BatchMsg& m, net::Batch* out) {
  KV_RETURN_IF_ERROR(check_cut(seg, r));
  const ipc::SlotDims& d = seg.dims();
  KV_RETURN_IF_ERROR(ipc::check_msg(m, d, 0));
  out->msg_kind = m.kind, out->msg_version = m.version, out->status = m.status;
  out->batch_id = m.batch_id, out->slot = m.slot;
  out->n_rows = m.n_rows, out->n_tokens = m.n_tokens;
  out->descriptor = bytes_at(seg.desc(m.slot).hdr, ipc::desc_bytes(d));
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
  if (f.descriptor.size() != ipc::desc_bytes(d))
    return bad_frame("batch", fmt::format("descriptor of {} bytes, the plan's is {}",
                                          f.descriptor.size(), ipc::desc_bytes(d)));
  if (f.hidden != uint32_t(d.hidden) || f.boundary_tokens != uint32_t(m.n_tokens))
    return bad_frame("batch", fmt::format("boundary [{}, {}], expected [{}, {}]", f.boundary_tokens,
                                          f.hidden, m.n_tokens, d.hidden));
  if (f.boundary.size() != uint64_t(m.n_tokens) * d.hidden * 4)
    return bad_frame("batch", "boundary bytes disagree with its shape");
  std::memcpy(seg.desc(m.slot).hdr, f.descriptor.data(), f.descriptor.size());
  std::memcpy(seg.boundary(m.slot, r - 1), f.boundary.data(), f.boundary.size());
  const ipc::ResultView res = seg.result(m.slot);
  std::fill_n(res.hdr->stage_busy_ns, ipc::kMaxStageTimes, uint64_t(0));
  m.sent_ns = ipc::now_ns();
  *out = m;
  return Status();
}

Status make_result_frame(ipc::Segment& seg, const ipc::BatchMsg& m, net::Result* out) {
  if (m.slot >= uint32_t(seg.dims().inflight))
    return bad_frame("result", fmt::format("slot {} out of range", m.slot));
  out->batch_id = m.batch_id, out->slot = m.slot;
  out->bytes = bytes_at(seg.result(m.slot).hdr, ipc::result_bytes(seg.dims()));
  return Status();
}

Status take_result_frame(ipc::Segment& seg, int r, const net::Result& f, const ipc::BatchMsg& sent,
                         ipc::BatchMsg* out) {
  KV_RETURN_IF_ERROR(check_cut(seg, r));
  if (f.slot != sent.slot || f.batch_id != sent.batch_id)
    return bad_frame("result", fmt::format("batch {} in slot {}, but slot {} holds batch {}",
                                           f.batch_id, f.slot, sent.slot, sent.batch_id));
  if (f.bytes.size() != ipc::result_bytes(seg.dims()))
    return bad_frame("result", fmt::format("{} bytes, the plan's slot is {}", f.bytes.size(),
                                           ipc::result_bytes(seg.dims())));
  ipc::ResultHeader h;
  std::memcpy(&h, f.bytes.data(), sizeof h);
  if (h.batch_id != sent.batch_id)
    return bad_frame("result",
                     fmt::format("slot says batch {}, expected {}", h.batch_id, sent.batch_id));
  const ipc::ResultView res = seg.result(sent.slot);
  uint64_t ours[ipc::kMaxStageTimes];
  std::memcpy(ours, res.hdr->stage_busy_ns, sizeof ours);
  std::memcpy(res.hdr, f.bytes.data(), f.bytes.size());
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
