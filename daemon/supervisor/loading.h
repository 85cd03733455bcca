// daemon/supervisor/loading.h — start-up progress of the stages, read from the segment.
//
// While the stages start, the API already serves (health 503 "loading",
// `kvasir status`). Each stage writes its progress into its StageShared
// (status; bytes of its slice paged in, of the total; layers done — see
// stages/preload.h); this monitor maps the instance's segment by name (the
// Supervisor creates it inside start(), on another thread) and turns those
// fields into JSON and log lines. Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/config/config.h"

namespace kvasir {
namespace ipc {
class Segment;
}

class LoadingMonitor {
 public:
  // segment_name: Supervisor::segment_name(); only a segment this process
  // owns is read (a stale one of a killed daemon is ignored).
  LoadingMonitor(const Config& cfg, std::string segment_name);
  ~LoadingMonitor();

  // {"phase": "starting stages" | "loading weights" | "allocating KV cache" | "ready",
  //  "elapsed_s": s,
  //  "stages": [{"index", "layers", "device", "status", "bytes_loaded", "bytes_total",
  //              "layers_loaded", "layers_total"}, ...]}
  nlohmann::json snapshot();
  // "stage 0 (layers 0-14): 12.0/48.3 MiB, 3/15 layers; stage 1 ..."
  std::string log_line();
  // Stops reading the segment (once the stages are ready); snapshot() then
  // reports "ready" with the last figures.
  void finish();
  // Sets the segment's shutdown flag (a stop signal while the stages load:
  // they leave early and Supervisor::start fails). False if the segment is
  // not there yet (call again).
  bool request_shutdown();

 private:
  nlohmann::json snapshot_locked();

  Config cfg_;
  std::string name_;
  std::mutex mu_;
  std::unique_ptr<ipc::Segment> seg_;
  bool finished_ = false;
  nlohmann::json last_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace kvasir
