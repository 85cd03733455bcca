// net/ucx_link.cpp — frames over UCX stream endpoints, the handshake first.
#include "net/ucx_link.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "base/check.h"
#include "base/log.h"

namespace kvasir::net {

namespace {

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t deadline_after(int timeout_ms) {
  return timeout_ms < 0 ? INT64_MAX : now_ns() + int64_t(timeout_ms) * 1000000;
}

Status ucs_failed(ErrorCode code, const std::string& what, ucs_status_t st) {
  return Status(code, fmt::format("{}: {}", what, ucs_status_string(st)));
}

// addr:port as a sockaddr (getaddrinfo: a name or a numeric address).
Status resolve(const std::string& host, uint16_t port, sockaddr_storage* out, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC, hints.ai_socktype = SOCK_STREAM;
  if (host.empty()) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    return error_status(ErrorCode::kIo, "cannot resolve '{}': {}", host, gai_strerror(rc));
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return Status();
}

}  // namespace

// One context and one worker with its event fd. UCX_TLS=tcp unless the
// environment chose: TCP works on every host, and an operator with RDMA
// names it (docs/multi-host.md, "Transports").
struct UcxWorker {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int efd = -1;

  ~UcxWorker() {
    if (worker) ucp_worker_destroy(worker);
    if (context) ucp_cleanup(context);
  }

  static Status create(std::shared_ptr<UcxWorker>* out) {
    auto w = std::make_shared<UcxWorker>();
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) return ucs_failed(ErrorCode::kIo, "ucx: reading its configuration", st);
    if (std::getenv("UCX_TLS") == nullptr) ucp_config_modify(config, "TLS", "tcp");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP;
    st = ucp_init(&params, config, &w->context);
    ucp_config_release(config);
    if (st != UCS_OK) return ucs_failed(ErrorCode::kIo, "ucx: ucp_init", st);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(w->context, &wp, &w->worker);
    if (st != UCS_OK) return ucs_failed(ErrorCode::kIo, "ucx: ucp_worker_create", st);
    st = ucp_worker_get_efd(w->worker, &w->efd);
    if (st != UCS_OK) return ucs_failed(ErrorCode::kIo, "ucx: ucp_worker_get_efd", st);
    *out = std::move(w);
    return Status();
  }

  // Progresses until ready() or the deadline, sleeping on the event fd in
  // between. The sleep is capped so that a wake-up UCX failed to signal
  // costs at most that much, never a hang.
  Status wait(const std::function<bool()>& ready, int64_t deadline_ns, const char* what) {
    constexpr int kMaxSleepMs = 100;
    for (;;) {
      while (ucp_worker_progress(worker) != 0) {
      }
      if (ready()) return Status();
      const int64_t left = deadline_ns - now_ns();
      if (left <= 0) return error_status(ErrorCode::kTimeout, "{}: timed out", what);
      const ucs_status_t st = ucp_worker_arm(worker);
      if (st == UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress them
      if (st != UCS_OK) return ucs_failed(ErrorCode::kIo, "ucx: ucp_worker_arm", st);
      pollfd p{efd, POLLIN, 0};
      const int ms = int(std::min<int64_t>(kMaxSleepMs, (left + 999999) / 1000000));
      ::poll(&p, 1, ms);
    }
  }
};

struct UcxLink::Op {
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t length = 0;
  void* request = nullptr;  // UCX's handle while pending
};

namespace {

void on_send_done(void* /*request*/, ucs_status_t status, void* user) {
  auto* op = static_cast<UcxLink::Op*>(user);
  op->done = true, op->status = status;
}
void on_recv_done(void* /*request*/, ucs_status_t status, size_t length, void* user) {
  auto* op = static_cast<UcxLink::Op*>(user);
  op->done = true, op->status = status, op->length = length;
}
void on_ep_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  *static_cast<int*>(arg) = int(status);
}

}  // namespace

UcxLink::UcxLink(std::shared_ptr<UcxWorker> worker, LinkOptions options)
    : worker_(std::move(worker)), options_(std::move(options)), recv_op_(std::make_unique<Op>()) {}

UcxLink::~UcxLink() {
  release();
}

Status UcxLink::create_ep(const void* raw) {
  ucp_ep_params_t params = *static_cast<const ucp_ep_params_t*>(raw);
  params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = on_ep_error;
  params.err_handler.arg = &ep_error_;
  ucp_ep_h ep = nullptr;
  const ucs_status_t st = ucp_ep_create(worker_->worker, &params, &ep);
  if (st != UCS_OK) return ucs_failed(ErrorCode::kIo, "ucx: ucp_ep_create", st);
  ep_ = ep;
  return Status();
}

Status UcxLink::fail(Status why) {
  if (failure_.ok()) failure_ = why;
  return failure_;
}

