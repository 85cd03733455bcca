#include "daemon/supervisor/loading.h"

#include <fmt/format.h>
#include <unistd.h>

#include "base/check.h"
#include "ipc/segment.h"

namespace kvasir {

using nlohmann::json;

LoadingMonitor::LoadingMonitor(const Config& cfg, std::string segment_name)
    : cfg_(cfg), name_(std::move(segment_name)) {}

LoadingMonitor::~LoadingMonitor() = default;

void LoadingMonitor::finish() {
  std::lock_guard lk(mu_);
  last_ = snapshot_locked();
  finished_ = true;
  seg_.reset();
}

bool LoadingMonitor::request_shutdown() {
  std::lock_guard lk(mu_);
  if (finished_) return true;
  if (!seg_) snapshot_locked();  // tries to map it
  if (!seg_) return false;
  seg_->request_shutdown();
  return true;
}

json LoadingMonitor::snapshot() {
  std::lock_guard lk(mu_);
  if (finished_) {
    json j = last_;
    j["phase"] = "ready";
    return j;
  }
  return snapshot_locked();
}

json LoadingMonitor::snapshot_locked() {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  if (!seg_) {
    // Not created yet, or a stale one of a killed daemon that the Supervisor
    // is about to reclaim: only ours counts.
    try {
      auto s = ipc::Segment::open(name_);
      if (s->header().owner_pid.load() == ::getpid()) seg_ = std::move(s);
    } catch (const Error&) {
    }
  }
  json stages = json::array();
  bool any_loading = false, all_paged = true, all_starting = true, all_ready = true;
  const auto& plan = cfg_.plan.stages;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& p = plan[i];
    json st = {{"index", i},           {"layers", fmt::format("{}-{}", p.first, p.last)},
               {"device", p.device},   {"layers_total", p.last - p.first + 1},
               {"status", "starting"}, {"bytes_loaded", 0},
               {"bytes_total", 0},     {"layers_loaded", 0}};
    if (seg_ && int(i) < seg_->n_stages()) {
      const ipc::StageShared& s = seg_->stage(int(i));
      uint64_t done = s.load_bytes_done.load(), total = s.load_bytes_total.load();
      int32_t layers = s.load_layers_done.load();
      const char* status = "starting";
      switch (s.status.load()) {
        case ipc::kStageStarting:
          break;
        case ipc::kStageSized:
          status = total > 0 && done >= total ? "allocating" : "loading";
          break;
        case ipc::kStageReady:
          status = "ready";
          break;
        case ipc::kStageFailed:
          status = "failed";
          break;
        case ipc::kStageStopped:
          status = "stopped";
          break;
        default:
          status = "dead";
      }
      any_loading = any_loading || std::string(status) == "loading";
      all_starting = all_starting && std::string(status) == "starting";
      all_ready = all_ready && std::string(status) == "ready";
      all_paged = all_paged && total > 0 && done >= total;
      st["status"] = status;
      st["bytes_loaded"] = std::min(done, total);
      st["bytes_total"] = total;
      st["layers_loaded"] = std::clamp(layers, 0, p.last - p.first + 1);
    } else {
      all_paged = all_ready = false;
    }
    stages.push_back(std::move(st));
  }
  const char* phase = !seg_ || all_starting       ? "starting stages"
                      : all_ready                 ? "ready"
                      : any_loading || !all_paged ? "loading weights"
                                                  : "allocating KV cache";
  return {{"phase", phase}, {"elapsed_s", elapsed}, {"stages", stages}};
}

std::string LoadingMonitor::log_line() {
  json j = snapshot();
  std::string out =
      fmt::format("{} ({:.1f} s)", j["phase"].get<std::string>(), j["elapsed_s"].get<double>());
  for (const auto& st : j["stages"]) {
    out += fmt::format("; stage {} ({}): {}, {:.1f}/{:.1f} MiB, {}/{} layers",
                       st["index"].get<size_t>(), st["layers"].get<std::string>(),
                       st["status"].get<std::string>(),
                       double(st["bytes_loaded"].get<uint64_t>()) / 1048576.0,
                       double(st["bytes_total"].get<uint64_t>()) / 1048576.0,
                       st["layers_loaded"].get<int>(), st["layers_total"].get<int>());
  }
  return out;
}

}  // namespace kvasir
