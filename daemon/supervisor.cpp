#include "daemon/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "base/check.h"

namespace kvasir {

ipc::SegmentParams Supervisor::params_for(const Config& cfg, const ModelConfig& m) {
  ipc::SegmentParams p;
  const auto& st = cfg.plan.stages;
  KV_CHECK(int(st.size()) <= ipc::kMaxStages, "stages: {} stages, at most {}", st.size(),
           ipc::kMaxStages);
  p.n_stages = int32_t(st.size());
  const int64_t ctx = m.context_length > 0 ? m.context_length : 4096;
  p.dims.max_rows = cfg.plan.max_rows;
  p.dims.max_tokens = cfg.plan.max_tokens;
  p.dims.max_table = int32_t(std::min<int64_t>((ctx + cfg.kv.block_size - 1) / cfg.kv.block_size,
                                               1 << 16));
  p.dims.hidden = m.hidden;
  p.dims.inflight = cfg.plan.inflight();
  p.block_size = cfg.kv.block_size;
  p.kv_f32 = cfg.kv.dtype == "f32";
  p.kv_memory = cfg.kv.memory;
  p.kv_gpu_util = cfg.kv.gpu_memory_utilization;
  for (size_t i = 0; i < st.size(); ++i) {
    p.stages[i].first = st[i].first;
    p.stages[i].last = st[i].last;
    p.stages[i].threads = st[i].threads;
    std::snprintf(p.stages[i].device, sizeof p.stages[i].device, "%s", st[i].device.c_str());
  }
  KV_CHECK(cfg.model.path.size() < sizeof p.model_path, "model.path: longer than {} bytes",
           sizeof p.model_path - 1);
  std::snprintf(p.model_path, sizeof p.model_path, "%s", cfg.model.path.c_str());
  return p;
}

Supervisor::Supervisor(const Config& cfg, const ModelConfig& model, SupervisorOptions opt)
    : cfg_(cfg), model_(model), opt_(std::move(opt)) {
  name_ = ipc::Segment::name_for(opt_.instance.empty() ? cfg_.server.socket : opt_.instance);
}

Supervisor::~Supervisor() { stop(); }

std::string Supervisor::describe_exit(int stage, int status) {
  std::string err = seg_ ? std::string(seg_->stage(stage).error,
                                       strnlen(seg_->stage(stage).error, sizeof ipc::StageShared::error))
                         : std::string();
  std::string how = WIFEXITED(status)   ? fmt::format("exited with status {}", WEXITSTATUS(status))
                    : WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                          : "ended";
  return err.empty() ? fmt::format("stage {} {}", stage, how)
                     : fmt::format("stage {}: {} ({})", stage, err, how);
}

void Supervisor::start() {
  KV_CHECK(!seg_, "supervisor already started");
  seg_ = ipc::Segment::create(name_, params_for(cfg_, model_));
  const int S = seg_->n_stages();
  const pid_t parent = getpid();
  for (int s = 0; s < S; ++s) {
    std::string stage_arg = std::to_string(s);
    pid_t pid = fork();
    KV_CHECK(pid >= 0, "fork for stage {}: {}", s, std::strerror(errno));
    if (pid == 0) {
      // Child: nothing but exec (no allocation-heavy work after fork).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(120);
      const char* argv[] = {"kvasird", "--stage", stage_arg.c_str(), "--segment",
                            name_.c_str(), nullptr};
      execv(opt_.exe.c_str(), const_cast<char* const*>(argv));
      _exit(127);
    }
    pids_.push_back(pid);
  }

  // Wait for the capacities, then the ready flags.
  const int64_t deadline = ipc::now_ns() + int64_t(opt_.start_timeout_s * 1e9);
  auto wait_all = [&](uint32_t want, const char* what) {
    for (;;) {
      uint32_t seen = seg_->header().state.seen();
      int done = 0;
      for (int s = 0; s < S; ++s) {
        uint32_t st = seg_->stage(s).status.load();
        if (st == ipc::kStageFailed) {
          int status = 0;
          waitpid(pids_[s], &status, 0);
          pids_[s] = -1;
          std::string msg = describe_exit(s, status);
          stop();
          KV_FAIL("{}", msg);
        }
        done += st >= want;
      }
      if (done == S) return;
      if (auto ex = poll()) {
        stop();
        KV_FAIL("{}", ex->error);
      }
      if (ipc::now_ns() > deadline) {
        int slow = 0;
        while (slow < S && seg_->stage(slow).status.load() >= want) ++slow;
        stop();
        KV_FAIL("stage {} did not report {} within {} s", slow, what, opt_.start_timeout_s);
      }
      seg_->header().state.wait(seen, 50'000'000);
    }
  };
  wait_all(ipc::kStageSized, "its KV capacity");
  int64_t blocks = INT32_MAX;
  for (int s = 0; s < S; ++s) blocks = std::min(blocks, seg_->stage(s).capacity_blocks.load());
  kv_blocks_ = int32_t(blocks);
  seg_->header().kv_blocks.store(kv_blocks_);
  seg_->header().state.ring();
  wait_all(ipc::kStageReady, "ready");
}

std::optional<StageExit> Supervisor::poll() {
  for (size_t s = 0; s < pids_.size(); ++s) {
    if (pids_[s] <= 0) continue;
    int status = 0;
    pid_t r = waitpid(pids_[s], &status, WNOHANG);
    if (r == pids_[s]) {
      pids_[s] = -1;
      if (seg_) {
        auto& st = seg_->stage(int(s)).status;
        if (st.load() != ipc::kStageStopped && st.load() != ipc::kStageFailed)
          st.store(ipc::kStageDead);
        seg_->header().state.ring();
      }
      if (!stopped_) return StageExit{int(s), describe_exit(int(s), status)};
    }
  }
  return std::nullopt;
}

void Supervisor::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (seg_) seg_->request_shutdown();
  auto all_gone = [&] {
    bool gone = true;
    for (auto& pid : pids_) {
      if (pid <= 0) continue;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) pid = -1;
      else gone = false;
    }
    return gone;
  };
  auto wait_for = [&](double seconds) {
    const int64_t until = ipc::now_ns() + int64_t(seconds * 1e9);
    while (!all_gone() && ipc::now_ns() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return all_gone();
  };
  if (!wait_for(opt_.stop_timeout_s)) {
    for (pid_t pid : pids_)
      if (pid > 0) kill(pid, SIGTERM);
    if (!wait_for(opt_.stop_timeout_s)) {
      for (pid_t pid : pids_)
        if (pid > 0) kill(pid, SIGKILL);
      wait_for(opt_.stop_timeout_s);
    }
  }
  if (seg_) ipc::Segment::remove(name_);
}

}  // namespace kvasir
