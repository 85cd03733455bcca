#include "daemon/supervisor/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/check.h"
#include "base/log.h"
#include "daemon/supervisor/kv_split.h"
#include "daemon/supervisor/remote.h"

namespace kvasir {

static_assert(kMaxPlanProcesses == ipc::kMaxStages,
              "every process of a plan has a StageShared slot in the segment");

namespace {

// The plan's hosts as ipc::StagePlan::host numbers them: this one ("") is
// 0, each worker 1.. in the order the stages first name it.
int32_t host_number(const std::vector<StageCfg>& st, const std::string& host) {
  if (host.empty()) return 0;
  std::vector<std::string> seen;
  for (const StageCfg& s : st)
    if (!s.host.empty() && std::find(seen.begin(), seen.end(), s.host) == seen.end())
      seen.push_back(s.host);
  return int32_t(std::find(seen.begin(), seen.end(), host) - seen.begin()) + 1;
}

void fill_stage_plan(const StageCfg& s, int32_t host, ipc::StagePlan& out) {
  out.host = host;
  out.first = s.first;
  out.last = s.last;
  out.threads = s.threads;
  out.experts_first = s.experts_first;
  out.experts_last = s.experts_last;
  std::snprintf(out.device, sizeof out.device, "%s", s.device.c_str());
  KV_CHECK(s.cpus.size() < sizeof out.cpus, "stages: cpus \"{}\" is longer than {} characters",
           s.cpus, sizeof out.cpus - 1);
  std::snprintf(out.cpus, sizeof out.cpus, "%s", s.cpus.c_str());
}

// Expert groups (docs/expert-groups.md): every group's members, after the
// stages, in position then range order; the model's top-k sizes their areas.
void fill_members(const std::vector<StageCfg>& st, const ModelConfig& m, ipc::SegmentParams& p) {
  for (size_t i = 0; i < st.size(); ++i)
    for (size_t k = 0; k < st[i].members.size(); ++k) {
      ipc::MemberPlan& mp = p.members[p.n_members++];
      mp.position = int32_t(i);
      mp.index = int32_t(k + 1);
      fill_stage_plan(st[i].members[k], host_number(st, st[i].host), mp.plan);
    }
  if (p.n_members > 0) p.moe_top_k = m.n_experts_used;
}

}  // namespace

ipc::SegmentParams Supervisor::params_for(const Config& cfg, const ModelConfig& m) {
  ipc::SegmentParams p;
  const auto& st = cfg.plan.stages;
  KV_CHECK(cfg.plan.processes() <= ipc::kMaxStages,
           "stages: {} processes (stages and group members), at most {}", cfg.plan.processes(),
           ipc::kMaxStages);
  p.n_stages = int32_t(st.size());
  const int64_t ctx = m.context_length > 0 ? m.context_length : 4096;
  p.dims.max_rows = cfg.plan.max_rows;
  p.dims.max_tokens = cfg.plan.max_tokens;
  p.dims.max_table =
      int32_t(std::min<int64_t>((ctx + cfg.kv.block_size - 1) / cfg.kv.block_size, 1 << 16));
  p.dims.hidden = m.hidden;
  p.dims.inflight = cfg.plan.inflight();
  p.dims.tables = has_sliding_group(cfg, m) ? 2 : 1;
  p.block_size = cfg.kv.block_size;
  p.kv_f32 = cfg.kv.dtype == "f32";
  p.kv_memory = cfg.kv.memory;
  p.kv_gpu_util = cfg.kv.gpu_memory_utilization;
  p.cuda_graphs = cfg.cuda.graphs ? 1 : 0;
  p.cuda_quantize = cfg.cuda.quantize == "fp8" ? 1 : 0;
  p.spin_ns = int64_t(cfg.plan.spin_us) * 1000;
  for (size_t i = 0; i < st.size(); ++i)
    fill_stage_plan(st[i], host_number(st, st[i].host), p.stages[i]);
  fill_members(st, m, p);
  // The grammar table (ipc/grammar_table.h): an entry for every row the ring
  // can hold at once, each large enough for the biggest spec the API takes
  // in its wire form (grammar::encode_spec: a few bytes per choice more).
  if (cfg.grammar.enabled) {
    p.grammar_entries = std::min(p.dims.inflight * p.dims.max_rows, 1 << 16);
    p.grammar_capacity = uint32_t(grammar_entry_capacity(cfg.grammar));
    p.grammar_workers = cfg.grammar.workers;
    p.grammar_cache = cfg.grammar.cache_capacity;
    p.grammar_compile_timeout_ms = uint32_t(std::lround(cfg.grammar.compile_timeout_s * 1000));
    // The tail finds forced tokens only where the scheduler drafts them.
    if (cfg.speculative.method != "none" && cfg.speculative.grammar_forced)
      p.forced_drafts = std::min(cfg.speculative.max_draft, ipc::kMaxForced);
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

Supervisor::~Supervisor() {
  stop();
}

namespace {
// pidfd_open(2) (Linux 5.3): a descriptor that polls readable when the
// process exits. -1 where the kernel lacks it: the monitor then finds deaths
// by waitpid at its tick instead.
int pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
  return int(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}
}  // namespace

std::vector<pid_t> Supervisor::pids() const {
  std::lock_guard lk(mu_);
  return pids_;
}

RingHealth Supervisor::health() const {
  std::lock_guard lk(mu_);
  RingHealth h = health_;
  for (const auto& l : links_) h.links.push_back(l->health());
  return h;
}

void Supervisor::wake_bridge() {
  if (seg_) seg_->ring(seg_->n_stages()).not_empty.ring();
}

pid_t Supervisor::spawn(int s, const std::string& inherit) {
  std::string stage_arg = std::to_string(s);
  std::string level_arg = log::level_name(log::level());  // the stage logs at the daemon's level
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    // Child: nothing but exec (no allocation-heavy work after fork).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(120);
    const char* argv[] = {"kvasird",     "--stage",     stage_arg.c_str(), "--segment",
                          name_.c_str(), "--log-level", level_arg.c_str(), nullptr,
                          nullptr,       nullptr};
    if (!inherit.empty()) {
      argv[7] = "--simd-inherit";
      argv[8] = inherit.c_str();
    }
    execv(opt_.exe.c_str(), const_cast<char* const*>(argv));
    _exit(127);
  }
  return pid;
}

ipc::StageShared& Supervisor::slot(int p) {
  const int S = seg_->n_stages();
  return p < S ? seg_->stage(p) : seg_->member(p - S);
}

int Supervisor::link_of(int p) const {
  if (links_.empty()) return -1;
  const int S = seg_->n_stages();
  const int at = p < S ? p : seg_->params().members[p - S].position;
  for (size_t i = 0; i < links_.size(); ++i)
    if (at >= links_[i]->first_remote() && at < links_[i]->end()) return int(i);
  return -1;
}

std::string Supervisor::proc_name(int p) const {
  if (!seg_) return fmt::format("process {}", p);
  const int S = seg_->n_stages();
  if (p < S) return fmt::format("stage {}", p);
  const ipc::MemberPlan& mp = seg_->params().members[p - S];
  return fmt::format("stage {} member {}", mp.position, mp.index);
}

std::string Supervisor::describe_exit(int stage, int status) {
  std::string err = seg_ ? std::string(slot(stage).error,
                                       strnlen(slot(stage).error, sizeof ipc::StageShared::error))
                         : std::string();
  std::string how = WIFEXITED(status) ? fmt::format("exited with status {}", WEXITSTATUS(status))
                    : WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                          : "ended";
  return err.empty() ? fmt::format("{} {}", proc_name(stage), how)
                     : fmt::format("{}: {} ({})", proc_name(stage), err, how);
}

void Supervisor::start() {
  KV_CHECK(!seg_, "supervisor already started");
  seg_ = ipc::Segment::create(name_, params_for(cfg_, model_));
  for (const RemoteRun& run : cfg_.plan.remote_runs())
    links_.push_back(std::make_unique<WorkerLink>(cfg_, *seg_, run));
  // Every process: the ring's stages, then the expert groups' members
  // (process index n_stages + m, which `--stage` takes as member m). A
  // remote stage or member has no process here (pid -1): the worker runs it.
  const int S = seg_->n_stages() + seg_->n_members();
  watch_.resize(size_t(S));
  for (int s = 0; s < S; ++s) {
    pid_t pid = remote(s) ? -1 : spawn(s);
    KV_CHECK(remote(s) || pid >= 0, "fork for {}: {}", proc_name(s), std::strerror(errno));
    pids_.push_back(pid);
  }
  // The workers load their stages while these load: each join runs beside.
  std::atomic<bool> join_quit{false};
  std::vector<int64_t> capacity(links_.size(), 0);
  std::vector<Status> joined(links_.size());
  std::vector<std::thread> joiners;
  for (size_t i = 0; i < links_.size(); ++i)
    joiners.emplace_back([&, i] { joined[i] = links_[i]->join(join_quit, &capacity[i]); });
  auto fail = [&](const std::string& msg) {
    join_quit = true;
    for (std::thread& t : joiners)
      if (t.joinable()) t.join();
    stop();
    KV_FAIL("{}", msg);
  };

  // Wait for the capacities, then the ready flags.
  const int64_t deadline = ipc::now_ns() + int64_t(opt_.start_timeout_s * 1e9);
  wait_started(ipc::kStageSized, "its KV capacity", deadline, fail);
  for (std::thread& t : joiners) t.join();
  for (const Status& j : joined)
    if (!j.ok()) fail(j.message());
  split_blocks(capacity);
  for (const auto& l : links_) {
    const Status s = l->finish_join({kv_blocks_, kv_blocks_swa_});
    if (!s.ok()) fail(fmt::format("worker {}: {}", l->host(), s.message()));
  }
  wait_started(ipc::kStageReady, "ready", deadline, fail);
  for (int s = 0; s < S; ++s)
    if (remote(s)) slot(s).status.store(ipc::kStageReady);
  for (const auto& l : links_) {
    l->start_relay();  // in place of its stages
    KV_LOG_INFO("supervisor", "worker {} ready: stages {}..{} serve there", l->host(),
                l->first_remote(), l->end() - 1);
  }

  const int64_t now = ipc::now_ns();
  for (int s = 0; s < S; ++s) {
    watch_[s].pidfd = remote(s) ? -1 : pidfd_open(pids_[s]);
    watch_[s].hang_watch = ipc::HangWatch(size_t(opt_.recovery.watchdog_history));
    watch_[s].hang_watch.reset(now);
  }
  monitor_ = std::thread([this] { monitor(); });
}

// Until every local process reports `want`; a failed or exited one, or
// the deadline, ends the start-up through fail (which throws).
void Supervisor::wait_started(uint32_t want, const char* what, int64_t deadline,
                              const std::function<void(const std::string&)>& fail) {
  const int S = int(pids_.size());
  for (;;) {
    uint32_t seen = seg_->header().state.seen();
    int done = 0;
    for (int s = 0; s < S; ++s) {
      if (remote(s)) {
        ++done;
        continue;
      }
      uint32_t st = slot(s).status.load();
      if (st == ipc::kStageFailed) {
        int status = 0;
        waitpid(pids_[s], &status, 0);
        pids_[s] = -1;
        fail(describe_exit(s, status));
      }
      done += st >= want;
    }
    if (done == S) return;
    if (auto ex = reap_starting()) fail(ex->error);
    if (ipc::now_ns() > deadline) {
      int slow = 0;
      while (slow < S && (remote(slow) || slot(slow).status.load() >= want)) ++slow;
      fail(fmt::format("{} did not report {} within {} s", proc_name(slow), what,
                       opt_.start_timeout_s));
    }
    seg_->header().state.wait(seen, 50'000'000);
  }
}

// The block counts from every stage's capacity (the stages' KV only:
// members hold none; a worker's stages count with the smallest capacity
// among them, which it reported), published in the segment.
void Supervisor::split_blocks(const std::vector<int64_t>& capacity) {
  std::vector<StageKv> kv;
  for (int s = 0; s < seg_->n_stages(); ++s) {
    const ipc::StagePlan& plan = seg_->params().stages[s];
    const int l = link_of(s);
    StageKv k{l >= 0 ? capacity[size_t(l)] : seg_->stage(s).capacity_blocks.load(), 0, 0};
    for (int32_t il = plan.first; il <= plan.last; ++il)
      (model_.layer_slides(il) ? k.sliding_layers : k.full_layers)++;
    kv.push_back(k);
  }
  const KvSplit split = split_kv(kv, sliding_want(cfg_, model_));
  kv_blocks_ = split.full;
  kv_blocks_swa_ = split.sliding;
  if (kv_blocks_swa_ > 0)
    KV_LOG_INFO("supervisor", "KV pools: {} blocks for the full-attention layers, {} for the "
                "sliding-window ones", kv_blocks_, kv_blocks_swa_);
  seg_->header().kv_blocks_swa.store(kv_blocks_swa_);  // before kv_blocks, which stages wait on
  seg_->header().kv_blocks.store(kv_blocks_);
  seg_->header().state.ring();
}

// Start-up only (the monitor is not running yet).
std::optional<StageExit> Supervisor::reap_starting() {
  for (size_t s = 0; s < pids_.size(); ++s) {
    if (pids_[s] <= 0) continue;
    int status = 0;
    if (waitpid(pids_[s], &status, WNOHANG) == pids_[s]) {
      pids_[s] = -1;
      slot(int(s)).status.store(ipc::kStageDead);
      return StageExit{int(s), describe_exit(int(s), status)};
    }
  }
  return std::nullopt;
}

void Supervisor::on_death(int s, const std::string& why, int64_t now) {
  Watch& w = watch_[s];
  pids_[s] = -1;
  if (w.pidfd >= 0) close(w.pidfd);
  w.pidfd = -1;
  auto& st = slot(s);
  const bool member = s >= seg_->n_stages();
  if (st.status.load() != ipc::kStageStopped) st.status.store(ipc::kStageDead);
  // What it held is gone with it: the drain check must not wait for it.
  if (!member)
    st.passed.store(seg_->ring(s).tail.load(std::memory_order_acquire), std::memory_order_release);
  ipc::end_accounting(st);  // not serving: no running part in its shares
  seg_->header().state.ring();
  record_loss(s, w.hang.empty() ? why : w.hang + " (" + why + ")", now);
  w.hang.clear();
}

// A worker's link ended (its relay's thread has returned): the stages and
// members of its run r..e-1 are lost as one, like a dead stage r; the other
// links serve on. What ring r's relay took and sent is gone with the
// worker: the drain check must not wait for it.
void Supervisor::on_link_loss(int link, const std::string& why, int64_t now) {
  for (int s = 0; s < int(watch_.size()); ++s)
    if (link_of(s) == link && slot(s).status.load() != ipc::kStageStopped)
      slot(s).status.store(ipc::kStageDead);
  const int r = links_[size_t(link)]->first_remote();
  seg_->stage(r).passed.store(seg_->ring(r).tail.load(std::memory_order_acquire),
                              std::memory_order_release);
  seg_->header().state.ring();
  record_loss(r, why, now);
}

void Supervisor::record_loss(int s, const std::string& why, int64_t now) {
  Watch& w = watch_[s];
  // A member holds no batch and no KV: its loss is no new epoch (its leader
  // waits and its successor answers the open request, docs/expert-groups.md).
  const bool member = s >= seg_->n_stages();
  (member ? health_.member_losses : health_.faults)++;
  health_.serving = false;
  health_.last_fault = why;
  KV_LOG_WARN("supervisor", "{}", health_.last_fault);
  const RecoveryOptions& r = opt_.recovery;
  const auto window_ns = int64_t(r.restart_window_s * 1e9);
  while (!losses_.empty() && now - losses_.front() > window_ns) losses_.pop_front();
  losses_.push_back(now);
  if (int(losses_.size()) > r.max_restarts) {
    health_.failed =
        r.max_restarts == 0
            ? health_.last_fault
            : fmt::format(
                  "unhealthy: {} stage losses within {:g} s (limit {}), not "
                  "restarting; last: {}",
                  losses_.size(), r.restart_window_s, r.max_restarts, health_.last_fault);
    KV_LOG_ERROR("supervisor", "{}", health_.failed);
    return;
  }
  double delay = r.backoff_s;
  for (size_t i = 1; i < losses_.size() && delay < r.backoff_max_s; ++i) delay *= 2;
  w.restart_at = now + int64_t(std::min(delay, r.backoff_max_s) * 1e9);
  w.fault_no = member ? 0 : health_.faults;
}

// The watchdog (ipc/hang_watch.h) over the processes here: a hung one is
// SIGKILLed (which ends a SIGSTOPped process too), and its death, seen by
// the monitor, is a loss whose text says why.
void Supervisor::watchdog(int64_t now) {
  const ipc::HangLimits limits = watchdog_limits(opt_.recovery);
  for (size_t s = 0; s < pids_.size(); ++s) {
    Watch& w = watch_[s];
    if (pids_[s] <= 0) continue;
    ipc::HangSample smp = ipc::sample_process(*seg_, int(s));
    smp.watched = smp.watched && w.restart_at <= 0;
    const auto hang =
        w.hang_watch.look(limits, smp, now, [&] { return ipc::process_cpu_ticks(pids_[s]); });
    if (!hang || !w.hang.empty()) continue;
    w.hang = hang->text(proc_name(int(s)), limits);
    kill(pids_[s], SIGKILL);
  }
}

// The lost processes whose back-off has passed, once the bridge has
// started the new epoch: started again (the worker's stages: joined again).
void Supervisor::restart_due(int64_t now) {
  const int S = int(watch_.size());
  for (int s = 0; s < S; ++s) {
    Watch& w = watch_[s];
    if (w.restart_at <= 0 || now < w.restart_at) continue;
    // The bridge must have started the new epoch first: the new process
    // would otherwise take a batch of the dead one for live work.
    if (seg_->header().epoch.load(std::memory_order_acquire) < w.fault_no) continue;
    w.restart_at = 0;
    if (const int l = link_of(s); l >= 0) {  // a worker's stages: join it again (remote.h)
      links_[size_t(l)]->rejoin();
      health_.restarts++;
      KV_LOG_INFO("supervisor", "rejoining worker {}", links_[size_t(l)]->host());
      continue;
    }
    auto& st = slot(s);
    // A fresh StageShared for the new process; the stats go on counting.
    st.status.store(ipc::kStageStarting);
    st.pid.store(0);
    st.capacity_blocks.store(0);
    std::memset(st.error, 0, sizeof st.error);
    // The new process adopts the dead one's kernel choices (a measured
    // choice may cross SIMD families from one process to the next, and
    // the restarted ring would then give other tokens), then publishes its own.
    const std::string inherit = ipc::read_stage_simd(st);
    ipc::write_stage_simd(st, "");
    pid_t pid = spawn(s, inherit);
    if (pid < 0) {
      on_death(s, fmt::format("{}: fork: {}", proc_name(s), std::strerror(errno)), now);
      continue;
    }
    pids_[s] = pid;
    w.pidfd = pidfd_open(pid);
    w.hang_watch.reset(now);
    health_.restarts++;
    KV_LOG_INFO("supervisor", "restarted {} (pid {})", proc_name(s), int(pid));
  }
}

void Supervisor::monitor() {
  const int S = int(watch_.size());
  std::vector<pollfd> fds;
  while (!quit_.load()) {
    fds.clear();
    {
      std::lock_guard lk(mu_);
      for (int s = 0; s < S; ++s)
        if (watch_[s].pidfd >= 0) fds.push_back(pollfd{watch_[s].pidfd, POLLIN, 0});
    }
    ::poll(fds.data(), nfds_t(fds.size()), int(opt_.recovery.tick_s * 1000));
    std::lock_guard lk(mu_);
    if (stopped_) continue;  // stop() owns the children now
    const int64_t now = ipc::now_ns();
    bool changed = false;
    for (int s = 0; s < S; ++s) {
      if (pids_[s] <= 0) continue;
      int status = 0;
      if (waitpid(pids_[s], &status, WNOHANG) == pids_[s]) {
        on_death(s, describe_exit(s, status), now);
        changed = true;
      }
    }
    for (size_t i = 0; i < links_.size(); ++i) {
      std::string lost;
      if (!links_[i]->take_loss(&lost)) continue;
      on_link_loss(int(i), lost, now);
      changed = true;
    }
    if (!health_.failed.empty()) {
      if (changed) wake_bridge();
      continue;
    }
    watchdog(now);
    restart_due(now);
    bool serving = true;
    for (int s = 0; s < S; ++s) {
      const int l = link_of(s);
      const bool up = l >= 0 ? links_[size_t(l)]->serving() : pids_[s] > 0;
      if (l >= 0 && up && slot(s).status.load() == ipc::kStageDead)
        slot(s).status.store(ipc::kStageReady);  // rejoined
      serving = serving && up && slot(s).status.load() == ipc::kStageReady;
    }
    if (serving != health_.serving || changed) {
      health_.serving = serving;
      wake_bridge();
    }
  }
}

void Supervisor::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopped_) return;
    stopped_ = true;  // the monitor leaves the children alone from now on
  }
  if (seg_) seg_->request_shutdown();
  for (const auto& l : links_) l->stop();  // each relay says Bye to its worker
  auto all_gone = [&] {
    std::lock_guard lk(mu_);  // pids() may read them meanwhile
    bool gone = true;
    for (auto& pid : pids_) {
      if (pid <= 0) continue;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid)
        pid = -1;
      else
        gone = false;
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
  // Only now: the monitor forked the restarted stages, and its exit would
  // SIGKILL them (PDEATHSIG) before they could stop cleanly.
  quit_ = true;
  if (monitor_.joinable()) monitor_.join();
  for (Watch& w : watch_)
    if (w.pidfd >= 0) close(w.pidfd), w.pidfd = -1;
  if (seg_) ipc::Segment::remove(name_);
}

}  // namespace kvasir
