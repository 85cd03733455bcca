// daemon/worker/worker.cpp — `kvasird --worker` (daemon/worker/worker.h).
#include "daemon/worker/worker.h"

#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "base/check.h"
#include "base/log.h"
#include "ipc/hang_watch.h"
#include "ipc/segment.h"
#include "net/ucx_link.h"
#include "relay/plan.h"
#include "relay/relay.h"

namespace kvasir {
namespace {

volatile std::sig_atomic_t g_stop = 0;
// The segment being served, so that a signal ends its relay and stages too
// (request_shutdown is stores and futex wake-ups: safe in a handler).
std::atomic<ipc::Segment*> g_serving{nullptr};
void on_signal(int) {
  g_stop = 1;
  if (ipc::Segment* seg = g_serving.load()) seg->request_shutdown();
}

constexpr int kStepMs = 60000;  // a leader silent this long in the join is dropped

// The next frame's Plan bytes, decoded by `decode`; a Refuse or anything
// else ends the join.
template <class T>
Status recv_plan(net::UcxLink& link, Status (*decode)(std::span<const uint8_t>, T*), T* out) {
  net::Frame f;
  KV_RETURN_IF_ERROR(link.recv(kStepMs, &f));
  if (const auto* p = std::get_if<net::Plan>(&f.payload)) return decode(p->bytes, out);
  return error_status(ErrorCode::kInvalidArgument, "the join: a {} frame, expected a plan",
                      net::frame_type_name(f.header.type));
}

pid_t spawn_stage(const std::string& exe, int s, const std::string& segment) {
  const std::string arg = std::to_string(s);
  const std::string level = log::level_name(log::level());
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(120);
  // UCX opens the listener's and the links' sockets without close-on-exec:
  // a stage that kept them would hold the worker's port after the worker
  // died, until it died too, and a worker started again at once could not
  // listen there. A stage needs no descriptor of ours.
  close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);
  execl(exe.c_str(), "kvasird", "--stage", arg.c_str(), "--segment", segment.c_str(), "--log-level",
        level.c_str(), (char*)nullptr);
  _exit(127);
}

// Process p of the segment: stage p, or (p >= n_stages) a group's member
// p - n_stages; its slot and its name in messages.
ipc::StageShared& slot(ipc::Segment& seg, int p) {
  return p < seg.n_stages() ? seg.stage(p) : seg.member(p - seg.n_stages());
}
std::string proc_name(const ipc::Segment& seg, int p) {
  if (p < seg.n_stages()) return fmt::format("stage {}", p);
  const ipc::MemberPlan& mp = seg.params().members[p - seg.n_stages()];
  return fmt::format("stage {} member {}", mp.position, mp.index);
}

// The processes this worker runs: stages r..e-1 of its plan, then the
// members of the expert groups among them (the config keeps a group on one
// side of a cut).
std::vector<int> worker_processes(const ipc::Segment& seg, const relay::WorkerPlan& plan) {
  const int r = plan.first_remote, e = plan.end;
  std::vector<int> procs;
  for (int s = r; s < e; ++s) procs.push_back(s);
  for (int m = 0; m < seg.n_members(); ++m) {
    const int at = seg.params().members[m].position;
    if (at >= r && at < e) procs.push_back(seg.n_stages() + m);
  }
  return procs;
}

// The session's processes (stages and members), reaped by a thread of
// their own. One that ends while the session is up (a crash, the OOM killer's pick) stops the
// segment, which ends the join or the relay: a relay still answering the
// leader's Pings in front of a dead stage would hold every request on the
// leader forever. The leader counts the stages lost and rejoins (a fresh
// session, fresh stages), as after a lost worker. A second thread runs the
// watchdog (ipc/hang_watch.h, with the leader's limits) over the stages
// every tick: a hung one (SIGSTOP, a deadlock) is SIGKILLed, and its death
// ends the session the same way, the text saying it hung and why. A lost
// member ends it too: the leader rejoins and recomputes what was on the
// worker, as for a stage (the leader's own supervisor restarts a member in
// place; here the session is the unit of recovery).
class StageWatch {
 public:
  // procs[i]: the process index that pids[i] runs.
  StageWatch(ipc::Segment& seg, std::vector<int> procs, std::vector<pid_t> pids,
             const ipc::HangLimits& limits)
      : seg_(seg),
        procs_(std::move(procs)),
        limits_(limits),
        pids_(std::move(pids)),
        alive_(pids_.size(), true),
        hangs_(pids_.size()),
        watches_(pids_.size()),
        thread_([this] { run(); }),
        watchdog_([this] { watch(); }) {}
  // The caller stops the segment first, so every stage ends.
  ~StageWatch() {
    thread_.join();
    {
      std::lock_guard lk(mu_);
      quit_ = true;
    }
    tick_.notify_all();
    watchdog_.join();
  }
  // "worker stage N killed by signal 9" for the first stage that ended on
  // its own; ok while none has.
  Status lost() const {
    std::lock_guard lk(mu_);
    return lost_;
  }

