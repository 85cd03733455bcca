// daemon/supervisor/supervisor.h — creates the instance's segment and runs the stage processes.
//
// start():  create the segment (reclaiming a stale one, refusing a live one),
//           fork + exec `<exe> --stage N --segment NAME` per stage (children
//           get PR_SET_PDEATHSIG, so they die with the daemon), wait until
//           every stage reports its KV capacity, publish the smallest as the
//           block count, wait until every stage is ready. A stage that fails
//           or exits during start-up makes start() throw with that stage's
//           own error text; a timeout throws naming the slow stage. Then
//           starts the monitor thread.
// monitor:  a thread that sleeps in poll(2) on one pidfd per stage, so a
//           death is seen at once (not at the next leisurely poll), and every
//           `tick_s` runs the per-batch watchdog: a stage holding one batch
//           longer than max(k × p99 of its batch times, floor) is SIGKILLed
//           and treated as dead. A dead stage is restarted (same slice) after
//           a back-off, unless more than `max_restarts` losses
//           happened within `restart_window_s`: then the supervisor gives up (health().failed).
//           Every change rings the bridge's bell (docs/recovery.md).
// health(): faults so far, restarts, whether every stage serves, and why it
//           gave up, if it did (with max_restarts = 0: at the first loss,
//           fail-stop). Thread-safe.
// stop():   shutdown flag + wake-ups, wait, SIGTERM, wait, SIGKILL; removes
//           the segment. Idempotent; also run by the destructor.
//
// fork() must happen on a thread that lives as long as the stages:
// PDEATHSIG fires when the forking *thread* exits. start() is meant to be
// called from the daemon's main thread; restarts fork on the monitor
// thread, which stop() joins only after every stage is gone.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/engine/ring_health.h"
#include "ipc/hang_watch.h"
#include "ipc/segment.h"

namespace kvasir {

class WorkerLink;  // daemon/supervisor/remote.h

// The [recovery] keys of the config (RecoveryCfg, daemon/config.h: the
// watchdog, back-off and restart limit), plus what only tests tune.
struct RecoveryOptions : RecoveryCfg {
  int watchdog_history = 256;  // batch times remembered per stage
  double tick_s = 0.02;        // monitor wake-up when no pidfd fires
};

struct SupervisorOptions {
  std::string exe = "/proc/self/exe";  // the binary to exec with --stage N --segment NAME
  std::string instance;                // names the segment; default: the config's socket path
  double start_timeout_s = 120;        // all stages ready within this
  double stop_timeout_s = 5;           // between shutdown flag, SIGTERM and SIGKILL
  RecoveryOptions recovery;
};

struct StageExit {
  int stage = -1;
  std::string error;  // what the stage wrote, or how it ended
};

class Supervisor {
 public:
  // model: the validated model shape (check_config's result).
  Supervisor(const Config& cfg, const ModelConfig& model, SupervisorOptions opt = {});
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  void start();
  RingHealth health() const;
  void stop();

  ipc::Segment& segment() { return *seg_; }
  int32_t kv_blocks() const { return kv_blocks_; }
  // The sliding-window group's pool (0: none; kv_split.h).
  int32_t kv_blocks_swa() const { return kv_blocks_swa_; }
  // The stage pids (-1: not running). A copy: restarts change them.
  std::vector<pid_t> pids() const;
  const std::string& segment_name() const { return name_; }

  // The segment parameters a config and model give (exposed for tests).
  static ipc::SegmentParams params_for(const Config& cfg, const ModelConfig& model);

 private:
  struct Watch {  // per-stage watchdog and restart state (monitor thread, under mu_)
    ipc::HangWatch hang_watch;  // the watchdog's decision (ipc/hang_watch.h)
    std::string hang;           // set when the watchdog killed it: why
    int64_t restart_at = 0;     // > 0: restart due at this time (ns)...
    uint64_t fault_no = 0;      // ...once the bridge has handled this loss (header.epoch)
    int pidfd = -1;
  };

  // Process p: stage p of the ring, or (p >= n_stages) member p - n_stages
  // of an expert group; its slot and its name in messages.
  ipc::StageShared& slot(int p);
  // The worker link whose run holds process p (a stage, or a member of a
  // group there), or -1: p runs here.
  int link_of(int p) const;
  bool remote(int p) const { return link_of(p) >= 0; }
  std::string proc_name(int p) const;
  std::string describe_exit(int stage, int status);
  // fork + exec; no allocation in the child. inherit: the kernels text of
  // the process it replaces ("" for a first start), passed as
  // --simd-inherit so the new one adopts its CPU kernel choices.
  pid_t spawn(int stage, const std::string& inherit = "");
  std::optional<StageExit> reap_starting();
  void wait_started(uint32_t want, const char* what, int64_t deadline,
                    const std::function<void(const std::string&)>& fail);
  // capacity[i]: the smallest KV capacity links_[i]'s worker reported.
  void split_blocks(const std::vector<int64_t>& capacity);
  void restart_due(int64_t now);  // under mu_
  void monitor();
  void on_death(int stage, const std::string& why, int64_t now);  // under mu_
  void on_link_loss(int link, const std::string& why, int64_t now);  // under mu_
  // A loss's count, the limit and the restart's time (under mu_).
  void record_loss(int p, const std::string& why, int64_t now);
  void watchdog(int64_t now);  // under mu_
  void wake_bridge();

  Config cfg_;
  ModelConfig model_;
  SupervisorOptions opt_;
  std::string name_;
  std::unique_ptr<ipc::Segment> seg_;
  int32_t kv_blocks_ = 0;
  int32_t kv_blocks_swa_ = 0;
  // One per run of stages on a worker (config.h, RemoteRun), in ring order.
  std::vector<std::unique_ptr<WorkerLink>> links_;

  mutable std::mutex mu_;  // everything below
  std::vector<pid_t> pids_;
  std::vector<Watch> watch_;
  std::deque<int64_t> losses_;  // times of recent losses (ns), for the per-minute limit
  RingHealth health_;
  bool stopped_ = false;
  std::atomic<bool> quit_{false};
  std::thread monitor_;
};

}  // namespace kvasir
