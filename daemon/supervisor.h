// daemon/supervisor.h — creates the instance's segment and runs the stage processes.
//
// start():  create the segment (reclaiming a stale one, refusing a live one),
//           fork + exec `<exe> --stage N --segment NAME` per stage (children
//           get PR_SET_PDEATHSIG, so they die with the daemon), wait until
//           every stage reports its KV capacity, publish the smallest as the
//           block count, wait until every stage is ready. A stage that fails
//           or exits during start-up makes start() throw with that stage's
//           own error text; a timeout throws naming the slow stage.
// poll():   reaps children; a stage that died is marked dead in the segment
//           and reported (the engine fails its requests, the daemon exits).
// stop():   shutdown flag + wake-ups, wait, SIGTERM, wait, SIGKILL; removes
//           the segment. Idempotent; also run by the destructor.
//
// fork() must happen on a thread that lives as long as the stages:
// PDEATHSIG fires when the forking *thread* exits. start() is meant to be
// called from the daemon's main thread.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "ipc/segment.h"

namespace kvasir {

struct SupervisorOptions {
  std::string exe = "/proc/self/exe";  // the binary to exec with --stage N --segment NAME
  std::string instance;                // names the segment; default: the config's socket path
  double start_timeout_s = 120;        // all stages ready within this
  double stop_timeout_s = 5;           // between shutdown flag, SIGTERM and SIGKILL
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
  std::optional<StageExit> poll();
  void stop();

  ipc::Segment& segment() { return *seg_; }
  int32_t kv_blocks() const { return kv_blocks_; }
  const std::vector<pid_t>& pids() const { return pids_; }
  const std::string& segment_name() const { return name_; }

  // The segment parameters a config and model give (exposed for tests).
  static ipc::SegmentParams params_for(const Config& cfg, const ModelConfig& model);

 private:
  std::string describe_exit(int stage, int status);

  Config cfg_;
  ModelConfig model_;
  SupervisorOptions opt_;
  std::string name_;
  std::unique_ptr<ipc::Segment> seg_;
  std::vector<pid_t> pids_;
  int32_t kv_blocks_ = 0;
  bool stopped_ = false;
};

}  // namespace kvasir