// Waits for op; a peer error or a failed op ends the link.
Status UcxLink::wait_op(Op& op, int64_t deadline_ns, const char* what) {
  Status s = worker_->wait([&] { return op.done || ep_error_ != 0; }, deadline_ns, what);
  if (!s.ok()) return s;  // a timeout: op stays pending
  if (!op.done || op.status != UCS_OK) {
    const auto st = ucs_status_t(op.done && op.status != UCS_OK ? op.status : ep_error_);
    const std::string peer = peer_name_.empty() ? "the peer" : "'" + peer_name_ + "'";
    return fail(Status(ErrorCode::kIo, fmt::format("link to {} lost during {}: {}", peer, what,
                                                   ucs_status_string(st))));
  }
  if (op.request) ucp_request_free(op.request), op.request = nullptr;
  return Status();
}

Status UcxLink::send(const Payload& p) {
  if (!failure_.ok()) return failure_;
  return send_raw(p, deadline_after(options_.send_timeout_ms));
}

Status UcxLink::send_raw(const Payload& p, int64_t deadline_ns) {
  if (!ep_) return fail(Status(ErrorCode::kIo, "the link is closed"));
  // Two pieces, one stream send: the encoded fields, and a Batch's
  // boundary straight from the caller's memory (576 KiB not copied).
  send_buf_.clear();
  const ByteView tail = encode_frame_split(p, send_seq_++, send_buf_);
  ucp_dt_iov_t iov[2] = {{send_buf_.data(), send_buf_.size()},
                         {const_cast<uint8_t*>(tail.data()), tail.size()}};
  Op op;
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  rp.cb.send = on_send_done;
  rp.user_data = &op;
  rp.datatype = ucp_dt_make_iov();
  ucs_status_ptr_t r = ucp_stream_send_nbx(ucp_ep_h(ep_), iov, tail.empty() ? 1 : 2, &rp);
  if (UCS_PTR_IS_ERR(r))
    return fail(ucs_failed(ErrorCode::kIo, "ucx: stream send", UCS_PTR_STATUS(r)));
  bytes_sent_ += send_buf_.size() + tail.size();
  if (r == nullptr) return Status();
  op.request = r;
  Status s = wait_op(op, deadline_ns, "a send");
  if (!s.ok() && !op.done) {
    // A stream send cannot be cancelled, and op lives on this stack: close
    // the endpoint at once, which completes the send with an error. Part
    // of the frame may be out, so the link is over either way.
    abort_ep();
    (void)worker_->wait([&] { return op.done; }, now_ns() + 1000000000, "abort");
    s = fail(s);
  }
  if (op.request) ucp_request_free(op.request);
  return s;
}

void UcxLink::abort_ep() {
  if (!ep_) return;
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ucp_ep_h(ep_), &rp);
  ep_ = nullptr;
  if (r == nullptr || UCS_PTR_IS_ERR(r)) return;
  (void)worker_->wait([&] { return ucp_request_check_status(r) != UCS_INPROGRESS; },
                      now_ns() + 1000000000, "close");
  ucp_request_free(r);
}

Status UcxLink::post_recv(void* buf, size_t n) {
  if (!ep_) return fail(Status(ErrorCode::kIo, "the link is closed"));
  Op& op = *recv_op_;
  op = Op{};
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  rp.cb.recv_stream = on_recv_done;
  rp.user_data = &op;
  rp.flags = UCP_STREAM_RECV_FLAG_WAITALL;
  size_t length = 0;
  ucs_status_ptr_t r = ucp_stream_recv_nbx(ucp_ep_h(ep_), buf, n, &length, &rp);
  if (UCS_PTR_IS_ERR(r))
    return fail(ucs_failed(ErrorCode::kIo, "ucx: stream receive", UCS_PTR_STATUS(r)));
  if (r == nullptr) op.done = true, op.length = length;
  op.request = r;
  return Status();
}

Status UcxLink::recv_header(int64_t deadline_ns) {
  Op& op = *recv_op_;
  if (!op.request && !op.done) KV_RETURN_IF_ERROR(post_recv(header_bytes_, kHeaderBytes));
  KV_RETURN_IF_ERROR(wait_op(op, deadline_ns, "a receive"));
  op.done = false;
  Status s = decode_header(ByteView(header_bytes_, kHeaderBytes), options_.limits, &header_);
  if (!s.ok()) return fail(s);
  if (header_.seq != recv_seq_)
    return fail(error_status(ErrorCode::kInvalidArgument,
                             "wire: frame {} arrived where frame {} was due (lost or reordered)",
                             header_.seq, recv_seq_));
  header_ready_ = true;
  payload_.resize(header_.payload_bytes);
  if (header_.payload_bytes > 0) KV_RETURN_IF_ERROR(post_recv(payload_.data(), payload_.size()));
  return Status();
}

