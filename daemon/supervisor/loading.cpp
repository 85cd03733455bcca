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

namespace {

// What the phases of start-up add up to over every process.
struct LoadFlags {
  bool any_loading = false, all_paged = true, all_starting = true, all_ready = true;
  bool any_joining = false;
};

const char* status_name(uint32_t status, uint64_t done, uint64_t total) {
  switch (status) {
    case ipc::kStageStarting:
      return "starting";
    case ipc::kStageSized:
      return total > 0 && done >= total ? "allocating" : "loading";
    case ipc::kStageReady:
      return "ready";
    case ipc::kStageFailed:
      return "failed";
    case ipc::kStageStopped:
      return "stopped";
    default:
      return "dead";
  }
}

// One process (a stage, or an expert group's member: `member` > 0 of
// `position`) from the plan and, once the segment is there, its slot.
json process_json(size_t index, int position, int member, const StageCfg& p,
                  const ipc::StageShared* s, LoadFlags& f) {
  json st = {{"index", index},       {"position", position},
             {"member", member},     {"layers", fmt::format("{}-{}", p.first, p.last)},
             {"device", p.device},   {"layers_total", p.last - p.first + 1},
             {"status", "starting"}, {"bytes_loaded", 0},
             {"bytes_total", 0},     {"layers_loaded", 0}};
  if (!s) {
    f.all_paged = f.all_ready = false;
    return st;
  }
  if (!p.host.empty()) {
    // A worker's stage: the worker pages its weights in, so the leader knows
    // only whether the join has finished (the supervisor marks it ready).
    const bool ready = s->status.load() == ipc::kStageReady;
    f.any_joining = f.any_joining || !ready;
    f.all_starting = false;
    f.all_ready = f.all_ready && ready;
    st["status"] = ready ? "ready" : "joining";
    st["host"] = p.host;
    return st;
  }
  uint64_t done = s->load_bytes_done.load(), total = s->load_bytes_total.load();
  int32_t layers = s->load_layers_done.load();
  const std::string status = status_name(s->status.load(), done, total);
  f.any_loading = f.any_loading || status == "loading";
  f.all_starting = f.all_starting && status == "starting";
  f.all_ready = f.all_ready && status == "ready";
  f.all_paged = f.all_paged && total > 0 && done >= total;
  st["status"] = status;
  st["bytes_loaded"] = std::min(done, total);
  st["bytes_total"] = total;
  st["layers_loaded"] = std::clamp(layers, 0, p.last - p.first + 1);
  return st;
}

}  // namespace

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
  LoadFlags f;
  const auto& plan = cfg_.plan.stages;
  for (size_t i = 0; i < plan.size(); ++i) {
    const bool there = seg_ && int(i) < seg_->n_stages();
    stages.push_back(
        process_json(i, int(i), 0, plan[i], there ? &seg_->stage(int(i)) : nullptr, f));
  }
  // The expert groups' members, after the stages (the segment's order).
  int m = 0;
  for (size_t i = 0; i < plan.size(); ++i)
    for (size_t k = 0; k < plan[i].members.size(); ++k, ++m) {
      const bool there = seg_ && m < seg_->n_members();
      stages.push_back(process_json(plan.size() + size_t(m), int(i), int(k + 1), plan[i].members[k],
                                    there ? &seg_->member(m) : nullptr, f));
    }
  const char* phase = !seg_ || f.all_starting         ? "starting stages"
                      : f.all_ready                   ? "ready"
                      : f.any_loading || !f.all_paged ? "loading weights"
                      : f.any_joining                 ? "joining workers"
                                                      : "allocating KV cache";
  return {{"phase", phase}, {"elapsed_s", elapsed}, {"stages", stages}};
}

std::string LoadingMonitor::log_line() {
  json j = snapshot();
  std::string out =
      fmt::format("{} ({:.1f} s)", j["phase"].get<std::string>(), j["elapsed_s"].get<double>());
  for (const auto& st : j["stages"]) {
    const int member = st["member"].get<int>();
    if (st.contains("host")) {
      out += fmt::format("; stage {} ({}): {} on {}", st["index"].get<size_t>(),
                         st["layers"].get<std::string>(), st["status"].get<std::string>(),
                         st["host"].get<std::string>());
      continue;
    }
    out += fmt::format("; stage {} ({}): {}, {:.1f}/{:.1f} MiB, {}/{} layers",
                       member > 0 ? fmt::format("{}.{}", st["position"].get<int>(), member)
                                  : fmt::format("{}", st["index"].get<size_t>()),
                       st["layers"].get<std::string>(), st["status"].get<std::string>(),
                       double(st["bytes_loaded"].get<uint64_t>()) / 1048576.0,
                       double(st["bytes_total"].get<uint64_t>()) / 1048576.0,
                       st["layers_loaded"].get<int>(), st["layers_total"].get<int>());
  }
  return out;
}

}  // namespace kvasir
