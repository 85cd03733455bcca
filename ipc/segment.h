// ipc/segment.h — the one shared-memory segment of a Kvasir instance.
//
// Layout and slot life: see the drawing in ipc/ring.h. The daemon creates
// the segment (mode 0600) and writes the plan into its header; each stage
// process opens it by name. The layout is a pure function of the header's
// plan, so an opener recomputes every offset itself and checks the mapped
// size, instead of trusting offsets stored in memory another process wrote.
//
// Instance ownership: the header records the owner's pid and its start time
// (/proc/PID/stat). Creating over an existing segment whose owner is alive
// refuses ("already running"); one whose owner is dead (a daemon killed with
// SIGKILL) is reclaimed — also when the dead owner is a zombie not yet
// reaped, or its pid now belongs to another process (start time differs).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "ipc/batch.h"
#include "ipc/cuda_boundary.h"
#include "ipc/futex.h"
#include "ipc/ring.h"

namespace boost::interprocess {
class mapped_region;
}

namespace kvasir::ipc {

constexpr uint32_t kSegMagic = 0x5253564B;  // "KVSR" little-endian
// 2: epochs and per-stage progress (recovery); 3: the owner's start time;
// 4: the GPU stages' [cuda] settings in the plan.
constexpr uint32_t kSegVersion = 4;
constexpr int kMaxStages = 16;

struct StagePlan {
  int32_t first = 0, last = 0;  // inclusive layer range
  int32_t threads = 1;
  char device[16] = "cpu";
};

// The plan, as every process reads it. Fixed at creation.
struct SegmentParams {
  int32_t n_stages = 0;
  SlotDims dims;
  int32_t block_size = 16;
  int32_t kv_f32 = 0;       // 0 = f16, 1 = f32
  uint64_t kv_memory = 0;   // bytes per CPU stage
  double kv_gpu_util = 0.9;  // GPU stages: share of free device memory for weights' rest + KV
  int32_t cuda_graphs = 1;    // GPU stages: decode steps as CUDA graphs ([cuda] graphs)
  int32_t cuda_quantize = 0;  // GPU stages: 0 weights as stored, 1 FP8 at load ([cuda] quantize)
  StagePlan stages[kMaxStages];
  char model_path[4096] = {};
};

enum StageStatus : uint32_t {
  kStageStarting = 0,
  kStageSized = 1,    // capacity known, waiting for the daemon's block count
  kStageReady = 2,    // serving
  kStageFailed = 3,   // error[] says why; the process exits non-zero
  kStageStopped = 4,  // left its loop at shutdown
  kStageDead = 5,     // set by the supervisor when the process vanished
};

// What a stage is doing right now (StageShared::phase), for the watchdog
// and the drain check: busy means it holds a batch.
enum StagePhase : uint32_t { kPhaseIdle = 0, kPhaseBusy = 1, kPhaseBlocked = 2 };

struct StageStats {
  std::atomic<uint64_t> busy_ns{0};     // holding a batch
  std::atomic<uint64_t> starved_ns{0};  // waiting for a batch
  std::atomic<uint64_t> blocked_ns{0};  // waiting for room downstream
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> tokens{0};
  std::atomic<uint64_t> refused{0};     // malformed messages or descriptors
  std::atomic<uint64_t> dropped{0};     // messages of a dead epoch (recovery)
};

struct alignas(64) StageShared {
  std::atomic<uint32_t> status{kStageStarting};
  std::atomic<int32_t> pid{0};
  std::atomic<int64_t> capacity_blocks{0};  // what this stage's kv.memory holds
  // Start-up progress (daemon log, /health, `kvasir status` while loading):
  // bytes of this stage's slice of the weights paged in so far, of the total,
  // and whole layers done. Written by the stage only, read by the daemon.
  std::atomic<uint64_t> load_bytes_done{0};
  std::atomic<uint64_t> load_bytes_total{0};
  std::atomic<int32_t> load_layers_done{0};
  StageStats stats;
  // Recovery (docs/recovery.md). `passed` counts the messages this stage has
  // finished with (pushed on or dropped); its inbound ring's tail counts the
  // ones it took, so tail - passed is what it holds: 0 or 1. When a stage
  // dies the supervisor sets passed = tail (what it held is gone).
  std::atomic<uint32_t> passed{0};
  std::atomic<uint32_t> phase{kPhaseIdle};
  std::atomic<uint64_t> last_busy_ns{0};  // duration of its last batch (watchdog history)
  char error[512] = {};
};

struct SegmentHeader {
  uint32_t magic = 0;  // written last by the creator
  uint32_t version = 0;
  uint64_t total_size = 0;
  std::atomic<int32_t> owner_pid{0};
  std::atomic<uint32_t> shutdown{0};  // 1: every loop ends
  // The owner's start time (process_start_time), so that a recycled pid is
  // not taken for the owner. 0: unknown (no /proc).
  std::atomic<uint64_t> owner_start{0};
  std::atomic<int32_t> kv_blocks{0};  // decided by the daemon: min capacity
  Bell state;                         // rung on any status/decision change
  // Batches with an id below this belong to a dead epoch (a stage died while
  // they were in the ring): every receiver drops them. Only the bridge
  // raises it, before it submits anything of the new epoch.
  std::atomic<uint64_t> epoch_first_batch{0};
  // The stage losses the bridge has handled (started a new epoch for); the
  // supervisor restarts a lost stage only once this covers its loss.
  std::atomic<uint32_t> epoch{0};
  SegmentParams params;
};

using Ring = SpscRing<BatchMsg>;

// When process `pid` started (field 22 of /proc/PID/stat: clock ticks since
// boot). 0 if there is no such process, it is a zombie (it runs no code and
// holds nothing), or /proc cannot say.
uint64_t process_start_time(int32_t pid);

class Segment {
 public:
  // "kvasir-" + 16 hex digits of a hash of the instance key (the socket path).
  static std::string name_for(const std::string& instance_key);

