// daemon/worker/worker.cpp — `kvasird --worker` (daemon/worker/worker.h).
#include "daemon/worker/worker.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <variant>
#include <vector>

#include "base/check.h"
#include "base/log.h"
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
  execl(exe.c_str(), "kvasird", "--stage", arg.c_str(), "--segment", segment.c_str(), "--log-level",
        level.c_str(), (char*)nullptr);
  _exit(127);
}

// Until every stage r..S-1 reports `want`; a failed stage's error otherwise.
Status wait_stages(ipc::Segment& seg, int r, uint32_t want, const char* what) {
  const int64_t deadline = ipc::now_ns() + int64_t(kStepMs) * 1'000'000;
  for (;;) {
    const uint32_t seen = seg.header().state.seen();
    int done = 0;
    for (int s = r; s < seg.n_stages(); ++s) {
      const uint32_t st = seg.stage(s).status.load();
      if (st == ipc::kStageFailed)
        return error_status(ErrorCode::kStageFailed, "worker stage {}: {}", s,
                            std::string(seg.stage(s).error, strnlen(seg.stage(s).error, 511)));
      done += st >= want;
    }
    if (done == seg.n_stages() - r) return Status();
    if (g_stop || ipc::now_ns() > deadline)
      return error_status(ErrorCode::kTimeout, "worker stages did not report {}", what);
    seg.header().state.wait(seen, 50'000'000);
  }
}

// One leader, from its plan to its Bye (or a lost link).
Status serve_leader(const WorkerArgs& a, net::UcxListener& listener, net::UcxLink& link) {
  relay::WorkerPlan plan;
  KV_RETURN_IF_ERROR(recv_plan(link, relay::decode_plan, &plan));
  const int r = plan.first_remote;
  const std::string name = ipc::Segment::name_for("kvasird-worker " + a.listen);
  auto seg = ipc::Segment::create(name, plan.params);
  g_serving.store(seg.get());
  std::vector<pid_t> pids;
  for (int s = r; s < seg->n_stages(); ++s) pids.push_back(spawn_stage(a.exe, s, name));
  KV_LOG_INFO("worker", "leader '{}': stages {}..{} of {} starting", link.peer_name(), r,
              seg->n_stages() - 1, seg->n_stages());
  Status s = wait_stages(*seg, r, ipc::kStageSized, "their KV capacity");
  if (s.ok()) {
    int64_t cap = INT64_MAX;
    for (int i = r; i < seg->n_stages(); ++i)
      cap = std::min<int64_t>(cap, seg->stage(i).capacity_blocks.load());
    s = link.send(net::Plan{relay::encode_sized({cap})});
  }
  relay::RingBlocks blocks;
  if (s.ok()) s = recv_plan(link, relay::decode_blocks, &blocks);
  if (s.ok()) {
    seg->header().kv_blocks_swa.store(blocks.kv_blocks_swa);  // before kv_blocks: stages wait on it
    seg->header().kv_blocks.store(blocks.kv_blocks);
    seg->header().state.ring();
    s = wait_stages(*seg, r, ipc::kStageReady, "ready");
  }
  if (s.ok()) s = link.send(net::Ready{});
  if (s.ok()) {
    KV_LOG_INFO("worker", "serving leader '{}' ({} KV blocks)", link.peer_name(), blocks.kv_blocks);
    relay::RelayOptions o;
    o.first_remote = r, o.listener = &listener;
    o.silence_ns = int64_t(a.link_timeout_s * 1e9);
    s = relay::run_worker_relay(*seg, link, o);
  } else if (s.code() != ErrorCode::kIo) {
    (void)link.send(net::Refuse{s.code(), s.message()});
  }
  seg->request_shutdown();
  g_serving.store(nullptr);
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
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
