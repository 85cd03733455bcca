#include "ipc/cuda_boundary.h"

#include <fmt/format.h>

#include <cstring>
#include <new>

namespace kvasir::ipc {
namespace {

constexpr int32_t kMaxLinks = 64;    // far above the segment's 16 stages
constexpr int32_t kMaxSlots = 1024;  // far above the segment's 64 in flight

uint64_t records_offset() {
  return (sizeof(CudaTableHeader) + alignof(CudaBoundaryRecord) - 1) / alignof(CudaBoundaryRecord) *
         alignof(CudaBoundaryRecord);
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

}  // namespace

const char* credit_name(Credit c) {
  switch (c) {
    case Credit::kOk:
      return "ok";
    case Credit::kBusy:
      return "busy (the previous batch was not copied out yet)";
    case Credit::kNotReady:
      return "not ready (the slot does not hold this batch yet)";
    case Credit::kStale:
      return "stale (a batch id that does not move forward)";
    case Credit::kBadIndex:
      return "bad index";
  }
  return "unknown";
}

uint64_t cuda_table_bytes(int32_t n_links, int32_t n_slots) {
  if (n_links < 0 || n_slots < 0 || n_links > kMaxLinks || n_slots > kMaxSlots)
    return 0;  // refused by create/open anyway
  return records_offset() + uint64_t(n_links) * uint64_t(n_slots) * sizeof(CudaBoundaryRecord);
}

CudaBoundaryTable CudaBoundaryTable::create(void* base, uint64_t avail, int32_t n_links,
                                            int32_t n_slots) {
  CudaBoundaryTable t;
  const uint64_t need = cuda_table_bytes(n_links, n_slots);
  if (!base || need == 0 || avail < need ||
      reinterpret_cast<uintptr_t>(base) % alignof(CudaBoundaryRecord) != 0)
    return t;  // hdr_ stays null: every call then reports a bad index
  auto* h = new (base) CudaTableHeader();
  auto* r = reinterpret_cast<CudaBoundaryRecord*>(static_cast<char*>(base) + records_offset());
  for (int64_t i = 0; i < int64_t(n_links) * n_slots; ++i) new (r + i) CudaBoundaryRecord();
  h->n_links = n_links;
  h->n_slots = n_slots;
  h->record_size = sizeof(CudaBoundaryRecord);
  h->version = kCudaTableVersion;
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kCudaTableMagic;
  t.hdr_ = h;
  t.recs_ = r;
  t.n_links_ = n_links;
  t.n_slots_ = n_slots;
  return t;
}

std::string CudaBoundaryTable::open(void* base, uint64_t avail, int32_t n_links, int32_t n_slots,
                                    CudaBoundaryTable& out) {
  out = CudaBoundaryTable();
  const uint64_t need = cuda_table_bytes(n_links, n_slots);
  if (need == 0)
    return fmt::format("a plan of {} links × {} slots is out of range", n_links, n_slots);
  if (!base || avail < need)
    return fmt::format("the table needs {} bytes, {} are mapped", need, avail);
  if (reinterpret_cast<uintptr_t>(base) % alignof(CudaBoundaryRecord) != 0)
    return "the table is misaligned";
  CudaTableHeader h;
  std::memcpy(&h, base, sizeof h);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h.magic != kCudaTableMagic || h.version != kCudaTableVersion)
    return fmt::format("not a boundary table of version {} (magic {:#x}, version {})",
                       kCudaTableVersion, h.magic, h.version);
  if (h.record_size != sizeof(CudaBoundaryRecord))
    return fmt::format("record size {} (this build: {})", h.record_size,
                       sizeof(CudaBoundaryRecord));
  if (h.n_links != n_links || h.n_slots != n_slots)
    return fmt::format("the table is {} links × {} slots, the plan {} × {}", h.n_links, h.n_slots,
                       n_links, n_slots);
  out.hdr_ = static_cast<CudaTableHeader*>(base);
  out.recs_ = reinterpret_cast<CudaBoundaryRecord*>(static_cast<char*>(base) + records_offset());
  out.n_links_ = n_links;
  out.n_slots_ = n_slots;
  return {};
}

CudaBoundaryRecord* CudaBoundaryTable::rec(int32_t link, int32_t slot) const {
  if (!recs_ || link < 0 || link >= n_links_ || slot < 0 || slot >= n_slots_) return nullptr;
  return recs_ + int64_t(link) * n_slots_ + slot;
}

std::string CudaBoundaryTable::publish(int32_t link, int32_t slot, const CudaExport& e) {
  CudaBoundaryRecord* r = rec(link, slot);
  if (!r) return fmt::format("record {}/{} is outside the table", link, slot);
  if (r->state.load(std::memory_order_acquire) != kRecordEmpty)
    return fmt::format("record {}/{} is already published", link, slot);
  if (e.exporter_stage != link)
    return fmt::format("stage {} cannot export link {} (only stage {} can)", e.exporter_stage, link,
                       link);
  if (e.device < 0 || e.bytes == 0 || all_zero(e.mem_handle, kIpcHandleBytes) ||
      all_zero(e.event_handle, kIpcHandleBytes))
    return fmt::format("record {}/{}: incomplete export (device {}, {} bytes)", link, slot,
                       e.device, e.bytes);
  r->version = kCudaTableVersion;
  r->link = link;
  r->slot = slot;
  r->exporter_stage = e.exporter_stage;
  r->device = e.device;
  r->exporter_pid = e.pid;
  r->dtype = e.dtype;
  r->bytes = e.bytes;
  std::memcpy(r->mem_handle, e.mem_handle, kIpcHandleBytes);
  std::memcpy(r->event_handle, e.event_handle, kIpcHandleBytes);
  r->produced.store(0, std::memory_order_relaxed);
  r->consumed.store(0, std::memory_order_relaxed);
  r->state.store(kRecordPublished, std::memory_order_release);
  return {};
}

bool CudaBoundaryTable::published(int32_t link, int32_t slot) const {
  CudaBoundaryRecord* r = rec(link, slot);
  return r && r->state.load(std::memory_order_acquire) == kRecordPublished;
}

std::string CudaBoundaryTable::read(const CudaExpect& want, CudaExport& out) const {
  out = CudaExport();
  CudaBoundaryRecord* r = rec(want.link, want.slot);
  if (!r) return fmt::format("record {}/{} is outside the table", want.link, want.slot);
  uint32_t state = r->state.load(std::memory_order_acquire);
  if (state == kRecordEmpty) return "not published";
  if (state != kRecordPublished)
    return fmt::format("record {}/{}: unknown state {}", want.link, want.slot, state);
  // Copy every field once; check the copy only.
  const uint32_t version = r->version;
  const int32_t link = r->link, slot = r->slot;
  out.exporter_stage = r->exporter_stage;
  out.device = r->device;
  out.pid = r->exporter_pid;
  out.dtype = r->dtype;
  out.bytes = r->bytes;
  std::memcpy(out.mem_handle, r->mem_handle, kIpcHandleBytes);
  std::memcpy(out.event_handle, r->event_handle, kIpcHandleBytes);
  auto bad = [&](std::string why) {
    out = CudaExport();
    return fmt::format("record {}/{}: {}", want.link, want.slot, why);
  };
  if (version != kCudaTableVersion)
    return bad(fmt::format("version {} (this build: {})", version, kCudaTableVersion));
  if (link != want.link || slot != want.slot)
    return bad(fmt::format("claims to be record {}/{}", link, slot));
  if (out.exporter_stage != want.link)
    return bad(
        fmt::format("exported by stage {}, expected stage {}", out.exporter_stage, want.link));
  if (out.device < 0 || out.device >= want.device_count)
    return bad(
        fmt::format("device {} is not one of the {} visible", out.device, want.device_count));
  if (out.dtype != kBoundaryF32) return bad(fmt::format("unknown element type {}", out.dtype));
  if (out.bytes < want.min_bytes)
    return bad(fmt::format("{} bytes, a boundary needs {}", out.bytes, want.min_bytes));
  if (out.pid <= 0) return bad(fmt::format("exporter pid {}", out.pid));
  if (all_zero(out.mem_handle, kIpcHandleBytes) || all_zero(out.event_handle, kIpcHandleBytes))
    return bad("empty handle");
  return {};
}

Credit CudaBoundaryTable::acquire_write(int32_t link, int32_t slot, uint64_t batch) const {
  CudaBoundaryRecord* r = rec(link, slot);
  if (!r) return Credit::kBadIndex;
  const uint64_t p = r->produced.load(std::memory_order_acquire);
  const uint64_t c = r->consumed.load(std::memory_order_acquire);
  if (batch == 0 || batch <= p) return Credit::kStale;
  return c == p ? Credit::kOk : Credit::kBusy;
}

Credit CudaBoundaryTable::mark_written(int32_t link, int32_t slot, uint64_t batch) {
  Credit c = acquire_write(link, slot, batch);
  if (c != Credit::kOk) return c;
  rec(link, slot)->produced.store(batch, std::memory_order_release);
  return Credit::kOk;
}

Credit CudaBoundaryTable::reclaim(int32_t link, int32_t slot, uint64_t batch) {
  CudaBoundaryRecord* r = rec(link, slot);
  if (!r) return Credit::kBadIndex;
  const uint64_t p = r->produced.load(std::memory_order_acquire);
  if (batch == 0 || batch <= p) return Credit::kStale;
  r->consumed.store(p, std::memory_order_release);
  return Credit::kOk;
}

Credit CudaBoundaryTable::check_readable(int32_t link, int32_t slot, uint64_t batch) const {
  CudaBoundaryRecord* r = rec(link, slot);
  if (!r) return Credit::kBadIndex;
  const uint64_t p = r->produced.load(std::memory_order_acquire);
  const uint64_t c = r->consumed.load(std::memory_order_acquire);
  if (batch == 0 || c >= batch || p > batch) return Credit::kStale;
  if (p == batch) return Credit::kOk;
  // The slot still holds an older batch nobody copied out: the importer
  // skipped one, and the exporter can never write this one (no credit).
  return c == p ? Credit::kNotReady : Credit::kStale;
}

Credit CudaBoundaryTable::release(int32_t link, int32_t slot, uint64_t batch) {
  Credit c = check_readable(link, slot, batch);
  if (c != Credit::kOk) return c == Credit::kNotReady ? Credit::kStale : c;
  rec(link, slot)->consumed.store(batch, std::memory_order_release);
  return Credit::kOk;
}

}  // namespace kvasir::ipc
