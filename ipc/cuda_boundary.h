// ipc/cuda_boundary.h — the CPU side of CUDA IPC boundaries: the record
// table through which GPU stages hand each other their boundary slots, and
// the per-slot credits that say whose turn it is to touch a slot.
//
// Between two GPU stages s → s+1 ("link s") the hidden state never crosses
// the host. Stage s allocates, once at start-up, one device buffer per ring
// slot ([max_tokens, hidden] f32, the same width as a CPU boundary) and one
// interprocess event per slot; it exports both with cudaIpcGetMemHandle /
// cudaIpcGetEventHandle and publishes the handles here. Stage s+1 opens them
// once (never in the exporting process: CUDA refuses that), waits on the
// event in its own stream, copies peer-to-peer into its input buffer, and
// returns the slot's credit.
//
// The table lives in the instance's shared segment (Segment::cuda_table()).
// Everything in it was written by another process, so a reader copies a
// record out, then checks every field against what the plan says it must be
// (position, exporter, device, size, version) before a handle is handed to
// the CUDA runtime. Handles are opaque 64-byte blobs here: this file has no
// CUDA dependency and is tested on the CPU (tests/unit/ipc/test_cuda_boundary).
//
// Credits, per (link, slot), two batch ids in shared memory:
//   produced — the batch whose boundary the exporter last wrote (and whose
//              event it recorded) into the slot;
//   consumed — the batch the importer last finished copying out.
// Asking for a later batch while an older one is still unread is a skipped
// batch (stale), never "wait": its credit could never come back.
// The exporter may overwrite a slot only when consumed == produced (the
// previous batch has been copied out); the importer may read a slot only for
// the batch it was handed (produced == batch, consumed < batch). A breach is
// a protocol fault of a peer: it fails that batch, never overwrites data a
// peer still reads.
//
//   table:  CudaTableHeader | CudaBoundaryRecord[n_links][n_slots]
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvasir::ipc {

constexpr uint32_t kCudaTableMagic = 0x4243564B;  // "KVCB" little-endian
constexpr uint32_t kCudaTableVersion = 1;
// cudaIpcMemHandle_t and cudaIpcEventHandle_t are both 64-byte opaque structs
// (CUDA_IPC_HANDLE_SIZE); the plugin static_asserts this.
constexpr size_t kIpcHandleBytes = 64;

enum CudaRecordState : uint32_t {
  kRecordEmpty = 0,      // not exported (yet)
  kRecordPublished = 1,  // handles valid; written last, with release order
};

enum CudaBoundaryDType : uint32_t {
  kBoundaryF32 = 0,  // the residual stream crosses stages in f32, as on the CPU
};

struct CudaTableHeader {
  uint32_t magic = 0;
  uint32_t version = 0;
  int32_t n_links = 0;  // n_stages - 1
  int32_t n_slots = 0;  // the plan's inflight
  uint32_t record_size = 0;
  uint32_t reserved = 0;
};

struct alignas(64) CudaBoundaryRecord {
  std::atomic<uint32_t> state{kRecordEmpty};
  uint32_t version = 0;
  int32_t link = -1, slot = -1;  // where the record claims to sit
  int32_t exporter_stage = -1;   // must be `link`
  int32_t device = -1;           // the exporter's CUDA ordinal (cuda:N)
  int32_t exporter_pid = 0;
  uint32_t dtype = kBoundaryF32;
  uint64_t bytes = 0;  // size of the exported allocation
  uint8_t mem_handle[kIpcHandleBytes] = {};
  uint8_t event_handle[kIpcHandleBytes] = {};
  std::atomic<uint64_t> produced{0};  // credits: see the top of this file
  std::atomic<uint64_t> consumed{0};
};

// What an exporter publishes, and what an importer gets back after checks.
struct CudaExport {
  int32_t exporter_stage = -1;
  int32_t device = -1;
  int32_t pid = 0;
  uint32_t dtype = kBoundaryF32;
  uint64_t bytes = 0;
  uint8_t mem_handle[kIpcHandleBytes] = {};
  uint8_t event_handle[kIpcHandleBytes] = {};
};

// What the importer requires of a record (from the plan, not from the record).
struct CudaExpect {
  int32_t link = 0;
  int32_t slot = 0;
  int32_t device_count = 1 << 16;  // ordinals must be < this (the importer's visible devices)
  uint64_t min_bytes = 0;          // max_tokens * hidden * 4
};

enum class Credit : int32_t {
  kOk = 0,
  kBusy = 1,      // exporter: the previous batch has not been copied out yet
  kNotReady = 2,  // importer: the slot does not (yet) hold this batch
  kStale = 3,     // a batch id that does not move forward: a peer's protocol fault
  kBadIndex = 4,  // link or slot outside the table
};
const char* credit_name(Credit c);

// Bytes the table needs for a plan; 0 links (impossible: >= 2 stages) still
// yields a header. Overflow-safe for the plan's bounds (16 stages, 64 slots).
uint64_t cuda_table_bytes(int32_t n_links, int32_t n_slots);

// A view of the table inside mapped memory. Creation writes a fresh header
// and empty records; opening checks the header against the plan (the caller's
// n_links/n_slots, never the header's) and the space available.
class CudaBoundaryTable {
 public:
  CudaBoundaryTable() = default;
  static CudaBoundaryTable create(void* base, uint64_t avail, int32_t n_links, int32_t n_slots);
  // Empty string and `out` set if the table fits the plan; else why.
  static std::string open(void* base, uint64_t avail, int32_t n_links, int32_t n_slots,
                          CudaBoundaryTable& out);

  int32_t n_links() const { return n_links_; }
  int32_t n_slots() const { return n_slots_; }

  // Exporter, at start-up: fills the record and marks it published. Empty if
  // done; else why (bad index, already published, handle sizes).
  std::string publish(int32_t link, int32_t slot, const CudaExport& e);
  bool published(int32_t link, int32_t slot) const;

  // Importer, at start-up: copies the record out (so a peer cannot change it
  // under the reader) and checks it against `want`. Empty if usable; else why.
  // "not published" is reported as such, so a caller can wait and retry.
  std::string read(const CudaExpect& want, CudaExport& out) const;

  // Credits (see the top of this file). batch ids are the ring's: > 0 and
  // strictly increasing per instance.
  Credit acquire_write(int32_t link, int32_t slot, uint64_t batch) const;   // exporter, before
  Credit mark_written(int32_t link, int32_t slot, uint64_t batch);          // exporter, after
  Credit check_readable(int32_t link, int32_t slot, uint64_t batch) const;  // importer, before
  Credit release(int32_t link, int32_t slot, uint64_t batch);  // importer, after the copy completed
  // Exporter, when acquire_write says busy for `batch`: the slot's previous
  // batch was failed downstream before the importer copied it (a refused
  // descriptor never reaches the importer's forward), so its credit never
  // came back. The ring only hands a slot out again after its previous batch
  // reached the bridge, and an importer synchronises before it passes a batch
  // on, so nobody can still read it: the credit is taken back. kOk if taken
  // back; kStale if `batch` does not move forward; kBadIndex.
  Credit reclaim(int32_t link, int32_t slot, uint64_t batch);

 private:
  CudaBoundaryRecord* rec(int32_t link, int32_t slot) const;
  CudaTableHeader* hdr_ = nullptr;
  CudaBoundaryRecord* recs_ = nullptr;
  int32_t n_links_ = 0, n_slots_ = 0;
};

}  // namespace kvasir::ipc
