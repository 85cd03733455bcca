// net/ucx_link.h — one host link: frames (net/wire.h) over a UCX endpoint.
//
// A UcxListener waits on an address:port (ucp_listener_create with a
// sockaddr) and a connector reaches it (ucp_ep_create, client-server mode);
// either way the cluster key handshake (net/auth.h) runs first, and a link
// exists only once it has succeeded: until then nothing but handshake frames
// is read, and a peer that fails it is refused (a Refuse frame saying why)
// and dropped while the listener goes on accepting.
//
// Frames travel on UCX's *stream* API rather than active messages: a link
// is one ordered byte stream per endpoint, like TCP, so the receiver reads
// the fixed header first, checks it (magic, version, type, the payload
// against the frame limit) and only then allocates and reads the payload:
// an oversize or foreign frame is refused after 24 bytes, not after UCX
// buffered all of it, and no rendezvous or AM handler state is needed. The
// sender's sequence numbers are checked on receipt (in order, none lost).
//
// Waits sleep on the worker's event fd (ucp_worker_get_efd, ucp_worker_arm)
// with a deadline; they never spin. A peer that closes, dies or is
// unreachable ends the wait with a Status (kIo, naming the peer), never a
// hang: the endpoints use UCX's peer error handling.
//
// Transports: UCX_TLS=tcp unless the environment sets UCX_TLS (then UCX's
// own choice stands: e.g. UCX_TLS=rc,tcp for RDMA with TCP beside it).
//
// Threads: a listener and the links it accepted share one UCX worker and
// must be driven from one thread; a connected link has its own worker.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "net/auth.h"
#include "net/wire.h"

namespace kvasir::net {

struct LinkOptions {
  Role role = Role::kWorker;
  std::string name;  // this host's name, in the Hello and the peer's logs
  WireLimits limits;
  int handshake_timeout_ms = 5000;  // a peer silent this long in the handshake is dropped
  // A send the peer has not taken in this long ends the link (kTimeout): a
  // peer that stops reading must not hold its sender forever.
  int send_timeout_ms = 30000;
};

struct UcxWorker;  // a UCX context and worker (net/ucx_link.cpp)

class UcxLink {
 public:
  ~UcxLink();
  UcxLink(const UcxLink&) = delete;
  UcxLink& operator=(const UcxLink&) = delete;

  // Connects to host:port (a name or an address) and runs the handshake as
  // the connector. kIo: unreachable or lost; kUnauthenticated: the key
  // check failed either way; kTimeout: no answer in handshake_timeout_ms.
  static Status connect(const std::string& host, uint16_t port, const ClusterKey& key,
                        const LinkOptions& options, std::unique_ptr<UcxLink>* out);

  // One whole frame; returns once UCX has taken it (the buffer is free),
  // or kTimeout after send_timeout_ms, which ends the link.
  Status send(const Payload& p);
  // The next frame, waiting at most timeout_ms (< 0: no limit). Views in
  // *out point into the link's buffer and live until the next recv. On
  // kTimeout the read stays posted, so the next recv continues it; any
  // other error ends the link (every later call returns it again).
  Status recv(int timeout_ms, Frame* out);
  // Sends Bye and closes the endpoint after flushing what was sent.
  Status close();

  // Sleeping on the link from outside it (relay/: a ring's bell and the
  // link in one wait). event_fd(): UCX's wake-up fd, which any thread may
  // poll. arm(), from the link's thread once recv(0) has found nothing:
  // true when the fd will be signalled by the next event (a frame, a
  // peer's error, a connection to the listener sharing this worker), false
  // when events are already pending (recv(0) again first). The listener
  // and the links it accepted share one fd.
  int event_fd() const;
  Status arm(bool* armed);

  const std::string& peer_name() const { return peer_name_; }
  struct Op;  // one UCX request's completion (the callbacks in ucx_link.cpp fill it)
  bool failed() const { return !failure_.ok(); }
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }

 private:
  friend class UcxListener;
  UcxLink(std::shared_ptr<UcxWorker> worker, LinkOptions options);
  Status create_ep(const void* params);  // ucp_ep_params_t
  Status run_handshake(Handshake& hs);
  Status send_raw(const Payload& p, int64_t deadline_ns);
  void tell_refusal(const Payload& refuse);  // send() without the failed-link check
  Status fail(Status why);
  Status wait_op(Op& op, int64_t deadline_ns, const char* what);
  Status post_recv(void* buf, size_t n);
  Status recv_header(int64_t deadline_ns);
  Status recv_frame(int64_t deadline_ns, Frame* out);
  void release();
  void abort_ep();  // a forced close: every pending request completes now

  std::shared_ptr<UcxWorker> worker_;
  LinkOptions options_;
  void* ep_ = nullptr;  // ucp_ep_h
  std::unique_ptr<Op> recv_op_;
  bool header_ready_ = false;  // header_ holds a checked header, the payload is next
  uint8_t header_bytes_[kHeaderBytes] = {};
  FrameHeader header_;
  std::vector<uint8_t> payload_;
  std::vector<uint8_t> send_buf_;
  uint64_t send_seq_ = 0;
  uint64_t recv_seq_ = 0;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  std::string peer_name_;
  Status failure_;
  int ep_error_ = 0;  // ucs_status_t from the endpoint's error handler
  bool closed_ = false;
  bool peer_left_ = false;  // the peer sent Bye or Refuse
};

class UcxListener {
 public:
  ~UcxListener();
  UcxListener(const UcxListener&) = delete;
  UcxListener& operator=(const UcxListener&) = delete;

  // Listens on addr:port (port 0: one the kernel picks; port() says which).
  static Status listen(const std::string& addr, uint16_t port, const ClusterKey& key,
                       const LinkOptions& options, std::unique_ptr<UcxListener>* out);
  uint16_t port() const { return port_; }

  // The next connection, handshake done: waits at most timeout_ms for one
  // to arrive (kTimeout). A peer that fails the handshake returns its
  // Status (kUnauthenticated, kInvalidArgument, kTimeout, kIo) and is
  // dropped; the listener stays open for the next.
  Status accept(int timeout_ms, std::unique_ptr<UcxLink>* out);

 private:
  UcxListener(std::shared_ptr<UcxWorker> worker, const ClusterKey& key, LinkOptions options);
  static void on_conn_request(void* request, void* arg);

  std::shared_ptr<UcxWorker> worker_;
  ClusterKey key_;
  LinkOptions options_;
  void* listener_ = nullptr;  // ucp_listener_h
  uint16_t port_ = 0;
  std::vector<void*> pending_;  // ucp_conn_request_h, oldest first
};

}  // namespace kvasir::net
