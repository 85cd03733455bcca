// relay/plan.cpp — the join's messages as bytes (relay/plan.h).
#include "relay/plan.h"

#include <bit>
#include <cstring>
#include <string>
#include <type_traits>

#include "base/check.h"
#include "ipc/link_kind.h"

namespace kvasir::relay {
namespace {

// A field added to SegmentParams (or StagePlan, MemberPlan, SlotDims) must
// be added to visit() below: this fails to compile until someone looks.
static_assert(sizeof(ipc::SegmentParams) == 9704,
              "SegmentParams changed: update relay/plan.cpp's visit() and its size");

struct Writer {
  std::vector<uint8_t> out;
  template <class T>
  void operator()(T& v) {
    static_assert(std::is_arithmetic_v<T>);
    uint64_t bits = 0;
    if constexpr (std::is_floating_point_v<T>)
      bits = std::bit_cast<uint64_t>(double(v));
    else
      bits = uint64_t(v);
    const size_t n = std::is_floating_point_v<T> ? 8 : sizeof(T);
    for (size_t i = 0; i < n; ++i) out.push_back(uint8_t(bits >> (8 * i)));
  }
  template <size_t N>
  void text(char (&s)[N]) {
    for (size_t i = 0; i < N; ++i) out.push_back(uint8_t(s[i]));
  }
};

struct Reader {
  std::span<const uint8_t> in;
  size_t at = 0;
  std::string error;  // the first problem
  bool take(size_t n) {
    if (!error.empty()) return false;
    if (in.size() - at < n) error = fmt::format("ends at byte {} of a field", in.size());
    return error.empty();
  }
  template <class T>
  void operator()(T& v) {
    static_assert(std::is_arithmetic_v<T>);
    const size_t n = std::is_floating_point_v<T> ? 8 : sizeof(T);
    if (!take(n)) return;
    uint64_t bits = 0;
    for (size_t i = 0; i < n; ++i) bits |= uint64_t(in[at + i]) << (8 * i);
    at += n;
    if constexpr (std::is_floating_point_v<T>)
      v = T(std::bit_cast<double>(bits));
    else
      v = T(bits);
  }
  template <size_t N>
  void text(char (&s)[N]) {
    if (!take(N)) return;
    std::memcpy(s, in.data() + at, N);
    at += N;
    if (std::memchr(s, 0, N) == nullptr && error.empty()) error = "a text field without its end";
  }
};

template <class IO>
void visit(IO& io, ipc::StagePlan& s) {
  io(s.first), io(s.last), io(s.threads);
  io.text(s.device);
  io(s.experts_first), io(s.experts_last);
  io.text(s.cpus);
  io(s.host);
}

template <class IO>
void visit(IO& io, ipc::SegmentParams& p) {
  io(p.n_stages);
  io(p.dims.max_rows), io(p.dims.max_tokens), io(p.dims.max_table), io(p.dims.hidden);
  io(p.dims.inflight), io(p.dims.tables);
  io(p.block_size), io(p.kv_f32), io(p.kv_memory), io(p.kv_gpu_util);
  io(p.cuda_graphs), io(p.cuda_quantize);
  for (ipc::StagePlan& s : p.stages) visit(io, s);
  io(p.n_members), io(p.moe_top_k);
  for (ipc::MemberPlan& m : p.members) {
    io(m.position), io(m.index);
    visit(io, m.plan);
  }
  io.text(p.model_path);
  io(p.grammar_entries), io(p.grammar_capacity), io(p.grammar_workers), io(p.grammar_cache);
  io(p.grammar_compile_timeout_ms), io(p.forced_drafts), io(p.spin_ns);
}

std::vector<uint8_t> start(PlanKind k) {
  Writer w;
  uint8_t kind = uint8_t(k);
  uint16_t format = kPlanFormat;
  w(kind), w(format);
  return std::move(w.out);
}

// Reads the kind and format; *r is then at the fields.
Status open(std::span<const uint8_t> bytes, PlanKind want, Reader* r) {
  r->in = bytes;
  uint8_t kind = 0;
  uint16_t format = 0;
  (*r)(kind), (*r)(format);
  if (!r->error.empty()) return error_status(ErrorCode::kInvalidArgument, "plan: {}", r->error);
  if (kind != uint8_t(want))
    return error_status(ErrorCode::kInvalidArgument, "plan: a message of kind {}, expected {}",
                        kind, uint8_t(want));
  if (format != kPlanFormat)
    return error_status(ErrorCode::kInvalidArgument,
                        "plan: the peer writes format {}, this build reads {}", format,
                        kPlanFormat);
  return Status();
}

Status close(const Reader& r) {
  if (!r.error.empty()) return error_status(ErrorCode::kInvalidArgument, "plan: {}", r.error);
  if (r.at != r.in.size())
    return error_status(ErrorCode::kInvalidArgument, "plan: {} bytes left over",
                        r.in.size() - r.at);
  return Status();
}

}  // namespace

std::vector<uint8_t> encode_plan(const WorkerPlan& p) {
  Writer w{start(PlanKind::kPlan)};
  WorkerPlan copy = p;
  visit(w, copy.params);
  w(copy.first_remote), w(copy.end);
  w(copy.watchdog.k), w(copy.watchdog.floor_s), w(copy.watchdog.busy_cap_s);
  return std::move(w.out);
}

std::vector<uint8_t> encode_sized(const WorkerSized& s) {
  Writer w{start(PlanKind::kSized)};
  int64_t c = s.capacity_blocks;
  w(c);
  return std::move(w.out);
}

std::vector<uint8_t> encode_blocks(const RingBlocks& b) {
  Writer w{start(PlanKind::kBlocks)};
  int32_t full = b.kv_blocks, swa = b.kv_blocks_swa;
  w(full), w(swa);
  return std::move(w.out);
}

Status decode_plan(std::span<const uint8_t> bytes, WorkerPlan* out) {
  Reader r;
  KV_RETURN_IF_ERROR(open(bytes, PlanKind::kPlan, &r));
  WorkerPlan p;
  visit(r, p.params);
  r(p.first_remote), r(p.end);
  r(p.watchdog.k), r(p.watchdog.floor_s), r(p.watchdog.busy_cap_s);
  KV_RETURN_IF_ERROR(close(r));
  const std::string bad = ipc::Segment::check_params(p.params);
  if (!bad.empty()) return error_status(ErrorCode::kInvalidArgument, "plan: {}", bad);
  if (p.first_remote < 1 || p.first_remote >= p.params.n_stages)
    return error_status(ErrorCode::kInvalidArgument, "plan: first remote stage {} of {}",
                        p.first_remote, p.params.n_stages);
  if (p.end <= p.first_remote || p.end > p.params.n_stages)
    return error_status(ErrorCode::kInvalidArgument,
                        "plan: a slice {}..{} ends outside stages {}..{}", p.first_remote,
                        p.end - 1, p.first_remote, p.params.n_stages - 1);
  // Both hosts decide each link's kind from the plan (ipc/link_kind.h): the
  // cut must be a link across hosts there, or a GPU stage beside it would
  // look for a CUDA IPC slot that no process on its host exports.
  if (ipc::link_kind(p.params, p.first_remote - 1) != ipc::LinkKind::kAcrossHosts)
    return error_status(ErrorCode::kInvalidArgument,
                        "plan: stages {} and {} are both on host {}, but the cut to this worker "
                        "is between them",
                        p.first_remote - 1, p.first_remote, p.params.stages[p.first_remote].host);
  if (p.end < p.params.n_stages &&
      ipc::link_kind(p.params, p.end - 1) != ipc::LinkKind::kAcrossHosts)
    return error_status(ErrorCode::kInvalidArgument,
                        "plan: stages {} and {} are both on host {}, but the worker's slice ends "
                        "between them",
                        p.end - 1, p.end, p.params.stages[p.end].host);
  // The ranges the leader's config takes ([recovery], daemon/config).
  const ipc::HangLimits& l = p.watchdog;
  if (!(l.k >= 1 && l.k <= 1e6) || !(l.floor_s >= 0 && l.floor_s <= 86400) ||
      !(l.busy_cap_s >= 0 && l.busy_cap_s <= 86400))
    return error_status(ErrorCode::kInvalidArgument,
                        "plan: watchdog k {}, floor {} s, busy cap {} s", l.k, l.floor_s,
                        l.busy_cap_s);
  *out = p;
  return Status();
}

Status decode_sized(std::span<const uint8_t> bytes, WorkerSized* out) {
  Reader r;
  KV_RETURN_IF_ERROR(open(bytes, PlanKind::kSized, &r));
  WorkerSized s;
  r(s.capacity_blocks);
  KV_RETURN_IF_ERROR(close(r));
  if (s.capacity_blocks < 1 || s.capacity_blocks > INT32_MAX)
    return error_status(ErrorCode::kInvalidArgument, "plan: a capacity of {} blocks",
                        s.capacity_blocks);
  *out = s;
  return Status();
}

Status decode_blocks(std::span<const uint8_t> bytes, RingBlocks* out) {
  Reader r;
  KV_RETURN_IF_ERROR(open(bytes, PlanKind::kBlocks, &r));
  RingBlocks b;
  r(b.kv_blocks), r(b.kv_blocks_swa);
  KV_RETURN_IF_ERROR(close(r));
  if (b.kv_blocks < 1 || b.kv_blocks_swa < 0)
    return error_status(ErrorCode::kInvalidArgument, "plan: {} blocks ({} sliding)", b.kv_blocks,
                        b.kv_blocks_swa);
  *out = b;
  return Status();
}

}  // namespace kvasir::relay