Status UcxLink::recv_frame(int64_t deadline_ns, Frame* out) {
  if (!failure_.ok()) return failure_;
  if (!header_ready_) KV_RETURN_IF_ERROR(recv_header(deadline_ns));
  if (header_.payload_bytes > 0) KV_RETURN_IF_ERROR(wait_op(*recv_op_, deadline_ns, "a receive"));
  *recv_op_ = Op{};
  header_ready_ = false;
  ++recv_seq_;
  bytes_received_ += kHeaderBytes + payload_.size();
  out->header = header_;
  Status s = decode_payload(header_, payload_, &out->payload);
  if (!s.ok()) return fail(s);
  return Status();
}

Status UcxLink::recv(int timeout_ms, Frame* out) {
  const bool was_failed = !failure_.ok();
  Status s = recv_frame(deadline_after(timeout_ms), out);
  if (s.ok()) {
    const FrameType t = out->header.type;
    peer_left_ = peer_left_ || t == FrameType::kBye || t == FrameType::kRefuse;
    if (t == FrameType::kHello || t == FrameType::kChallenge || t == FrameType::kProof)
      s = fail(error_status(ErrorCode::kInvalidArgument, "a {} frame after the handshake",
                            frame_type_name(t)));
  }
  // A frame this side refuses ends the link: the peer learns why once.
  const ErrorCode c = s.code();
  if (!was_failed && !s.ok() && c != ErrorCode::kTimeout && c != ErrorCode::kIo)
    tell_refusal(Refuse{c, s.message()});
  return s;
}

Status UcxLink::run_handshake(Handshake& hs) {
  const int64_t deadline = deadline_after(options_.handshake_timeout_ms);
  std::optional<Payload> next = hs.start();
  for (;;) {
    if (next) KV_RETURN_IF_ERROR(send_raw(*next, deadline));
    if (hs.done()) break;
    Frame f;
    Status s = recv_frame(deadline, &f);
    if (!s.ok()) {
      // Tell the peer why while the endpoint still works (best effort).
      if (s.code() != ErrorCode::kIo) tell_refusal(Refuse{s.code(), s.message()});
      return fail(s);
    }
    peer_left_ = f.header.type == FrameType::kRefuse;
    s = hs.on_frame(f.payload, &next);
    if (!s.ok()) {
      if (next) tell_refusal(*next);
      return fail(s);
    }
  }
  if (!hs.peer_name().empty()) peer_name_ = hs.peer_name();
  return Status();
}

// Sends a Refuse (best effort), then waits a little for the peer to hang
// up first: closing at once can reset the connection under the Refuse, and
// the peer would see "connection reset" instead of the reason.
void UcxLink::tell_refusal(const Payload& refuse) {
  constexpr int64_t kLingerNs = 500000000;
  if (!ep_ || ep_error_ != 0) return;
  if (!send_raw(refuse, now_ns() + kLingerNs).ok()) return;
  (void)worker_->wait([&] { return ep_error_ != 0; }, now_ns() + kLingerNs, "linger");
}

int UcxLink::event_fd() const {
  return worker_->efd;
}

Status UcxLink::arm(bool* armed) {
  *armed = false;
  // A receive the last progress completed is a frame waiting to be read:
  // UCX has no event left to signal it.
  if (!failure_.ok() || recv_op_->done) return failure_;
  const ucs_status_t st = ucp_worker_arm(worker_->worker);
  if (st == UCS_ERR_BUSY) return Status();
  if (st != UCS_OK) return fail(ucs_failed(ErrorCode::kIo, "ucx: ucp_worker_arm", st));
  *armed = true;
  return Status();
}

Status UcxLink::connect(const std::string& host, uint16_t port, const ClusterKey& key,
                        const LinkOptions& options, std::unique_ptr<UcxLink>* out) {
  std::shared_ptr<UcxWorker> w;
  KV_RETURN_IF_ERROR(UcxWorker::create(&w));
  sockaddr_storage addr{};
  socklen_t len = 0;
  KV_RETURN_IF_ERROR(resolve(host, port, &addr, &len));
  std::unique_ptr<UcxLink> link(new UcxLink(w, options));
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  params.sockaddr.addrlen = len;
  KV_RETURN_IF_ERROR(link->create_ep(&params));
  link->peer_name_ = fmt::format("{}:{}", host, port);
  Handshake hs(key, {Side::kConnector, options.role, options.name});
  KV_RETURN_IF_ERROR(link->run_handshake(hs));
  *out = std::move(link);
  return Status();
}

Status UcxLink::close() {
  if (closed_) return failure_;
  Status s = failure_.ok() ? send(Bye{}) : failure_;
  release();
  return s;
}

