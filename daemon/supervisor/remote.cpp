// daemon/supervisor/remote.cpp — the leader's half of the join
// (daemon/supervisor/remote.h).
#include "daemon/supervisor/remote.h"

#include <algorithm>
#include <chrono>
#include <variant>

#include "base/check.h"
#include "base/log.h"
#include "relay/relay.h"

namespace kvasir {
namespace {

constexpr int kSliceMs = 200;               // how often a wait looks at the stop flag
constexpr int64_t kPingNs = 1'000'000'000;  // the relay's Ping period, at most

// The next frame, waiting in slices until quit or the segment's shutdown
// (kStopping then).
Status recv_until(net::UcxLink& link, const std::atomic<bool>& quit, ipc::Segment& seg,
                  net::Frame* f) {
  for (;;) {
    Status s = link.recv(kSliceMs, f);
    if (s.code() != ErrorCode::kTimeout) return s;
    if (quit.load() || seg.stopping()) return Status(ErrorCode::kStopping, "stopping");
  }
}

// The Plan frame's bytes decoded by `decode`; the worker's Refuse (its
// stage's own error) or any other frame ends the join.
template <class T>
Status expect_plan(const net::Frame& f, Status (*decode)(std::span<const uint8_t>, T*), T* out) {
  if (const auto* p = std::get_if<net::Plan>(&f.payload)) return decode(p->bytes, out);
  if (const auto* r = std::get_if<net::Refuse>(&f.payload))
    return error_status(r->code, "the worker refused: {}", r->text);
  return error_status(ErrorCode::kInvalidArgument, "the join: a {} frame from the worker",
                      net::frame_type_name(f.header.type));
}

}  // namespace

std::string WorkerLink::describe(const Config& cfg) {
  const std::vector<RemoteRun> runs = cfg.plan.remote_runs();
  if (runs.empty()) return "";
  std::string where;
  int32_t at = 0;  // the first stage not yet described
  auto add = [&](int32_t first, int32_t end, const std::string& on) {
    if (first < end)
      where += fmt::format("{}{}-{} {}", where.empty() ? "" : ", ", first, end - 1, on);
  };
  for (const RemoteRun& run : runs) {
    add(at, run.first, "here");
    add(run.first, run.end, "on worker " + run.host);
    at = run.end;
  }
  add(at, int32_t(cfg.plan.stages.size()), "here");
  net::ClusterKey key;
  const Status s = net::load_cluster_key(cfg.cluster.key, &key);
  return fmt::format("hosts: stages {}; cluster key {}: {}", where, cfg.cluster.key,
                     s.ok() ? "usable" : s.message());
}

WorkerLink::WorkerLink(const Config& cfg, ipc::Segment& seg, const RemoteRun& run)
    : seg_(seg),
      r_(run.first),
      e_(run.end),
      host_(run.host),
      key_path_(cfg.cluster.key),
      join_timeout_s_(cfg.cluster.join_timeout_s),
      link_timeout_s_(cfg.cluster.link_timeout_s),
      watchdog_(watchdog_limits(cfg.recovery)) {
  KV_CHECK(r_ > 0 && e_ > r_ && e_ <= seg.n_stages(), "a worker link for stages {}..{} of {}", r_,
           e_ - 1, seg.n_stages());
  const size_t colon = host_.rfind(':');
  addr_ = host_.substr(0, colon);
  port_ = uint16_t(std::stoi(host_.substr(colon + 1)));  // checked by validate_cluster
}

WorkerLink::~WorkerLink() {
  stop();
}

void WorkerLink::set_error(const std::string& why) {
  std::lock_guard lk(mu_);
  last_error_ = why;
}

// Connects until it works, deadline_ns passes (< 0: no limit) or quit. A
// worker that refuses the key is not retried: that is no start-up race.
Status WorkerLink::connect(const std::atomic<bool>& quit, int64_t deadline_ns) {
  net::LinkOptions o;
  o.role = net::Role::kLeader, o.name = "leader";
  for (int attempt = 0;; ++attempt) {
    link_.reset();
    Status s = net::UcxLink::connect(addr_, port_, key_, o, &link_);
    if (s.ok()) return s;
    // Only a worker not up yet is worth waiting for: a refused key or
    // another wire version will not change by trying again.
    if (s.code() != ErrorCode::kIo && s.code() != ErrorCode::kTimeout)
      return error_status(s.code(), "worker {}: {}", host_, s.message());
    set_error(s.message());
    if (attempt % 25 == 0)
      KV_LOG_INFO("supervisor", "worker {}: not reachable yet ({}); trying again", host_,
                  s.message());
    for (int i = 0; i < 2 && !quit.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (quit.load() || seg_.stopping()) return Status(ErrorCode::kStopping, "stopping");
    // The limit the operator wrote, not what was left of it when this
    // connect began: a log that says 0.999999 s reads as a bug.
    if (deadline_ns >= 0 && ipc::now_ns() > deadline_ns)
      return error_status(ErrorCode::kTimeout, "worker {} did not answer within {:g} s: {}", host_,
                          join_timeout_s_, s.message());
  }
}

// The plan out, the worker's capacity back.
Status WorkerLink::exchange_plan(const std::atomic<bool>& quit, int64_t* capacity) {
  const relay::WorkerPlan plan{seg_.params(), r_, e_, watchdog_};
  KV_RETURN_IF_ERROR(link_->send(net::Plan{relay::encode_plan(plan)}));
  net::Frame f;
  KV_RETURN_IF_ERROR(recv_until(*link_, quit, seg_, &f));
  relay::WorkerSized sized;
  KV_RETURN_IF_ERROR(expect_plan(f, relay::decode_sized, &sized));
  *capacity = sized.capacity_blocks;
  return Status();
}

Status WorkerLink::join(const std::atomic<bool>& quit, int64_t* capacity) {
  Status s = net::load_cluster_key(key_path_, &key_);
  if (!s.ok()) return error_status(s.code(), "cluster.key: {}", s.message());
  const int64_t deadline = ipc::now_ns() + int64_t(join_timeout_s_ * 1e9);
  for (;;) {
    KV_RETURN_IF_ERROR(connect(quit, deadline));
    s = exchange_plan(quit, capacity);
    // A worker still serving a leader that went away (this one, restarted,
    // before the worker saw the old link end) says so: wait for it too.
    if (s.code() != ErrorCode::kUnavailable || ipc::now_ns() > deadline) break;
    set_error(s.message());
    KV_LOG_INFO("supervisor", "worker {}: {}; trying again", host_, s.message());
    link_.reset();
    for (int i = 0; i < 5 && !quit.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (s.ok())
    KV_LOG_INFO("supervisor", "worker {} ('{}') joined: stages {}..{} there", host_,
                link_->peer_name(), r_, e_ - 1);
  return s;
}

Status WorkerLink::finish_join(const relay::RingBlocks& blocks) {
  blocks_ = blocks;
  KV_RETURN_IF_ERROR(link_->send(net::Plan{relay::encode_blocks(blocks)}));
  net::Frame f;
  KV_RETURN_IF_ERROR(recv_until(*link_, quit_, seg_, &f));
  if (std::holds_alternative<net::Ready>(f.payload)) {
    joins_.fetch_add(1);
    return Status();
  }
  relay::RingBlocks ignored;
  Status s = expect_plan(f, relay::decode_blocks, &ignored);
  return s.ok() ? error_status(ErrorCode::kInvalidArgument, "the join: a plan, expected Ready") : s;
}

void WorkerLink::start_relay() {
  state_.store(kServing);
  thread_ = std::thread([this] { run_relay(); });
}

void WorkerLink::run_relay() {
  relay::RelayOptions o;
  o.first_remote = r_, o.end = e_;
  // Several Pings per silence window: one lost to a busy moment is no loss.
  o.silence_ns = int64_t(link_timeout_s_ * 1e9);
  o.ping_ns = std::min(kPingNs, o.silence_ns / 5);
  o.bytes_sent = &session_sent_, o.bytes_received = &session_received_;
  o.rtt_ns = &rtt_;
  Status s = relay::run_leader_relay(seg_, *link_, o);
  sent_.fetch_add(link_->bytes_sent()), received_.fetch_add(link_->bytes_received());
  session_sent_.store(0), session_received_.store(0);
  link_.reset();
  if (quit_.load() || seg_.stopping()) return;
  const std::string why = s.ok() ? "the worker left (Bye)" : s.message();
  set_error(why);
  state_.store(kLost);
  lost_.store(true);
}

bool WorkerLink::take_loss(std::string* why) {
  if (!lost_.exchange(false)) return false;
  std::lock_guard lk(mu_);
  *why = fmt::format("worker {} (stages {}..{}): {}", host_, r_, e_ - 1, last_error_);
  return true;
}

void WorkerLink::rejoin() {
  if (thread_.joinable()) thread_.join();  // the ended session's
  state_.store(kJoining);
  thread_ = std::thread([this] {
    for (int attempt = 0; !quit_.load() && !seg_.stopping(); ++attempt) {
      int64_t capacity = 0;
      Status s = connect(quit_, -1);
      if (s.ok()) s = exchange_plan(quit_, &capacity);
      if (s.ok() && capacity < blocks_.kv_blocks)
        s = error_status(ErrorCode::kOutOfMemory,
                         "worker {}: its stages hold {} KV blocks now, the ring uses {}", host_,
                         capacity, blocks_.kv_blocks);
      if (s.ok()) s = finish_join(blocks_);
      if (s.ok()) {
        KV_LOG_INFO("supervisor", "worker {} rejoined: stages {}..{} serve again", host_, r_,
                    e_ - 1);
        state_.store(kServing);
        run_relay();
        return;
      }
      if (s.code() == ErrorCode::kStopping) return;
      set_error(s.message());
      KV_LOG_WARN("supervisor", "worker {}: rejoin failed: {}; trying again", host_, s.message());
      link_.reset();
      for (int i = 0; i < 10 && !quit_.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

LinkHealth WorkerLink::health() const {
  LinkHealth h;
  h.host = host_;
  h.first_stage = r_, h.last_stage = e_ - 1;
  const int st = state_.load();
  h.state = st == kServing ? "serving" : st == kLost ? "lost" : "joining";
  h.joins = joins_.load();
  h.bytes_sent = sent_.load() + session_sent_.load();
  h.bytes_received = received_.load() + session_received_.load();
  h.rtt_ns = rtt_.load();
  std::lock_guard lk(mu_);
  h.last_error = last_error_;
  return h;
}

void WorkerLink::stop() {
  quit_.store(true);
  if (thread_.joinable()) thread_.join();
  link_.reset();
}

}  // namespace kvasir
