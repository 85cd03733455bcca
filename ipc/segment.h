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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/expert_load.h"
#include "ipc/batch.h"
#include "ipc/cuda_boundary.h"
#include "ipc/futex.h"
#include "ipc/grammar_table.h"
#include "ipc/ring.h"

namespace boost::interprocess {
class mapped_region;
}

namespace kvasir::ipc {

constexpr uint32_t kSegMagic = 0x5253564B;  // "KVSR" little-endian
// 2: epochs and per-stage progress (recovery); 3: the owner's start time;
// 4: each stage's phase and since when, under a seqlock (StageShared);
// 5: the grammar table (ipc/grammar_table.h); 6: the GPU stages' [cuda]
// settings in the plan; 7: each stage's kernels text (StageShared::simd_text);
// 8: each stage's handoff time (StageStats::handoff_ns); 9: each MoE stage's
// tokens routed per expert (StageShared::routed); 10: expert groups
// (docs/expert-groups.md): each stage's expert range, the members' plans
// and StageShared slots (after the stages'), and one MemberCall area per
// member (request, answer) after the grammar table; 11: the tail's grammar
// compiler settings in the plan (SegmentParams::grammar_workers, ...); 12:
// the hand-off spin (SegmentParams::spin_ns) and each stage's CPUs
// (StagePlan::cpus); 13: the header names the ring's message version; 14:
// the tail's grammar-forced drafts (SegmentParams::forced_drafts); 15: a
// sliding-window group: the slots' second table (SlotDims::tables) and its
// pool's size (kv_blocks_swa); 16: the host each stage runs on
// (StagePlan::host, ipc/link_kind.h).
constexpr uint32_t kSegVersion = 16;
constexpr int kMaxStages = 16;
static_assert(kMaxStageTimes == kMaxStages, "a result slot times every stage");

struct StagePlan {
  int32_t first = 0, last = 0;  // inclusive layer range
  int32_t threads = 1;
  char device[16] = "cpu";
  // An expert group (docs/expert-groups.md): the experts of its layers this
  // process holds, inclusive; -1 = every expert (not in a group).
  int32_t experts_first = -1, experts_last = -1;
  // The CPUs the process runs on ([[stages]] cpus, base/cpu_list.h), as
  // written in the config; "" = wherever the daemon may run.
  char cpus[128] = {};
  // The host that runs the process (docs/multi-host.md): 0 the leader (or
  // the only host), 1.. the plan's workers in the order the plan first
  // names them. A link whose two stages differ here crosses hosts
  // (ipc/link_kind.h). Every host's segment holds the same values.
  int32_t host = 0;
};

// A member of an expert group: the process that holds `plan.experts_*` of
// the layers of ring position `position` (its leader) and answers the
// leader's per-layer requests in its MemberCall area.
struct MemberPlan {
  int32_t position = 0;  // the leader's stage index
  int32_t index = 1;     // 1.. within its group (0 is the leader), for display
  StagePlan plan;        // the leader's layers, its own experts and threads
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
  // Expert groups: the members of every group, in position then range
  // order (n_stages + n_members <= kMaxStages: each has a StageShared
  // slot), and the model's experts per token, which sizes their areas.
  int32_t n_members = 0;
  int32_t moe_top_k = 0;
  MemberPlan members[kMaxStages];
  char model_path[4096] = {};
  // The grammar table (ipc/grammar_table.h): entries of grammar_capacity
  // bytes each; 0 entries = no structured outputs on this instance.
  int32_t grammar_entries = 0;
  uint32_t grammar_capacity = 0;
  // The tail's compiler ([grammar] in the config): its threads, the
  // compiled grammars it keeps, and the longest a spec may take to compile
  // from when the tail first meets it.
  int32_t grammar_workers = 2;
  int32_t grammar_cache = 128;
  uint32_t grammar_compile_timeout_ms = 10000;
  // Speculative decoding under a grammar ([speculative] grammar_forced):
  // the most grammar-forced tokens the tail returns per constrained row
  // (ipc::ForcedRecord), 0 = none (no drafting, or turned off).
  int32_t forced_drafts = 0;
  // How the stages and the bridge wait for a hand-off ([plan] spin_us):
  // spin this long before sleeping (ipc/futex.h, WaitPolicy).
  int64_t spin_ns = 0;
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
// and the accounting: idle = starved (waiting for a batch), busy = holding
// one, blocked = waiting for room downstream.
enum StagePhase : uint32_t { kPhaseIdle = 0, kPhaseBusy = 1, kPhaseBlocked = 2 };

// busy/starved/blocked count the phases the stage has *left*; the phase it
// is in counts from StageShared::phase_since_ns on. Read them with
// read_stage_time(), which adds that running part: a stage holding one
// batch for a minute is busy all that minute, not at its end.
struct StageStats {
  std::atomic<uint64_t> busy_ns{0};     // holding a batch
  std::atomic<uint64_t> starved_ns{0};  // waiting for a batch
  std::atomic<uint64_t> blocked_ns{0};  // waiting for room downstream
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> tokens{0};
  std::atomic<uint64_t> refused{0};     // malformed messages or descriptors
  std::atomic<uint64_t> dropped{0};     // messages of a dead epoch (recovery)
  // The handoff into this stage: for each batch, from the later of its
  // push upstream and the moment this stage was free to take it, to the
  // moment it held it — the ring's own latency (a futex wake-up), not the
  // time a batch queued behind another. `handoffs` batches were counted.
  std::atomic<uint64_t> handoff_ns{0};
  std::atomic<uint64_t> handoffs{0};
};

// The room for a stage's kernels text (StageShared::simd_text), its NUL included.
constexpr size_t kStageSimdBytes = 512;

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
  // The accounting: `phase` since `phase_since_ns` (CLOCK_MONOTONIC, the
  // same clock in every process; 0 = not serving: starting or gone), and
  // the three counters of `stats`. The stage is their one writer and
  // changes them together (enter_phase) under `acct_seq`, a seqlock (odd
  // while it writes), so a reader's copy never counts a moment twice or
  // not at all.
  std::atomic<uint32_t> phase{kPhaseIdle};
  std::atomic<uint32_t> acct_seq{0};
  std::atomic<int64_t> phase_since_ns{0};
  std::atomic<uint64_t> last_busy_ns{0};  // duration of its last batch (watchdog history)
  char error[512] = {};
  // What runs this stage's kernels, for /kvasir/v1/stats (stages[].simd) and
  // `kvasir status`: a CPU stage's SIMD summary (kernels/cpu/simd.h,
  // simd_summary), a GPU stage's device. Written by the stage only, with
  // write_stage_simd, under `simd_seq` (odd while it writes); read with
  // read_stage_simd. Kept in words so that a reader racing the writer copies
  // atomics, never a torn or undefined text.
  std::atomic<uint32_t> simd_seq{0};
  std::atomic<uint64_t> simd_text[kStageSimdBytes / 8] = {};
  // Expert load (docs/model-formats.md, "Expert load"): a MoE stage's
  // experts (0: a dense model's stage, or not said yet) and, since the
  // instance started, the tokens routed to each, summed over the MoE layers
  // it holds, in expert_slots(n_experts) slots (base/expert_load.h: more
  // than kMaxExpertsShown experts are folded). Written by the stage only
  // (set_stage_experts, add_stage_routed); they go on counting across a
  // restart of the stage, as `stats` do.
  std::atomic<int32_t> n_experts{0};
  std::atomic<uint64_t> routed[kMaxExpertsShown] = {};
};

// A stage's time as of one instant: the counters plus the running part of
// the phase it is in, so busy + starved + blocked advance together with the
// clock while the stage serves (docs/ring.md, "Accounting").
struct StageTime {
  uint64_t busy_ns = 0, starved_ns = 0, blocked_ns = 0;
  StagePhase phase = kPhaseIdle;
  int64_t in_phase_ns = 0;  // how long it has been in `phase` (0 when not serving)
  bool serving = false;
  int64_t now_ns = 0;  // the instant the copy is as of
  uint64_t total_ns() const { return busy_ns + starved_ns + blocked_ns; }
};

// The stage's side. begin_accounting: it starts serving at `now` (starved
// until its first batch). enter_phase: the time since the last change goes
// to the counter of the phase it leaves, and `p` runs from `now`.
void begin_accounting(StageShared& st, int64_t now);
void enter_phase(StageShared& st, StagePhase p, int64_t now);
// The supervisor's, once the stage is gone: no running part any more (and a
// write the dead process left half done is closed).
void end_accounting(StageShared& st);
// Any reader (the bridge's ring report, kvasir top through the API): a
// consistent copy as of `now`, or (now <= 0) as of the clock read with the
// copy, so that busy + starved + blocked is exactly the time since the
// stage began serving at that instant.
StageTime read_stage_time(const StageShared& st, int64_t now = 0);

// The stage's kernels text: at most kStageSimdBytes - 1 bytes of `text`
// (the rest dropped). Also the supervisor's, to clear a dead stage's text:
// a write the dead process left half done is closed.
void write_stage_simd(StageShared& st, std::string_view text);
// Any reader: a consistent copy, or "" when none came (nothing written yet,
// or a writer kept it busy past a bounded number of tries). The bytes are
// another process's: read up to a NUL within the buffer, anything but
// printable ASCII replaced by '?'.
std::string read_stage_simd(const StageShared& st);

// The stage's side of the expert load: its model's expert count, once
// before it serves (0 for a dense model; above 1024 is refused, as the
// model's config is). Then after each batch it ran, the batch's tokens
// routed per expert ([n_experts], empty for a dense stage): one relaxed
// fetch_add per slot with something routed, folded as expert_slots says.
void set_stage_experts(StageShared& st, int32_t n_experts);
void add_stage_routed(StageShared& st, std::span<const uint64_t> per_expert);

// Any reader: the expert count and the routed counters as of now (each
// counter read once; they are cumulative, so a reader takes differences).
struct ExpertLoad {
  int32_t n_experts = 0;         // 0: a dense stage
  int32_t per_slot = 1;          // experts_per_slot(n_experts)
  std::vector<uint64_t> routed;  // [expert_slots(n_experts)]
};
ExpertLoad read_stage_experts(const StageShared& st);

// One member's exchange with its leader (docs/expert-groups.md, "Message
// flow"): one request outstanding at a time. The leader writes x [n,
// hidden] f32 and ids [n, top_k] into the area, then layer, n and
// req_seq + 1 (release), rings `request`; the member computes its experts'
// rows into y [n * top_k, hidden] (row t * top_k + j), stores ans_seq =
// req_seq (release) and rings `answer`. A member that starts (or restarts)
// with ans_seq != req_seq answers that request: a member lost mid-request
// costs its leader a wait, never a re-send. Every field is written by one
// side and checked by the other (n against max_tokens, layer against the
// member's layers).
struct alignas(64) MemberCall {
  std::atomic<uint32_t> req_seq{0};
  std::atomic<int32_t> layer{0};
  std::atomic<int32_t> n{0};
  std::atomic<int64_t> posted_ns{0};  // when the open request was posted (0: none) — the watchdog
  Bell request;
  std::atomic<uint32_t> ans_seq{0};
  std::atomic<uint32_t> ans_failed{0};  // 1: the member could not compute it (its error[] says)
  Bell answer;
};

// A member's area, mapped: the control block and its three arrays.
struct MemberArea {
  MemberCall* call = nullptr;
  float* x = nullptr;      // [max_tokens, hidden]
  int32_t* ids = nullptr;  // [max_tokens, top_k]
  float* y = nullptr;      // [max_tokens * top_k, hidden]
};

struct SegmentHeader {
  uint32_t magic = 0;  // written last by the creator
  uint32_t version = 0;
  // The creator's ipc::kMsgVersion: an opener of another one refuses the
  // segment at once. (A stage that only met the mismatch on the first
  // batch would answer in its own version, which the bridge drops: the
  // batch would never come back.)
  uint32_t msg_version = 0;
  uint64_t total_size = 0;
  std::atomic<int32_t> owner_pid{0};
  std::atomic<uint32_t> shutdown{0};  // 1: every loop ends
  // The owner's start time (process_start_time), so that a recycled pid is
  // not taken for the owner. 0: unknown (no /proc).
  std::atomic<uint64_t> owner_start{0};
  std::atomic<int32_t> kv_blocks{0};  // decided by the daemon: min capacity
  // The sliding-window group's pool (0: none), stored before kv_blocks.
  std::atomic<int32_t> kv_blocks_swa{0};
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
  // Expert groups: member m's slot (after the stages') and its area, m in
  // [0, n_members).
  int n_members() const { return params_.n_members; }
  StageShared& member(int m);
  MemberArea member_area(int m);
  Ring& ring(int i);  // i in [0, n_stages]: ring i feeds stage i, ring n_stages the bridge
  DescView desc(uint32_t slot);
  float* boundary(uint32_t slot, int link);  // link s: stage s → s+1
  ResultView result(uint32_t slot);
  // The CUDA IPC boundary table (ipc/cuda_boundary.h): n_stages-1 links × inflight slots.
  CudaBoundaryTable& cuda_table() { return cuda_; }
  // The grammar specs of constrained requests (ipc/grammar_table.h).
  GrammarTable grammar_table();

  struct Layout {
    uint64_t stages, rings, desc, desc_stride, bound, bound_stride, result, result_stride, cuda,
        grammar, members, member_stride, member_x, member_ids, member_y, total;
  };
  static Layout layout(const SegmentParams& p);
  // Empty if the plan's widths are sane, else why.
  static std::string check_params(const SegmentParams& p);

 private:
  static std::string check_members(const SegmentParams& p, bool (*bad_plan)(const StagePlan&));
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