 private:
  static constexpr auto kTick = std::chrono::milliseconds(20);

  void run() {
    for (size_t left = pids_.size(); left > 0;) {
      // Seen, not yet reaped (WNOWAIT): the watchdog must not signal a pid
      // that is reaped and could be another process's already.
      siginfo_t info{};
      if (waitid(P_ALL, 0, &info, WEXITED | WNOWAIT) < 0) {
        if (errno == EINTR) continue;
        return;  // no child left
      }
      const pid_t p = info.si_pid;
      const auto it = std::find(pids_.begin(), pids_.end(), p);
      const size_t i = size_t(it - pids_.begin());
      if (it != pids_.end()) {
        std::lock_guard lk(mu_);
        alive_[i] = false;
      }
      int st = 0;
      waitpid(p, &st, 0);
      if (it == pids_.end()) continue;
      --left;
      if (!seg_.stopping()) on_lost(i, st);
    }
  }

  void on_lost(size_t i, int st) {
    const int s = procs_[i];
    const std::string err(slot(seg_, s).error, strnlen(slot(seg_, s).error, 511));
    const std::string how = WIFSIGNALED(st) ? fmt::format("killed by signal {}", WTERMSIG(st))
                                            : fmt::format("exited with status {}", WEXITSTATUS(st));
    {
      std::lock_guard lk(mu_);
      if (lost_.ok() && !hangs_[i].empty())
        lost_ = error_status(ErrorCode::kStageFailed, "worker {} ({})", hangs_[i], how);
      else if (lost_.ok())
        lost_ = error_status(ErrorCode::kStageFailed, "worker {} {}{}", proc_name(seg_, s), how,
                             err.empty() ? "" : ": " + err);
    }
    KV_LOG_WARN("worker", "{} {}: ending the session", proc_name(seg_, s), how);
    seg_.request_shutdown();
  }

  // Every tick until the destructor: the watchdog's look at each stage.
  void watch() {
    std::unique_lock lk(mu_);
    while (!quit_) {
      tick_.wait_for(lk, kTick, [this] { return quit_; });
      if (quit_ || seg_.stopping()) continue;
      const int64_t now = ipc::now_ns();
      for (size_t i = 0; i < pids_.size(); ++i) {
        if (!alive_[i] || !hangs_[i].empty()) continue;
        const int s = procs_[i];
        const auto hang = watches_[i].look(limits_, ipc::sample_process(seg_, s), now,
                                           [&] { return ipc::process_cpu_ticks(pids_[i]); });
        if (!hang) continue;
        hangs_[i] = hang->text(proc_name(seg_, s), limits_);
        KV_LOG_WARN("worker", "{}", hangs_[i]);
        kill(pids_[i], SIGKILL);  // SIGKILL ends a SIGSTOPped process too
      }
    }
  }