  // Creates the segment, reclaiming a stale one; throws kvasir::Error
  // "... already running (pid N)" if a live daemon owns the name.
  static std::unique_ptr<Segment> create(const std::string& name, const SegmentParams& params);
  // Opens an existing segment (stage side); checks magic, version, plan and size.
  static std::unique_ptr<Segment> open(const std::string& name);
  // Removes the name (the owner, at exit). Existing mappings stay valid.
  static void remove(const std::string& name);
  static bool exists(const std::string& name);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const { return name_; }
  SegmentHeader& header() { return *hdr_; }
  const SegmentParams& params() const { return params_; }  // a private, validated copy
  const SlotDims& dims() const { return params_.dims; }
  int n_stages() const { return params_.n_stages; }
  bool stopping() const { return hdr_->shutdown.load(std::memory_order_acquire) != 0; }
  void request_shutdown();  // sets shutdown and wakes every waiter
  // True when a message with this id belongs to a dead epoch.
  bool stale(uint64_t batch_id) const {
    return batch_id < hdr_->epoch_first_batch.load(std::memory_order_acquire);
  }
  // True when no message is queued in any ring and no stage holds one. Reads
  // ring by ring in data-flow order, so a message moving forward during the
  // read is still seen (it is counted twice, never missed). Meaningful only
  // while nothing new enters ring 0 (the bridge has stopped submitting).
  bool drained();

  StageShared& stage(int i);
  Ring& ring(int i);  // i in [0, n_stages]: ring i feeds stage i, ring n_stages the bridge
  DescView desc(uint32_t slot);
  float* boundary(uint32_t slot, int link);  // link s: stage s → s+1
  ResultView result(uint32_t slot);
  // The CUDA IPC boundary table (ipc/cuda_boundary.h): n_stages-1 links × inflight slots.
  CudaBoundaryTable& cuda_table() { return cuda_; }

  struct Layout {
    uint64_t stages, rings, desc, desc_stride, bound, bound_stride, result, result_stride, cuda,
        total;
  };
  static Layout layout(const SegmentParams& p);
  // Empty if the plan's widths are sane, else why.
  static std::string check_params(const SegmentParams& p);

 private:
  Segment() = default;
  std::string name_;
  std::unique_ptr<boost::interprocess::mapped_region> region_;
  void* base_ = nullptr;
  uint64_t size_ = 0;
  SegmentHeader* hdr_ = nullptr;
  SegmentParams params_;
  Layout lay_{};
  CudaBoundaryTable cuda_;
};

}  // namespace kvasir::ipc
