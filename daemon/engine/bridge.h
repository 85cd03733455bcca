// daemon/engine/bridge.h — the bridge: the Engine (daemon/engine/engine.h) over the ring.
//
// One thread owns everything below: it takes new requests and cancels from
// an inbox, asks the scheduler for a micro-batch whenever a ring slot is
// free, writes the batch's descriptor into that slot and pushes it to the
// head's ring, and reads results from the tail's ring. It never sees a
// hidden state. It sleeps on the tail ring's bell (submit() rings it too),
// so an idle daemon uses no CPU.
//
// Results are untrusted: a message whose slot is not outstanding, whose
// batch id does not match the one submitted in that slot, or whose counts
// differ is refused (counted, logged) and changes nothing.
//
// Recovery (docs/recovery.md): when the health hook reports a new stage
// loss, the engine starts a new epoch (batches with older ids are dropped
// by every receiver), frees every slot, requeues every running sequence to
// be recomputed from its prompt plus the tokens already streamed, and
// submits nothing until every stage serves again and the ring is drained.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "daemon/engine/block_manager.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/ring_health.h"
#include "daemon/engine/scheduler.h"
#include "ipc/segment.h"

namespace kvasir {

struct BridgeConfig {
  SchedLimits limits;
  int32_t max_queue = 1024;
  int32_t n_blocks = 0;  // the supervisor's minimum over stages
  int32_t block_size = 16;
  int32_t vocab = 0;
  int32_t context_length = 0;    // 0 = unknown (no limit but the blocks)
  std::vector<int32_t> eos_ids;  // the model's end-of-generation ids
};

struct StageSnapshot {
  uint32_t status = 0;
  uint64_t busy_ns = 0, starved_ns = 0, blocked_ns = 0, batches = 0, tokens = 0, refused = 0;
};

class Bridge : public Engine {
 public:
  // health: the supervisor's view (Supervisor::health), read every wake-up:
  // a new fault starts a recovery, `failed` fails the engine for good (a
  // fail-stop supervisor sets it at the first loss). Empty: no supervisor
  // (tests, benchmarks): the ring is taken as healthy.
  Bridge(ipc::Segment& seg, BridgeConfig cfg, std::function<RingHealth()> health = {});
  ~Bridge() override;

  RequestId submit(GenRequest req, EventSink sink) override;
  void cancel(RequestId id) override;
  EngineStats stats() const override;
  RingReport ring_report() const override;
  bool ready() const override { return !failed_.load() && !stopping_.load(); }

  // Stops the loop; requests still running get kAbort. Idempotent.
  void shutdown();
  // Why the engine failed (a stage died), or empty.
  std::string failure() const;
  std::vector<StageSnapshot> stage_stats() const;
  uint64_t refused_results() const { return refused_results_.load(); }
  uint64_t stale_results() const { return stale_results_.load(); }

 private:
  struct Slot {
    bool busy = false;
    uint64_t batch_id = 0;
    std::vector<SchedRow> rows;
  };

  void loop();
  void take_inbox();
  bool submit_batch();
  bool read_results();
  void finish(Sequence* s, FinishReason why, Status error = {});
  void reap();
  Status check_request(const GenRequest& r) const;
  void fail_all(const std::string& why);
  void invalidate(uint64_t faults);  // a stage was lost: new epoch, free slots, requeue
  void check_health();

  ipc::Segment& seg_;
  BridgeConfig cfg_;
  std::function<RingHealth()> health_;
  BlockManager blocks_;
  Scheduler sched_;

  mutable std::mutex inbox_mu_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  std::vector<RequestId> cancels_;
  std::atomic<RequestId> next_id_{1};
  std::atomic<uint64_t> seed_counter_{0};
  uint64_t seed_base_ = 0;
  size_t queued_ = 0;  // inbox + waiting, for max_queue (under inbox_mu_)

  // Engine thread only.
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  std::vector<Slot> slots_;
  uint64_t next_batch_id_ = 1;
  std::set<int32_t> eos_;
  uint64_t faults_seen_ = 0;
  bool recovering_ = false;
  int64_t fault_ns_ = 0;  // when the engine saw the loss being recovered

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::string failure_;
  std::atomic<bool> failed_{false}, stopping_{false};
  std::atomic<uint64_t> refused_results_{0}, stale_results_{0};
  std::thread thread_;
};

}  // namespace kvasir