  ipc::Segment& seg_;
  const std::vector<int> procs_;
  const ipc::HangLimits limits_;
  const std::vector<pid_t> pids_;
  mutable std::mutex mu_;           // everything below
  std::vector<bool> alive_;         // not yet seen ended
  std::vector<std::string> hangs_;  // why the watchdog killed it ("": it did not)
  std::vector<ipc::HangWatch> watches_;
  bool quit_ = false;
  std::condition_variable tick_;
  Status lost_;
  std::thread thread_;
  std::thread watchdog_;
};

// Until every process of the worker reports `want`; a failed one's error
// otherwise.
Status wait_stages(ipc::Segment& seg, const StageWatch& watch, const relay::WorkerPlan& plan,
                   uint32_t want, const char* what) {
  const int64_t deadline = ipc::now_ns() + int64_t(kStepMs) * 1'000'000;
  const std::vector<int> procs = worker_processes(seg, plan);
  for (;;) {
    const uint32_t seen = seg.header().state.seen();
    size_t done = 0;
    for (int p : procs) {
      const ipc::StageShared& st = slot(seg, p);
      if (st.status.load() == ipc::kStageFailed)
        return error_status(ErrorCode::kStageFailed, "worker {}: {}", proc_name(seg, p),
                            std::string(st.error, strnlen(st.error, 511)));
      done += st.status.load() >= want;
    }
    if (done == procs.size()) return Status();
    KV_RETURN_IF_ERROR(watch.lost());
    if (g_stop || ipc::now_ns() > deadline)
      return error_status(ErrorCode::kTimeout, "worker stages did not report {}", what);
    seg.header().state.wait(seen, 50'000'000);
  }
}

// The join and the relay, with the session's stages started: until Bye,
// a lost link, or a stage that ended on its own (the watch's Status).
Status serve_stages(const WorkerArgs& a, net::UcxListener& listener, net::UcxLink& link,
                    ipc::Segment& seg, const StageWatch& watch, const relay::WorkerPlan& plan) {
  Status s = wait_stages(seg, watch, plan, ipc::kStageSized, "their KV capacity");
  if (s.ok()) {
    int64_t cap = INT64_MAX;
    for (int i = plan.first_remote; i < plan.end; ++i)
      cap = std::min<int64_t>(cap, seg.stage(i).capacity_blocks.load());
    s = link.send(net::Plan{relay::encode_sized({cap})});
  }
  relay::RingBlocks blocks;
  if (s.ok()) s = recv_plan(link, relay::decode_blocks, &blocks);
  if (s.ok()) {
    seg.header().kv_blocks_swa.store(blocks.kv_blocks_swa);  // before kv_blocks: stages wait on it
    seg.header().kv_blocks.store(blocks.kv_blocks);
    seg.header().state.ring();
    s = wait_stages(seg, watch, plan, ipc::kStageReady, "ready");
  }
  if (s.ok()) s = link.send(net::Ready{});
  if (s.ok()) {
    KV_LOG_INFO("worker", "serving leader '{}' ({} KV blocks)", link.peer_name(), blocks.kv_blocks);
    relay::RelayOptions o;
    o.first_remote = plan.first_remote, o.end = plan.end, o.listener = &listener;
    o.silence_ns = int64_t(a.link_timeout_s * 1e9);
    o.local_fault = [&watch] { return watch.lost(); };
    return relay::run_worker_relay(seg, link, o);
  }
  if (s.code() != ErrorCode::kIo) (void)link.send(net::Refuse{s.code(), s.message()});
  return s;
}

// One leader, from its plan to its Bye (or a lost link, or a lost stage).
Status serve_leader(const WorkerArgs& a, net::UcxListener& listener, net::UcxLink& link) {
  relay::WorkerPlan plan;
  KV_RETURN_IF_ERROR(recv_plan(link, relay::decode_plan, &plan));
  const std::string name = ipc::Segment::name_for("kvasird-worker " + a.listen);
  auto seg = ipc::Segment::create(name, plan.params);
  g_serving.store(seg.get());
  Status s;
  {
    std::vector<int> procs = worker_processes(*seg, plan);
    std::vector<pid_t> pids;
    for (int p : procs) pids.push_back(spawn_stage(a.exe, p, name));
    KV_LOG_INFO("worker", "leader '{}': stages {}..{} of {} starting ({} processes)",
                link.peer_name(), plan.first_remote, plan.end - 1, seg->n_stages(), procs.size());
    const StageWatch watch(*seg, std::move(procs), std::move(pids), plan.watchdog);
    // Destroyed before the watch, which then reaps the stages it stopped.
    struct Stop {
      ipc::Segment& seg;
      ~Stop() { seg.request_shutdown(); }
    } stop{*seg};
    s = serve_stages(a, listener, link, *seg, watch, plan);
  }
  g_serving.store(nullptr);
  ipc::Segment::remove(name);
  return s;
}

}  // namespace

int run_worker(const WorkerArgs& a) {
  const size_t colon = a.listen.rfind(':');
  const std::string port = colon == std::string::npos ? "" : a.listen.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535) {
    KV_LOG_ERROR("worker", "--listen wants ADDR:PORT, not '{}'", a.listen);
    return 2;
  }
  net::ClusterKey key;
  Status s = net::load_cluster_key(a.key_path, &key);
  std::unique_ptr<net::UcxListener> listener;
  net::LinkOptions o;
  o.role = net::Role::kWorker, o.name = "worker " + a.listen;
  if (s.ok())
    s = net::UcxListener::listen(a.listen.substr(0, colon), uint16_t(std::stoi(port)), key, o,
                                 &listener);
  if (!s.ok()) {
    KV_LOG_ERROR("worker", "{}", s.message());
    return 1;
  }
  signal(SIGINT, on_signal), signal(SIGTERM, on_signal), signal(SIGPIPE, SIG_IGN);
  KV_LOG_INFO("worker", "listening on {} for a leader", a.listen);
  for (int served = 0; !g_stop && (a.leaders == 0 || served < a.leaders);) {
    std::unique_ptr<net::UcxLink> link;
    s = listener->accept(500, &link);
    if (s.code() == ErrorCode::kTimeout || !s.ok()) continue;  // refusals are logged there
    ++served;
    try {
      s = serve_leader(a, *listener, *link);
    } catch (const Error& e) {
      s = Status(e.code(), e.message());
    }
    if (s.ok())
      KV_LOG_INFO("worker", "leader '{}' left", link->peer_name());
    else
      KV_LOG_WARN("worker", "leader '{}': {}", link->peer_name(), s.message());
  }
  return 0;
}

}  // namespace kvasir
