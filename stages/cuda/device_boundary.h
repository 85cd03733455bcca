// stages/cuda/device_boundary.h — CUDA IPC boundaries between two GPU stages
// (the CPU side, the record table and credits, is ipc/cuda_boundary.h).
//
// Exporter (stage s, link s): one device buffer per ring slot,
// [max_tokens, hidden] f32, and one interprocess event per slot, allocated
// once, published once. Per batch: wait for the slot's credit, copy the
// residual stream into the slot, record the slot's event, mark it written.
// Importer (stage s+1): opens the handles once (never in the exporter's
// process), and per batch: checks the credit, waits on the event in its own
// stream, copies peer-to-peer into its input, and, once the copy has
// completed (the stage syncs where it hands the batch on), releases the credit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ipc/cuda_boundary.h"

namespace kvasir::cuda {

struct BoundarySpec {
  int32_t device = 0;  // this stage's ordinal
  int32_t n_slots = 0;
  uint64_t bytes = 0;  // max_tokens * hidden * 4
};

class DeviceBoundaries {
 public:
  ~DeviceBoundaries();
  // Empty string if done, else why. `stop` ends the importer's wait for the
  // exporter's publication (shutdown while starting).
  std::string export_link(ipc::CudaBoundaryTable* table, int32_t link, const BoundarySpec& s);
  std::string import_link(ipc::CudaBoundaryTable* table, int32_t link, const BoundarySpec& s,
                          const volatile uint32_t* stop);

  bool exports() const { return out_link_ >= 0; }
  bool imports() const { return in_link_ >= 0; }

  // Exporter: enqueue the copy of `src` (n_bytes) into `slot` and record its
  // event on `stream`, then mark the slot written for `batch`.
  std::string send(cudaStream_t stream, uint32_t slot, uint64_t batch, const float* src,
                   uint64_t n_bytes);
  // Importer: enqueue the wait and the copy of `slot` into `dst`.
  std::string receive(cudaStream_t stream, uint32_t slot, uint64_t batch, float* dst,
                      uint64_t n_bytes);
  // Importer: after `stream` passed the copy (the caller synchronised).
  std::string release(uint32_t slot, uint64_t batch);

 private:
  ipc::CudaBoundaryTable* table_ = nullptr;
  int32_t out_link_ = -1, in_link_ = -1;
  uint64_t out_bytes_ = 0, in_bytes_ = 0;
  std::vector<void*> out_ptr_, in_ptr_;  // [n_slots] device
  std::vector<cudaEvent_t> out_ev_, in_ev_;
};

}  // namespace kvasir::cuda
