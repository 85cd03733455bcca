// kvasir-linkshaper's engine: N network interfaces bridged at layer 2
// through one DelayLine per port (the frames leaving through it).
//
// One thread, one ppoll loop: every line is a FIFO with non-decreasing
// departures (delay_line.h), so the next wake-up is the earliest head over
// N lines, and nothing is shared between threads. A thread per direction
// would need a lock or a queue per pair of ports once N > 2, and on a
// small shared machine two threads only add wake-ups.
//
// For N > 2 the ports form a learning switch: a source MAC is learnt on
// the port it arrived on; a frame to a learnt MAC goes to that port only,
// any other (broadcast, multicast, unknown) to every other port. A frame
// is shaped once, on the line of the port it leaves by, so the delay
// between two hosts is that of the receiving host's port.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "delay_line.h"

namespace kvasir::linkshaper {

struct PortConfig {
  std::string ifname;
  LinkParams egress;  // the line of frames leaving through this port
};

struct ShaperConfig {
  std::vector<PortConfig> ports;
  size_t mtu = 1500;
  uint64_t seed = 1;
  std::string stats_path;  // counters as JSON on SIGUSR1 and at exit; empty: stdout
  std::string ready_path;  // written once every socket is bound
  double spin_us = 0;      // busy-wait the last microseconds before a departure
};

class Shaper {
 public:
  explicit Shaper(ShaperConfig config);
  ~Shaper();
  Shaper(const Shaper&) = delete;
  Shaper& operator=(const Shaper&) = delete;

  // Opens and binds the sockets; returns an error message, empty on success.
  std::string open();
  // Forwards until SIGTERM/SIGINT/SIGHUP; returns the process's exit code.
  int run();
  std::string stats_json();

 private:
  struct Port {
    std::string ifname;
    int fd = -1;
    int ifindex = 0;
    uint64_t rx_frames = 0;
    uint64_t rx_bytes = 0;
    uint64_t kernel_drops = 0;  // PACKET_STATISTICS: the socket's buffer overflowed
  };
  std::string open_port(Port& port);
  void receive(size_t from);
  void forward(size_t from, std::span<const uint8_t> frame, Nanos now);
  void send_due(Nanos now);
  Nanos next_wakeup() const;
  bool wait(Nanos deadline);
  void write_stats();

  ShaperConfig cfg_;
  size_t slot_bytes_;
  std::vector<Port> ports_;
  std::vector<DelayLine> lines_;               // [ports]: frames leaving through port i
  std::unordered_map<uint64_t, size_t> macs_;  // learnt source MAC -> port
  std::vector<uint8_t> rx_buf_;                // [slot_bytes + 1]
  int sig_fd_ = -1;
  int exit_code_ = 0;
  bool usr1_ = false;
};

Nanos now_ns();

}  // namespace kvasir::linkshaper
