// daemon/engine/bridge.h — the bridge: the Engine (daemon/engine/engine.h) over the ring.
//
// The bridge keeps the ring; the Scheduler (scheduler.h) keeps the requests.
// One thread, the engine thread, owns both. The bridge's jobs, and only
// these:
//
//   - the inbox: submit() and cancel() come from other threads; a request is
//     validated (check_request) before it is queued, and a refusal is its
//     only event, sent from submit() itself;
//   - the slot table: which SchedulerOutput is in which ring slot. Whenever
//     a slot is free it asks the scheduler for a micro-batch, encodes it
//     into that slot's descriptor and pushes it to the head's ring;
//   - results: it reads the tail's ring and decodes each message into a
//     BatchResult for Scheduler::update. Results are untrusted: a message
//     whose slot is not outstanding, whose batch id does not match the one
//     submitted in that slot, or whose counts differ is refused (counted,
//     logged) and changes nothing; a token id outside the vocabulary fails
//     its request (kBadResult);
//   - epochs and recovery (docs/recovery.md): when the health hook reports
//     a new stage loss, it starts a new epoch (batches with older ids are
//     dropped by every receiver), frees every slot, has the scheduler
//     requeue every running sequence, and submits nothing until every stage
//     serves again and the ring is drained;
//   - stats: the scheduler's and its own, published for other threads.
//
// It never sees a hidden state nor a sequence. It sleeps on the tail ring's
// bell (submit() rings it too), so an idle daemon uses no CPU.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/engine/batch_log.h"
#include "daemon/engine/descriptor.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/ring_health.h"
#include "daemon/engine/scheduler.h"
#include "daemon/engine/spec_table.h"
#include "ipc/segment.h"

namespace kvasir {

struct BridgeConfig {
  SchedLimits limits;
  int32_t max_queue = 1024;
  int32_t n_blocks = 0;  // the supervisor's minimum over stages
  // The sliding-window group (docs/scheduler.md): its window and pool, as
  // the supervisor decided them; {0, 0} without one.
  SlidingKv sliding;
  int32_t block_size = 16;
  int32_t vocab = 0;
  int32_t context_length = 0;    // 0 = unknown (no limit but the blocks)
  std::vector<int32_t> eos_ids;  // the model's end-of-generation ids
  // `[log] batches`: a line per result read (batch_log.h); null: none.
  std::shared_ptr<BatchLog> batch_log;
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
  void stop_choice(RequestId id, int32_t index) override;
  EngineStats stats() const override;
  RingReport ring_report() const override;
  bool ready() const override { return !failed_.load() && !stopping_.load(); }
  int32_t max_sequence_tokens() const override;

  // Stops the loop; requests still running get kAbort. Idempotent.
  void shutdown();
  // Why the engine failed (the supervisor gave up), or empty.
  std::string failure() const;
  uint64_t refused_results() const { return refused_results_.load(); }

 private:
  struct Pending {  // a validated request on its way to the scheduler
    RequestId id = 0;
    GenRequest req;
    EventSink sink;
  };
  struct Slot {
    bool busy = false;
    uint64_t batch_id = 0;  // the ring's id (epochs are ranges of it)
    SchedulerOutput out;    // what the scheduler put in it
    int64_t submit_ns = 0;  // when it entered the ring (its cycle: until its result)
  };

  Status check_request(const GenRequest& r) const;
  Status check_grammar(const GenRequest& r) const;
  void loop();
  void take_inbox();
  bool submit_batch();
  void encode(uint32_t slot, uint64_t batch_id, const SchedulerOutput& out);
  bool read_results();
  bool accept(const ipc::BatchMsg& m);
  BatchResult decode(const ipc::BatchMsg& m, const Slot& slot) const;
  std::vector<PromptLogprob> prompt_records(const ipc::ResultView& view, const ScheduledRow& row,
                                            int64_t t0) const;
  Status draft_records(const ipc::ResultView& view, const ScheduledRow& row, int64_t t0,
                       RowResult& out) const;
  std::vector<int32_t> forced_record(const ipc::ResultView& view, int32_t r) const;
  void check_health();
  void invalidate(uint64_t faults);  // a stage was lost: new epoch, free slots, requeue
  void fail(const std::string& why);
  void publish_stats();

  ipc::Segment& seg_;
  BridgeConfig cfg_;
  std::function<RingHealth()> health_;

  mutable std::mutex inbox_mu_;
  std::vector<Pending> inbox_;
  struct Cancel {
    RequestId id = 0;
    int32_t index = -1;  // -1: every choice
  };
  std::vector<Cancel> cancels_;
  std::atomic<RequestId> next_id_{1};
  std::atomic<uint64_t> seed_counter_{0};
  uint64_t seed_base_ = 0;
  size_t queued_ = 0;  // inbox + waiting, for max_queue (under inbox_mu_)

  // Engine thread only.
  Scheduler sched_;
  SpecTable specs_;  // structured-output specs in the segment's grammar table
  ipc::Batch enc_;   // the descriptor being encoded (encode), its buffers reused
  std::vector<Slot> slots_;
  uint64_t next_batch_id_ = 1;
  uint64_t faults_seen_ = 0;
  bool recovering_ = false;
  int64_t fault_ns_ = 0;  // when the engine saw the loss being recovered

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::vector<StageCost> cost_;  // the scheduler's cost model, per stage
  std::string failure_;
  std::atomic<bool> failed_{false}, stopping_{false};
  std::atomic<uint64_t> refused_results_{0};
  // The tail-to-bridge hop (RingReport::return_s): ns summed, results timed.
  std::atomic<uint64_t> return_ns_{0}, returns_{0};
  // Slots busy now (RingReport::in_ring): written by the engine thread,
  // read by the API's.
  std::atomic<int32_t> in_ring_{0};
  std::thread thread_;
};

}  // namespace kvasir