void UcxLink::release() {
  if (closed_) return;
  closed_ = true;
  Op& op = *recv_op_;
  // A posted stream receive cannot be cancelled either: a forced close
  // completes it. A lost endpoint, or a peer that said Bye or refused us,
  // has nothing left to flush to.
  const bool pending = op.request && !op.done;
  if (pending || ep_error_ != 0 || peer_left_) abort_ep();
  if (pending) (void)worker_->wait([&] { return op.done; }, now_ns() + 1000000000, "abort");
  if (op.request) ucp_request_free(op.request), op.request = nullptr;
  if (!ep_) return;
  // Flush what was sent (a Bye, a Refuse) to the socket, then close without
  // UCX's close handshake: that one needs the peer to progress its worker,
  // and a peer that has what it needs may not.
  ucp_request_param_t rp{};
  ucs_status_ptr_t r = ucp_ep_flush_nbx(ucp_ep_h(ep_), &rp);
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
    (void)worker_->wait([&] { return ucp_request_check_status(r) != UCS_INPROGRESS; },
                        now_ns() + 1000000000, "flush");
    ucp_request_free(r);
  }
  abort_ep();
}

UcxListener::UcxListener(std::shared_ptr<UcxWorker> worker, const ClusterKey& key,
                         LinkOptions options)
    : worker_(std::move(worker)), key_(key), options_(std::move(options)) {}

UcxListener::~UcxListener() {
  for (void* r : pending_) ucp_listener_reject(ucp_listener_h(listener_), ucp_conn_request_h(r));
  if (listener_) ucp_listener_destroy(ucp_listener_h(listener_));
}

void UcxListener::on_conn_request(void* request, void* arg) {
  static_cast<UcxListener*>(arg)->pending_.push_back(request);
}

Status UcxListener::listen(const std::string& addr, uint16_t port, const ClusterKey& key,
                           const LinkOptions& options, std::unique_ptr<UcxListener>* out) {
  std::shared_ptr<UcxWorker> w;
  KV_RETURN_IF_ERROR(UcxWorker::create(&w));
  sockaddr_storage sa{};
  socklen_t len = 0;
  KV_RETURN_IF_ERROR(resolve(addr, port, &sa, &len));
  std::unique_ptr<UcxListener> l(new UcxListener(w, key, options));
  ucp_listener_params_t params{};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  params.sockaddr.addrlen = len;
  params.conn_handler.cb = [](ucp_conn_request_h r, void* arg) { on_conn_request(r, arg); };
  params.conn_handler.arg = l.get();
  ucp_listener_h h = nullptr;
  ucs_status_t st = ucp_listener_create(w->worker, &params, &h);
  if (st != UCS_OK)
    return ucs_failed(ErrorCode::kIo, fmt::format("ucx: listening on {}:{}", addr, port), st);
  l->listener_ = h;
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(h, &attr);
  if (st != UCS_OK) return ucs_failed(ErrorCode::kIo, "ucx: ucp_listener_query", st);
  const auto* bound = reinterpret_cast<const sockaddr*>(&attr.sockaddr);
  l->port_ =
      ntohs(bound->sa_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(bound)->sin6_port
                                         : reinterpret_cast<const sockaddr_in*>(bound)->sin_port);
  *out = std::move(l);
  return Status();
}

namespace {

// "address:port" of the peer behind a connection request, for the logs.
std::string client_address(ucp_conn_request_h request) {
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(request, &attr) != UCS_OK) return "an unknown address";
  char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
  const auto* sa = reinterpret_cast<const sockaddr*>(&attr.client_address);
  const socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(sa, len, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV))
    return "an unknown address";
  return fmt::format("{}:{}", host, port);
}

}  // namespace

Status UcxListener::accept(int timeout_ms, std::unique_ptr<UcxLink>* out) {
  KV_RETURN_IF_ERROR(
      worker_->wait([&] { return !pending_.empty(); }, deadline_after(timeout_ms), "accept"));
  auto request = ucp_conn_request_h(pending_.front());
  pending_.erase(pending_.begin());
  const std::string from = client_address(request);
  std::unique_ptr<UcxLink> link(new UcxLink(worker_, options_));
  link->peer_name_ = from;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
  params.conn_request = request;
  Handshake hs(key_, {Side::kListener, options_.role, options_.name});
  Status s = link->create_ep(&params);
  if (s.ok()) s = link->run_handshake(hs);
  if (!s.ok()) {
    // Refused (the link closes here): say who, so an operator can find a
    // host with a stale key or an old release; the listener goes on.
    s = Status(s.code(), fmt::format("peer at {} refused: {}", from, s.message()));
    KV_LOG_WARN("net", "{}", s.message());
    return s;
  }
  KV_LOG_INFO("net", "link from '{}' at {} authenticated", link->peer_name(), from);
  *out = std::move(link);
  return Status();
}

}  // namespace kvasir::net
