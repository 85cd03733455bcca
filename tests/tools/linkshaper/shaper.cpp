#include "shaper.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace kvasir::linkshaper {

namespace {
// Frames read from one socket before the loop looks at departures again:
// a receive burst must not hold back frames that are due.
constexpr int kRxBatch = 64;
// A bound on the learnt MACs (memory stays bounded whatever arrives).
constexpr size_t kMaxMacs = 4096;
// The VLAN tag a frame may carry on top of MTU + Ethernet header.
constexpr size_t kL2Overhead = 14 + 4;

uint64_t mac_at(const uint8_t* p) {
  uint64_t m = 0;
  for (int i = 0; i < 6; i++) m = (m << 8) | p[i];
  return m;
}

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}
}  // namespace

Nanos now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Nanos(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Shaper::Shaper(ShaperConfig config)
    : cfg_(std::move(config)), slot_bytes_(cfg_.mtu + kL2Overhead), rx_buf_(slot_bytes_ + 1) {
  for (size_t i = 0; i < cfg_.ports.size(); i++) {
    ports_.push_back(Port{cfg_.ports[i].ifname});
    // One RNG stream per line, so each direction's drops repeat on their own.
    lines_.emplace_back(cfg_.ports[i].egress, slot_bytes_, cfg_.seed * 0x9E3779B97F4A7C15ull + i);
  }
}

Shaper::~Shaper() {
  for (auto& p : ports_)
    if (p.fd >= 0) close(p.fd);
  if (sig_fd_ >= 0) close(sig_fd_);
}

std::string Shaper::open_port(Port& port) {
  port.ifindex = static_cast<int>(if_nametoindex(port.ifname.c_str()));
  if (!port.ifindex) return errno_text("interface " + port.ifname);
  // Protocol 0 receives nothing until bind() names the interface, so no
  // frame of another interface slips in between socket() and bind().
  port.fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (port.fd < 0) return errno_text("AF_PACKET socket (needs CAP_NET_RAW)");
  int one = 1;
  // Our own sends on this port must not come back as input.
  setsockopt(port.fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
  int rcvbuf = 8 << 20;  // a burst at line rate while the loop is busy sending
  if (setsockopt(port.fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
    setsockopt(port.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = port.ifindex;
  if (bind(port.fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) < 0)
    return errno_text("bind to " + port.ifname);
  // Frames between the hosts are addressed to the hosts' MACs, not ours.
  packet_mreq mr{};
  mr.mr_ifindex = port.ifindex;
  mr.mr_type = PACKET_MR_PROMISC;
  if (setsockopt(port.fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) < 0)
    return errno_text("promiscuous mode on " + port.ifname);
  return {};
}

std::string Shaper::open() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGUSR1, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  if (sigprocmask(SIG_BLOCK, &set, nullptr) < 0) return errno_text("sigprocmask");
  sig_fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sig_fd_ < 0) return errno_text("signalfd");
  // The default 50 us timer slack would be a floor on every delay's error.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  for (auto& p : ports_)
    if (auto err = open_port(p); !err.empty()) return err;
  if (!cfg_.ready_path.empty()) {
    std::ofstream(cfg_.ready_path) << getpid() << "\n";
  }
  return {};
}

void Shaper::forward(size_t from, std::span<const uint8_t> frame, Nanos now) {
  if (frame.size() < 14) return;
  const uint8_t* eth = frame.data();
  if (!(eth[6] & 1)) {  // a unicast source: learn where it lives
    if (macs_.size() >= kMaxMacs) macs_.clear();
    macs_[mac_at(eth + 6)] = from;
  }
  if (!(eth[0] & 1)) {
    auto it = macs_.find(mac_at(eth));
    if (it != macs_.end()) {
      if (it->second != from) lines_[it->second].push(frame, now);
      return;
    }
  }
  for (size_t i = 0; i < lines_.size(); i++)
    if (i != from) lines_[i].push(frame, now);
}

void Shaper::receive(size_t from) {
  Port& port = ports_[from];
  for (int i = 0; i < kRxBatch; i++) {
    sockaddr_ll sll{};
    socklen_t len = sizeof sll;
    // MSG_TRUNC: n is the frame's real size, so an oversize frame is seen
    // (and counted) rather than forwarded cut short.
    ssize_t n = recvfrom(port.fd, rx_buf_.data(), rx_buf_.size(), MSG_TRUNC,
                         reinterpret_cast<sockaddr*>(&sll), &len);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      std::fprintf(stderr, "kvasir-linkshaper: %s\n",
                   errno_text("receive on " + port.ifname).c_str());
      exit_code_ = 1;
      return;
    }
    if (sll.sll_pkttype == PACKET_OUTGOING) continue;
    port.rx_frames++;
    port.rx_bytes += static_cast<uint64_t>(n);
    size_t kept = std::min(static_cast<size_t>(n), rx_buf_.size());
    forward(from, std::span<const uint8_t>(rx_buf_.data(), kept), now_ns());
  }
}

void Shaper::send_due(Nanos now) {
  for (size_t i = 0; i < lines_.size(); i++) {
    for (auto f = lines_[i].due(now); !f.empty(); f = lines_[i].due(now)) {
      ssize_t r = send(ports_[i].fd, f.data(), f.size(), 0);
      lines_[i].pop(r == static_cast<ssize_t>(f.size()), now_ns());
    }
  }
}

Nanos Shaper::next_wakeup() const {
  Nanos next = -1;
  for (const auto& l : lines_) {
    Nanos d = l.next_departure();
    if (d >= 0 && (next < 0 || d < next)) next = d;
  }
  return next;
}

bool Shaper::wait(Nanos deadline) {
  std::vector<pollfd> fds{{sig_fd_, POLLIN, 0}};
  for (const auto& p : ports_) fds.push_back({p.fd, POLLIN, 0});
  timespec ts{};
  timespec* timeout = nullptr;  // nothing queued: sleep until a frame or signal
  if (deadline >= 0) {
    Nanos rem = deadline - now_ns() - static_cast<Nanos>(cfg_.spin_us * 1000);
    if (rem < 0) rem = 0;
    ts = {static_cast<time_t>(rem / 1'000'000'000), static_cast<long>(rem % 1'000'000'000)};
    timeout = &ts;
  }
  if (ppoll(fds.data(), fds.size(), timeout, nullptr) < 0) return errno == EINTR;
  if (fds[0].revents & POLLIN) {
    signalfd_siginfo si;
    while (read(sig_fd_, &si, sizeof si) == sizeof si) {
      if (si.ssi_signo != SIGUSR1) return false;
      write_stats();
    }
  }
  for (size_t i = 0; i < ports_.size(); i++)
    if (fds[i + 1].revents) receive(i);
  return exit_code_ == 0;
}

int Shaper::run() {
  while (true) {
    send_due(now_ns());
    if (!wait(next_wakeup())) break;
  }
  write_stats();
  return exit_code_;
}

std::string Shaper::stats_json() {
  nlohmann::json out = {{"ports", nlohmann::json::array()}};
  for (size_t i = 0; i < ports_.size(); i++) {
    Port& p = ports_[i];
    tpacket_stats st{};
    socklen_t len = sizeof st;
    // The kernel resets these on every read, so they are summed here.
    if (p.fd >= 0 && getsockopt(p.fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
      p.kernel_drops += st.tp_drops;
    const LineCounters& c = lines_[i].counters();
    const LinkParams& lp = lines_[i].params();
    out["ports"].push_back(
        {{"ifname", p.ifname},
         {"rx_frames", p.rx_frames},
         {"rx_bytes", p.rx_bytes},
         {"kernel_drops", p.kernel_drops},
         {"egress",
          {{"delay_ms", lp.delay_ms},
           {"jitter_ms", lp.jitter_ms},
           {"rate_bps", lp.rate_bps},
           {"drop", lp.drop},
           {"limit", lp.limit},
           {"frames_in", c.frames_in},
           {"bytes_in", c.bytes_in},
           {"frames_out", c.frames_out},
           {"bytes_out", c.bytes_out},
           {"dropped_random", c.dropped_random},
           {"dropped_full", c.dropped_full},
           {"dropped_oversize", c.dropped_oversize},
           {"send_errors", c.send_errors},
           {"queued", c.queued},
           {"queued_max", c.queued_max},
           {"late_us_mean", c.frames_out ? c.late_ns_sum / 1e3 / double(c.frames_out) : 0.0},
           {"late_us_max", c.late_ns_max / 1e3}}}});
  }
  return out.dump();
}

void Shaper::write_stats() {
  std::string text = stats_json() + "\n";
  if (cfg_.stats_path.empty()) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    return;
  }
  // Written whole, then renamed: a reader never sees half a file.
  std::string tmp = cfg_.stats_path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), cfg_.stats_path.c_str());
}

}  // namespace kvasir::linkshaper
