// daemon/supervisor/remote.h — the leader's half of the join: the stages a
// worker host runs (docs/multi-host.md, "The join").
//
// Each run of consecutive stages r..e-1 that name one `host` (config.h,
// RemoteRun) is one worker's, which runs them in a segment of its own made
// from the same plan; this host runs every other stage. One WorkerLink per
// run connects to its worker (retrying: a worker pod may start after the
// leader's), proves the cluster key, sends the plan and the run, takes the
// worker's KV capacity, sends the block counts, waits for its Ready and
// then runs the leader's relay (relay/relay.h) on a thread of its own, in
// place of stages r..e-1: the consumer of ring r and the producer of ring
// e. Between two workers the batch passes through this host (each worker
// has one link, to the leader). The link is the remote stages' liveness: a
// relay that ends with an error is their loss, which the supervisor
// handles as a stage loss (a new epoch, requeue, recompute) and answers
// with rejoin(): connect again (without limit, until stop), the same plan,
// the same block counts, Ready, the relay.
//
// Threads: join() and finish_join() run on the supervisor's start-up
// thread, everything after on the link's own thread (a UCX link is driven
// from one thread at a time). The rest is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "daemon/config/config.h"
#include "daemon/engine/ring_health.h"
#include "ipc/hang_watch.h"
#include "ipc/segment.h"
#include "net/auth.h"
#include "net/ucx_link.h"
#include "relay/plan.h"

namespace kvasir {

// The [recovery] watchdog keys as the watchdog's limits: the supervisor's
// over the stages here, and the worker's over its own (sent in the plan).
inline ipc::HangLimits watchdog_limits(const RecoveryCfg& r) {
  return {r.watchdog_k, r.watchdog_floor_s, r.watchdog_busy_cap_s};
}

class WorkerLink {
 public:
  // run: one of cfg.plan.remote_runs(); seg: the leader's segment, made
  // from the whole plan.
  WorkerLink(const Config& cfg, ipc::Segment& seg, const RemoteRun& run);
  ~WorkerLink();
  WorkerLink(const WorkerLink&) = delete;
  WorkerLink& operator=(const WorkerLink&) = delete;

  // Start-up: the key file, the connect (retried until cluster.join_timeout
  // or *quit), the handshake and the plan. *capacity: the smallest KV
  // capacity of the worker's stages, in blocks of their layers.
  Status join(const std::atomic<bool>& quit, int64_t* capacity);
  // The block counts the leader decided for the whole ring, then the
  // worker's Ready (a worker stage that fails reaches here as its Refuse).
  Status finish_join(const relay::RingBlocks& blocks);
  // The leader's relay, on the link's thread, from now until stop() or a loss.
  void start_relay();

  // True once per loss, with why: the relay ended without a stop (a link
  // error, the worker's Refuse or its Bye).
  bool take_loss(std::string* why);
  // After a loss (the relay's thread has ended): a new thread connects
  // again until stop(), rejoins with the same block counts (refusing a
  // worker whose capacity is now smaller) and runs the relay.
  void rejoin();
  // Whether the relay runs on a joined worker now.
  bool serving() const { return state_.load() == kServing; }
  LinkHealth health() const;

  // The segment's shutdown must be requested first: the relay then ends
  // with a Bye to the worker. Joins the thread. Idempotent.
  void stop();

  // kvasird --check: where the stages run and whether the key file is
  // usable ("" when every stage is local).
  static std::string describe(const Config& cfg);

  int first_remote() const { return r_; }
  int end() const { return e_; }  // the stage after the run's last
  const std::string& host() const { return host_; }

 private:
  enum State : int { kJoining, kServing, kLost };
  Status connect(const std::atomic<bool>& quit, int64_t deadline_ns);
  Status exchange_plan(const std::atomic<bool>& quit, int64_t* capacity);
  void run_relay();  // the link's thread, until the relay ends
  void set_error(const std::string& why);

  ipc::Segment& seg_;
  const int r_, e_;
  std::string host_, addr_;
  uint16_t port_ = 0;
  std::string key_path_;
  double join_timeout_s_, link_timeout_s_;
  ipc::HangLimits watchdog_;  // sent in the plan
  net::ClusterKey key_;
  relay::RingBlocks blocks_;
  std::unique_ptr<net::UcxLink> link_;
  std::thread thread_;
  std::atomic<bool> quit_{false};
  std::atomic<int> state_{kJoining};
  std::atomic<bool> lost_{false};  // set by the relay's thread, taken by take_loss
  std::atomic<int64_t> joins_{0};
  std::atomic<uint64_t> sent_{0}, received_{0};                  // bytes of the ended sessions
  std::atomic<uint64_t> session_sent_{0}, session_received_{0};  // the running one's
  std::atomic<int64_t> rtt_{0};

  mutable std::mutex mu_;  // the text below
  std::string last_error_;
};

}  // namespace kvasir
