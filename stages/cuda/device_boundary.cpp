#include "stages/cuda/device_boundary.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "base/log.h"

namespace kvasir::cuda {

static_assert(sizeof(cudaIpcMemHandle_t) == ipc::kIpcHandleBytes, "IPC handle size");
static_assert(sizeof(cudaIpcEventHandle_t) == ipc::kIpcHandleBytes, "IPC event handle size");

namespace {
std::string cuda_why(const char* what, cudaError_t e) {
  return fmt::format("{}: {} ({})", what, cudaGetErrorString(e), int(e));
}
// The exporter's buffer lives on its device: another device reads it peer
// to peer (cudaIpcOpenMemHandle enables the access), which the pair must
// support, else the copy in would fail at the first batch.
std::string check_peer(int32_t exporter_device) {
  int self = -1;
  cudaError_t e = cudaGetDevice(&self);
  if (e != cudaSuccess) return cuda_why("cudaGetDevice", e);
  if (exporter_device == self) return {};
  int can = 0;
  e = cudaDeviceCanAccessPeer(&can, self, exporter_device);
  if (e != cudaSuccess) return cuda_why("cudaDeviceCanAccessPeer", e);
  if (!can)
    return fmt::format(
        "cuda:{} cannot read cuda:{}'s memory peer to peer (cudaDeviceCanAccessPeer = 0): the "
        "CUDA IPC boundary between two GPU stages needs peer access between their devices",
        self, exporter_device);
  return {};
}

}  // namespace

DeviceBoundaries::~DeviceBoundaries() {
  for (void* p : in_ptr_)
    if (p) cudaIpcCloseMemHandle(p);
  for (cudaEvent_t e : in_ev_)
    if (e) cudaEventDestroy(e);
  for (void* p : out_ptr_)
    if (p) cudaFree(p);
  for (cudaEvent_t e : out_ev_)
    if (e) cudaEventDestroy(e);
}

std::string DeviceBoundaries::export_link(ipc::CudaBoundaryTable* table, int32_t link,
                                          const BoundarySpec& s) {
  if (!table || s.n_slots < 1 || s.n_slots != table->n_slots() || s.bytes == 0)
    return "bad export spec";
  table_ = table;
  out_bytes_ = s.bytes;
  out_ptr_.assign(size_t(s.n_slots), nullptr);
  out_ev_.assign(size_t(s.n_slots), nullptr);
  for (int32_t slot = 0; slot < s.n_slots; ++slot) {
    cudaError_t e = cudaMalloc(&out_ptr_[size_t(slot)], s.bytes);
    if (e != cudaSuccess) return cuda_why("boundary slot cudaMalloc", e);
    e = cudaMemset(out_ptr_[size_t(slot)], 0, s.bytes);
    if (e != cudaSuccess) return cuda_why("boundary slot cudaMemset", e);
    // The memset runs on the legacy stream, which the stage's non-blocking
    // stream does not wait for: finish it before any copy into the slot.
    e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return cuda_why("boundary slot cudaDeviceSynchronize", e);
    // Interprocess events must not time (CUDA's rule for cudaEventInterprocess).
    e = cudaEventCreateWithFlags(&out_ev_[size_t(slot)],
                                 cudaEventDisableTiming | cudaEventInterprocess);
    if (e != cudaSuccess) return cuda_why("cudaEventCreateWithFlags(interprocess)", e);
    ipc::CudaExport ex;
    ex.exporter_stage = link;
    ex.device = s.device;
    ex.pid = int32_t(getpid());
    ex.bytes = s.bytes;
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    e = cudaIpcGetMemHandle(&mh, out_ptr_[size_t(slot)]);
    if (e != cudaSuccess) return cuda_why("cudaIpcGetMemHandle", e);
    e = cudaIpcGetEventHandle(&eh, out_ev_[size_t(slot)]);
    if (e != cudaSuccess) return cuda_why("cudaIpcGetEventHandle", e);
    std::memcpy(ex.mem_handle, &mh, sizeof mh);
    std::memcpy(ex.event_handle, &eh, sizeof eh);
    std::string why = table->publish(link, slot, ex);
    if (!why.empty()) return why;
  }
  out_link_ = link;
  return {};
}

std::string DeviceBoundaries::import_link(ipc::CudaBoundaryTable* table, int32_t link,
                                          const BoundarySpec& s, const volatile uint32_t* stop) {
  if (!table || s.n_slots < 1 || s.n_slots != table->n_slots() || s.bytes == 0)
    return "bad import spec";
  int n_dev = 0;
  cudaError_t e = cudaGetDeviceCount(&n_dev);
  if (e != cudaSuccess) return cuda_why("cudaGetDeviceCount", e);
  table_ = table;
  in_bytes_ = s.bytes;
  in_ptr_.assign(size_t(s.n_slots), nullptr);
  in_ev_.assign(size_t(s.n_slots), nullptr);
  for (int32_t slot = 0; slot < s.n_slots; ++slot) {
    ipc::CudaExpect want;
    want.link = link;
    want.slot = slot;
    want.device_count = n_dev;
    want.min_bytes = s.bytes;
    ipc::CudaExport ex;
    std::string why;
    // The exporter publishes while it starts; it may still be loading weights.
    while ((why = table->read(want, ex)) == "not published") {
      if (stop && *stop) return "shutdown while waiting for the previous stage's boundaries";
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!why.empty()) return why;
    if (ex.pid == int32_t(getpid())) return "a boundary exported by this very process";
    why = check_peer(ex.device);
    if (!why.empty()) return why;
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    std::memcpy(&mh, ex.mem_handle, sizeof mh);
    std::memcpy(&eh, ex.event_handle, sizeof eh);
    e = cudaIpcOpenMemHandle(&in_ptr_[size_t(slot)], mh, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) return cuda_why("cudaIpcOpenMemHandle", e);
    e = cudaIpcOpenEventHandle(&in_ev_[size_t(slot)], eh);
    if (e != cudaSuccess) return cuda_why("cudaIpcOpenEventHandle", e);
  }
  in_link_ = link;
  return {};
}

std::string DeviceBoundaries::send(cudaStream_t stream, uint32_t slot, uint64_t batch,
                                   const float* src, uint64_t n_bytes) {
  if (out_link_ < 0 || slot >= out_ptr_.size() || n_bytes > out_bytes_)
    return fmt::format("boundary send: slot {} / {} bytes out of range", slot, n_bytes);
  ipc::Credit c = table_->acquire_write(out_link_, int32_t(slot), batch);
  if (c == ipc::Credit::kBusy) {  // failed downstream before it was copied: see reclaim()
    KV_LOG_WARN("boundary",
                "link {} slot {}: the previous batch was never copied out (failed downstream); "
                "reusing the slot for batch {}",
                out_link_, slot, batch);
    c = table_->reclaim(out_link_, int32_t(slot), batch);
  }
  if (c != ipc::Credit::kOk)
    return fmt::format("boundary slot {} for batch {}: {}", slot, batch, ipc::credit_name(c));
  cudaError_t e = cudaMemcpyAsync(out_ptr_[slot], src, n_bytes, cudaMemcpyDeviceToDevice, stream);
  if (e != cudaSuccess) return cuda_why("boundary copy out", e);
  // Recorded before the credit and the ring message: the importer's wait
  // then always refers to this record.
  e = cudaEventRecord(out_ev_[slot], stream);
  if (e != cudaSuccess) return cuda_why("cudaEventRecord(boundary)", e);
  c = table_->mark_written(out_link_, int32_t(slot), batch);
  if (c != ipc::Credit::kOk)
    return fmt::format("boundary slot {} for batch {}: {}", slot, batch, ipc::credit_name(c));
  return {};
}

std::string DeviceBoundaries::receive(cudaStream_t stream, uint32_t slot, uint64_t batch,
                                      float* dst, uint64_t n_bytes) {
  if (in_link_ < 0 || slot >= in_ptr_.size() || n_bytes > in_bytes_)
    return fmt::format("boundary receive: slot {} / {} bytes out of range", slot, n_bytes);
  ipc::Credit c = table_->check_readable(in_link_, int32_t(slot), batch);
  if (c != ipc::Credit::kOk)
    return fmt::format("boundary slot {} for batch {}: {}", slot, batch, ipc::credit_name(c));
  cudaError_t e = cudaStreamWaitEvent(stream, in_ev_[slot], 0);
  if (e != cudaSuccess) return cuda_why("cudaStreamWaitEvent(boundary)", e);
  e = cudaMemcpyAsync(dst, in_ptr_[slot], n_bytes, cudaMemcpyDeviceToDevice, stream);
  if (e != cudaSuccess) return cuda_why("boundary copy in (peer-to-peer)", e);
  return {};
}

std::string DeviceBoundaries::release(uint32_t slot, uint64_t batch) {
  if (in_link_ < 0) return {};
  ipc::Credit c = table_->release(in_link_, int32_t(slot), batch);
  if (c != ipc::Credit::kOk)
    return fmt::format("boundary slot {} release for batch {}: {}", slot, batch,
                       ipc::credit_name(c));
  return {};
}

}  // namespace kvasir::cuda
