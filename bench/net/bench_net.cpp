// bench_net: one host link (net/ucx_link.h) over loopback — frames/s and
// MB/s of Batch frames, and the round trip of a Ping/Pong.
//
//   bench_net [--big N] [--small N] [--pings N] [--host ADDR]
//
// One process, two threads: a listener (the leader's side) receives and a
// connector (a worker's side) sends, each on its own UCX worker, after the
// cluster key handshake. Batch frames of 256 tokens x 576 hidden f32 (576
// KiB, a prefill piece of the default model), of 8 tokens (18 KiB, a
// decode batch of 8) and of 2 tokens (4.5 KiB), each with a 1 KiB
// descriptor; the sender streams them and
// the receiver answers the phase's end with a Result, so the time covers
// every frame received and decoded. Then N Ping/Pong round trips: p50/p99.
// UCX_TLS picks the transports (tcp unless set, docs/multi-host.md).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "net/ucx_link.h"

using namespace kvasir;
using namespace kvasir::net;

namespace {

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The first line of a file that starts with prefix ("" when none).
std::string line_of(const char* path, const std::string& prefix) {
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(prefix, 0) == 0) return l;
  return "";
}

void die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "bench_net: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

// The leader's side: counts Batch frames, answers Ready with a Result
// carrying the count, Ping with Pong; ends on Bye.
void receive(UcxListener* listener) {
  std::unique_ptr<UcxLink> link;
  die(listener->accept(10000, &link), "accept");
  uint64_t count = 0;
  for (;;) {
    Frame f;
    die(link->recv(30000, &f), "receive");
    if (f.header.type == FrameType::kBatch) {
      ++count;
    } else if (f.header.type == FrameType::kReady) {
      die(link->send(Result{count, 0, {}}), "send result");
      count = 0;
    } else if (f.header.type == FrameType::kPing) {
      die(link->send(Pong{std::get<Ping>(f.payload).sent_ns}), "send pong");
    } else if (f.header.type == FrameType::kBye) {
      return;
    }
  }
}

void stream(UcxLink& link, uint32_t tokens, uint32_t hidden, int frames) {
  std::vector<float> boundary(size_t(tokens) * hidden, 0.25f);  // [tokens, hidden]
  const std::vector<uint8_t> desc(1024, 1);
  Batch b;
  b.msg_kind = 1, b.msg_version = 1, b.n_rows = 1, b.n_tokens = int32_t(tokens);
  b.descriptor = desc, b.boundary_tokens = tokens, b.hidden = hidden;
  b.boundary = ByteView(reinterpret_cast<const uint8_t*>(boundary.data()), boundary.size() * 4);
  const uint64_t sent0 = link.bytes_sent();
  const int64_t t0 = now_ns();
  for (int i = 0; i < frames; ++i) {
    b.batch_id = uint64_t(i) + 1, b.slot = uint32_t(i % 4);
    die(link.send(b), "send batch");
  }
  die(link.send(Ready{}), "send ready");
  Frame f;
  die(link.recv(30000, &f), "receive result");
  const double s = double(now_ns() - t0) / 1e9;
  const uint64_t got = std::get<Result>(f.payload).batch_id;
  if (got != uint64_t(frames)) std::fprintf(stderr, "bench_net: %lu of %d frames\n", got, frames);
  const double bytes = double(link.bytes_sent() - sent0);
  std::printf(
      "batch %4u x %u f32 (%7.1f KiB a frame): %6d frames in %.3f s: %9.0f frames/s  %8.1f MB/s\n",
      tokens, hidden, bytes / frames / 1024.0, frames, s, frames / s, bytes / s / 1e6);
}

void ping(UcxLink& link, int n) {
  std::vector<double> us;
  us.reserve(size_t(n));
  for (int i = 0; i < n + 100; ++i) {  // the first 100 warm up
    const int64_t t0 = now_ns();
    die(link.send(Ping{t0}), "send ping");
    Frame f;
    die(link.recv(30000, &f), "receive pong");
    if (i >= 100) us.push_back(double(now_ns() - t0) / 1e3);
  }
  std::sort(us.begin(), us.end());
  std::printf("ping/pong round trip, %d rounds: p50 %.1f us  p99 %.1f us  max %.1f us\n", n,
              us[us.size() / 2], us[us.size() * 99 / 100], us.back());
}

}  // namespace

int main(int argc, char** argv) {
  int big = 1000, small = 20000, pings = 2000;
  std::string host = "127.0.0.1";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--big")
      big = std::atoi(argv[i + 1]);
    else if (a == "--small")
      small = std::atoi(argv[i + 1]);
    else if (a == "--pings")
      pings = std::atoi(argv[i + 1]);
    else if (a == "--host")
      host = argv[i + 1];
    else
      return std::fprintf(stderr,
                          "usage: bench_net [--big N] [--small N] [--pings N] [--host ADDR]\n"),
             2;
  }
  const ClusterKey key(std::vector<uint8_t>(32, 0x42));
  LinkOptions leader;
  leader.role = Role::kLeader, leader.name = "leader";
  std::unique_ptr<UcxListener> listener;
  die(UcxListener::listen(host, 0, key, leader, &listener), "listen");
  std::thread receiver(receive, listener.get());
  LinkOptions worker;
  worker.role = Role::kWorker, worker.name = "worker";
  std::unique_ptr<UcxLink> link;
  die(UcxLink::connect(host, listener->port(), key, worker, &link), "connect");
  const char* tls = std::getenv("UCX_TLS");
  std::printf("%s\nload %s\nUCX_TLS=%s, loopback %s\n",
              line_of("/proc/cpuinfo", "model name").c_str(), line_of("/proc/loadavg", "").c_str(),
              tls ? tls : "tcp (default)", host.c_str());
  stream(*link, 256, 576, big);
  stream(*link, 8, 576, small);
  stream(*link, 2, 576, small);
  ping(*link, pings);
  die(link->close(), "close");
  receiver.join();
  return 0;
}
