// daemon/api/http_server.cpp — Beast connections behind HttpServer (see http_server.h).
//
// A connection reads one request at a time (Beast's parser, with body and
// header limits and a read deadline), hands it to the handler, and while the
// response is pending watches the socket for EOF so a vanished client is
// noticed at once (on_close → the API cancels its request). Writes go
// through a queue: one async write at a time, in order.
#include "daemon/api/http_server.h"

// clang-format off
#include <utility>  // first: Boost 1.74 Asio uses std::exchange (GCC 12)
// clang-format on
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>

#include "base/check.h"
#include "daemon/api/errors.h"

namespace kvasir {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// The io_context as responders see it. Engine threads post to it; a
// sequence may outlive the API (queued or aborted requests at exit, freed by
// the engine after run_api's io_context is gone): ~HttpServer clears `io`
// under the lock, and later posts are dropped instead of reaching freed
// memory (found by ASan: heap-use-after-free in ~ResponderImpl at exit).
struct IoHandle {
  std::mutex mu;
  asio::io_context* io;
};
using error_code = boost::system::error_code;

namespace {

struct Conn {
  virtual ~Conn() = default;
  virtual void close() = 0;
  // A response is pending or bytes are still queued for the client.
  virtual bool busy() const = 0;
};

// The error body of a transport-level refusal (status, type and code from
// the table, errors.h). error_handler_t::replace: the message may carry
// client bytes that are not UTF-8 (dump would throw).
std::string error_json(const HttpError& e, const std::string& message) {
  return error_body(e, message).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

struct HttpServer::Impl {
  asio::io_context& io;
  std::shared_ptr<IoHandle> ioh;  // what responders post through
  HttpServerOptions opts;
  HttpHandler handler;
  std::unique_ptr<asio::local::stream_protocol::acceptor> unix_acc;
  std::unique_ptr<asio::ip::tcp::acceptor> tcp_acc;
  std::string unix_path;
  std::map<Conn*, std::weak_ptr<Conn>> conns;
  bool stopped = false;

  Impl(asio::io_context& io, HttpServerOptions o, HttpHandler h)
      : io(io), ioh(std::make_shared<IoHandle>()), opts(std::move(o)), handler(std::move(h)) {
    ioh->io = &io;
  }

  template <class Acceptor, class Socket>
  void accept(Acceptor& acc, bool tcp, std::shared_ptr<Impl> self);

  // Over max_connections: a short 503 and close, so the client gets an answer
  // (not a reset) and the server holds nothing for it. One non-blocking write
  // into the new socket's empty buffer (the answer is a few hundred bytes);
  // if even that would block, the socket is just closed. Nothing async, so
  // nothing outlives this call.
  template <class Socket>
  void refuse(Socket sock) {
    refused++;
    const HttpError e = http_error(ErrorCode::kUnavailable);
    std::string body = error_json(e, "the server has too many open connections (" +
                                         std::to_string(opts.max_connections) +
                                         ", server.max_connections); retry shortly");
    std::string msg = "HTTP/1.1 " + std::to_string(e.status) + " " +
                      std::string(beast::http::obsolete_reason(beast::http::status(e.status))) +
                      "\r\nServer: kvasir\r\nContent-Type: application/json"
                      "\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body;
    error_code ec;
    sock.non_blocking(true, ec);
    if (!ec) sock.write_some(asio::buffer(msg), ec);
    sock.shutdown(asio::socket_base::shutdown_send, ec);
    // Linger: read and discard what the client sends until it closes, for at
    // most 2 s. Closing at once fails most clients: they connect, then
    // write, and the request arrives after the accept; a close before it
    // makes their write fail (EPIPE on a Unix socket, a reset on TCP) and
    // they never read the 503 (tests/integration/test_load.sh: every client
    // past the cap got "Connection lost"). The timer bounds what a flood of
    // refused connections can hold.
    auto s = std::make_shared<Socket>(std::move(sock));
    auto t = std::make_shared<asio::steady_timer>(io, std::chrono::seconds(2));
    t->async_wait([s](error_code e) {
      if (!e) s->close(e);
    });
    drain_refused(s, t);
  }
  template <class Socket>
  static void drain_refused(std::shared_ptr<Socket> s, std::shared_ptr<asio::steady_timer> t) {
    auto buf = std::make_shared<std::array<char, 4096>>();
    s->async_read_some(asio::buffer(*buf), [s, t, buf](error_code ec, size_t) {
      if (!ec) return drain_refused(s, t);
      t->cancel();
      s->close(ec);
    });
  }
  uint64_t refused = 0;
};

namespace {

template <class Socket>
class Session;

template <class Socket>
class ResponderImpl : public Responder {
 public:
  ResponderImpl(std::weak_ptr<Session<Socket>> s, std::shared_ptr<IoHandle> io)
      : s_(std::move(s)), io_(std::move(io)) {}
  ~ResponderImpl() override;
  void respond(int status, std::string ctype, std::string body) override;
  void start_stream(int status, std::string ctype) override;
  void write(std::string data) override;
  void finish() override;
  void on_close(std::function<void()> fn) override {
    std::lock_guard lk(mu_);
    close_fn_ = std::move(fn);
  }
  std::function<void()> take_close() {
    std::lock_guard lk(mu_);
    return std::exchange(close_fn_, nullptr);
  }
  bool finished() {
    std::lock_guard lk(mu_);
    return done_;
  }

 private:
  template <class F>
  void post(F&& f) {
    std::lock_guard lk(io_->mu);
    if (!io_->io) return;  // the server is gone: nobody to answer
    asio::post(*io_->io, [w = s_, f = std::forward<F>(f)]() mutable {
      if (auto s = w.lock()) f(*s);
    });
  }
  std::weak_ptr<Session<Socket>> s_;
  std::shared_ptr<IoHandle> io_;
  std::mutex mu_;
  std::function<void()> close_fn_;
  bool done_ = false;     // respond() or finish() called
  bool started_ = false;  // respond() or start_stream() called
};

template <class Socket>
class Session : public Conn, public std::enable_shared_from_this<Session<Socket>> {
 public:
  Session(Socket sock, bool tcp, std::shared_ptr<HttpServer::Impl> srv)
      : sock_(std::move(sock)),
        timer_(sock_.get_executor()),
        wtimer_(sock_.get_executor()),
        tcp_(tcp),
        srv_(std::move(srv)) {}

  void start() { read_request(); }

  bool busy() const override { return !closed_ && (current_ || writing_ || !ops_.empty()); }

  void close() override {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    timer_.cancel();
    wtimer_.cancel();
    ops_.clear();  // queued writes hold the session: break the cycle
    sock_.shutdown(asio::socket_base::shutdown_both, ec);
    sock_.close(ec);
    if (current_ && !current_->finished())
      if (auto fn = current_->take_close()) fn();
    current_.reset();
    srv_->conns.erase(this);
  }

  // ---- responses (io thread) ----
  void do_respond(int status, std::string ctype, std::string body) {
    auto res = std::make_shared<http::response<http::string_body>>(http::status(status), 11);
    res->set(http::field::server, "kvasir");
    res->set(http::field::content_type, ctype);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    if (head_) {
      // HEAD: the header a GET would get, Content-Length included, and no
      // body (RFC 9110 9.3.2): a body would be read as the start of the
      // next response on a kept-alive connection.
      auto sr = std::make_shared<http::response_serializer<http::string_body>>(*res);
      enqueue([self = this->shared_from_this(), res, sr](auto done) {
        http::async_write_header(self->sock_, *sr,
                                 [res, sr, done](error_code ec, size_t) { done(ec); });
      });
    } else {
      enqueue([self = this->shared_from_this(), res](auto done) {
        http::async_write(self->sock_, *res, [res, done](error_code ec, size_t) { done(ec); });
      });
    }
    enqueue_end();
  }

  void do_start_stream(int status, std::string ctype) {
    struct Head {
      http::response<http::empty_body> res;
      http::response_serializer<http::empty_body> sr{res};
    };
    auto h = std::make_shared<Head>();
    h->res.result(http::status(status));
    h->res.version(11);
    h->res.set(http::field::server, "kvasir");
    h->res.set(http::field::content_type, ctype);
    h->res.set(http::field::cache_control, "no-cache");
    h->res.keep_alive(keep_alive_);
    h->res.chunked(true);
    enqueue([self = this->shared_from_this(), h](auto done) {
      http::async_write_header(self->sock_, h->sr, [h, done](error_code ec, size_t) { done(ec); });
    });
  }

  void do_write(std::string data) {
    if (data.empty()) return;  // an empty chunk would end the body
    auto d = std::make_shared<std::string>(std::move(data));
    enqueue([self = this->shared_from_this(), d](auto done) {
      asio::async_write(self->sock_, http::make_chunk(asio::buffer(*d)),
                        [d, done](error_code ec, size_t) { done(ec); });
    });
  }

  void do_finish() {
    enqueue([self = this->shared_from_this()](auto done) {
      asio::async_write(self->sock_, http::make_chunk_last(),
                        [done](error_code ec, size_t) { done(ec); });
    });
    enqueue_end();
  }

 private:
  using Op = std::function<void(std::function<void(error_code)>)>;
  static constexpr size_t kMaxQueuedOps = 4096;

  void enqueue(Op op) {
    if (closed_) return;
    // A client that stopped reading while we stream: drop it (on_close
    // cancels its request) rather than queue without bound.
    if (ops_.size() >= kMaxQueuedOps) return close();
    ops_.push_back(std::move(op));
    if (!writing_) next_op();
  }
  // After the last write of a response: keep-alive → read the next request.
  void enqueue_end() {
    enqueue([self = this->shared_from_this()](auto done) {
      self->current_.reset();
      if (!self->keep_alive_) {
        self->linger_close();
      } else {
        self->read_request();
      }
      done(error_code{});
    });
  }
  void next_op() {
    if (ops_.empty() || closed_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    Op op = std::move(ops_.front());
    ops_.pop_front();
    // A client that stops reading: the write stalls; close when it has made
    // no progress for write_timeout (on_close cancels its request).
    wtimer_.expires_after(srv_->opts.write_timeout);
    wtimer_.async_wait([w = this->weak_from_this()](error_code ec) {
      if (auto s = w.lock(); s && !ec) s->close();
    });
    op([self = this->shared_from_this()](error_code ec) {
      self->wtimer_.cancel();
      if (ec) return self->close();  // the client is gone: on_close fires
      self->next_op();
    });
  }

  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(srv_->opts.max_body);
    parser_->header_limit(srv_->opts.max_header);
    timer_.expires_after(srv_->opts.read_timeout);
    timer_.async_wait([w = this->weak_from_this()](error_code ec) {
      if (ec) return;  // cancelled: the read finished in time
      if (auto s = w.lock()) s->on_timeout();
    });
    http::async_read(
        sock_, buf_, *parser_,
        [self = this->shared_from_this()](error_code ec, size_t) { self->on_read(ec); });
  }

  void on_timeout() {
    if (reading_timed_out_ || closed_) return;
    reading_timed_out_ = true;
    error_code ec;
    sock_.cancel(ec);  // the pending read fails with operation_aborted
  }

  void on_read(error_code ec) {
    timer_.cancel();
    if (closed_) return;
    if (reading_timed_out_) {
      // 408 only if part of a request arrived; an idle keep-alive just closes.
      if (parser_->got_some())
        return fail(http_error(ErrorCode::kTimeout), "request not received in time");
      return close();
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
      return close();
    if (ec == http::error::body_limit)
      return fail(http_error(ErrorCode::kTooLarge), "request body exceeds server.max_body (" +
                                                        std::to_string(srv_->opts.max_body) +
                                                        " bytes)");
    if (ec == http::error::header_limit)
      return fail(http_error(ErrorCode::kHeaderTooLarge), "request header fields too large");
    if (ec)
      return fail(http_error(ErrorCode::kInvalidArgument), "bad HTTP request: " + ec.message());

    auto& msg = parser_->get();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    head_ = msg.method() == http::verb::head;
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& f : msg) {
      std::string name(f.name_string());
      for (auto& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      req.headers[name] = std::string(f.value());
    }
    req.body = std::move(msg.body());
    req.tcp = tcp_;
    keep_alive_ = msg.keep_alive();

    current_ = std::make_shared<ResponderImpl<Socket>>(this->weak_from_this(), srv_->ioh);
    watch_disconnect();
    try {
      srv_->handler(std::move(req), current_);
    } catch (const std::exception& e) {
      const HttpError internal = http_error(ErrorCode::kInternal);
      do_respond(internal.status, "application/json", error_json(internal, "internal error"));
    }
  }

  // While a response is pending, readable-with-nothing-to-read means EOF.
  void watch_disconnect() {
    sock_.async_wait(asio::socket_base::wait_read,
                     // Holds the session alive while its response is pending.
                     [s = this->shared_from_this(), r = std::weak_ptr(current_)](error_code ec) {
                       if (ec || s->closed_) return;
                       auto cur = r.lock();
                       if (!cur || cur != s->current_) return;  // that response is over
                       error_code e2;
                       if (s->sock_.available(e2) == 0 || e2) s->close();
                       // else: a pipelined request waits in the socket; stop watching.
                     });
  }

  // An error answer that closes the connection (the stream may be mid-request).
  void fail(const HttpError& e, const std::string& message) {
    keep_alive_ = false;
    do_respond(e.status, "application/json", error_json(e, message));
  }

  // Half-close, then read and discard what the client still sends (an
  // oversized body) for a moment, so it sees our answer rather than a reset.
  void linger_close() {
    error_code ec;
    sock_.shutdown(asio::socket_base::shutdown_send, ec);
    timer_.expires_after(std::chrono::seconds(2));
    timer_.async_wait([w = this->weak_from_this()](error_code e) {
      if (auto s = w.lock(); s && !e) s->close();
    });
    drain();
  }
  void drain() {
    auto buf = std::make_shared<std::array<char, 65536>>();
    sock_.async_read_some(asio::buffer(*buf),
                          [self = this->shared_from_this(), buf](error_code ec, size_t n) {
                            self->drained_ += n;
                            if (ec || self->closed_ || self->drained_ > (64u << 20))
                              return self->close();
                            self->drain();
                          });
  }

  Socket sock_;
  asio::steady_timer timer_;   // reading a request; lingering close
  asio::steady_timer wtimer_;  // the write in progress
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool tcp_;
  std::shared_ptr<HttpServer::Impl> srv_;
  std::shared_ptr<ResponderImpl<Socket>> current_;
  std::deque<Op> ops_;
  bool writing_ = false;
  bool keep_alive_ = true;
  bool head_ = false;  // the request being answered is a HEAD: headers only
  bool closed_ = false;
  bool reading_timed_out_ = false;
  size_t drained_ = 0;
};

template <class Socket>
ResponderImpl<Socket>::~ResponderImpl() {
  // A handler that dropped its responder without answering: don't hang the client.
  if (!started_)
    post([](Session<Socket>& s) {
      const HttpError internal = http_error(ErrorCode::kInternal);
      s.do_respond(internal.status, "application/json", error_json(internal, "no response"));
    });
}

template <class Socket>
void ResponderImpl<Socket>::respond(int status, std::string ctype, std::string body) {
  {
    std::lock_guard lk(mu_);
    if (started_) return;
    started_ = done_ = true;
  }
  post([=, ctype = std::move(ctype), body = std::move(body)](Session<Socket>& s) mutable {
    s.do_respond(status, std::move(ctype), std::move(body));
  });
}

template <class Socket>
void ResponderImpl<Socket>::start_stream(int status, std::string ctype) {
  {
    std::lock_guard lk(mu_);
    if (started_) return;
    started_ = true;
  }
  post([=, ctype = std::move(ctype)](Session<Socket>& s) mutable {
    s.do_start_stream(status, std::move(ctype));
  });
}

template <class Socket>
void ResponderImpl<Socket>::write(std::string data) {
  {
    std::lock_guard lk(mu_);
    if (!started_ || done_) return;
  }
  post([d = std::move(data)](Session<Socket>& s) mutable { s.do_write(std::move(d)); });
}

template <class Socket>
void ResponderImpl<Socket>::finish() {
  {
    std::lock_guard lk(mu_);
    if (!started_ || done_) return;
    done_ = true;
  }
  post([](Session<Socket>& s) { s.do_finish(); });
}

}  // namespace

template <class Acceptor, class Socket>
void HttpServer::Impl::accept(Acceptor& acc, bool tcp, std::shared_ptr<Impl> self) {
  acc.async_accept([this, &acc, tcp, self](error_code ec, Socket sock) {
    if (stopped || ec == asio::error::operation_aborted) return;
    if (!ec) {
      if (int(conns.size()) >= opts.max_connections) {
        refuse(std::move(sock));
      } else {
        auto s = std::make_shared<Session<Socket>>(std::move(sock), tcp, self);
        conns[s.get()] = s;
        s->start();
      }
    }
    accept<Acceptor, Socket>(acc, tcp, self);
  });
}

HttpServer::HttpServer(asio::io_context& io, HttpServerOptions opts, HttpHandler handler)
    : impl_(std::make_shared<Impl>(io, std::move(opts), std::move(handler))) {}

HttpServer::~HttpServer() {
  {
    std::lock_guard lk(impl_->ioh->mu);
    impl_->ioh->io = nullptr;
  }
  if (!impl_->unix_path.empty()) ::unlink(impl_->unix_path.c_str());
}

void HttpServer::listen_unix(const std::string& path) {
  namespace fs = std::filesystem;
  using local = asio::local::stream_protocol;
  std::error_code fec;
  fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), fec);
  if (fs::exists(fs::symlink_status(p))) {
    KV_CHECK(fs::is_socket(fs::symlink_status(p)),
             "server.socket: {} exists and is not a socket; refusing to replace it", path);
    local::socket probe(impl_->io);
    error_code ec;
    probe.connect(local::endpoint(path), ec);
    KV_CHECK(ec, "server.socket: {} is in use: kvasird is already running there", path);
    ::unlink(path.c_str());  // stale: left by a killed daemon
  }
  auto acc = std::make_unique<local::acceptor>(impl_->io);
  error_code ec;
  acc->open(local(), ec);
  if (!ec) acc->bind(local::endpoint(path), ec);
  KV_CHECK(!ec, "server.socket: cannot bind {}: {}", path, ec.message());
  ::chmod(path.c_str(), 0660);
  acc->listen(asio::socket_base::max_listen_connections, ec);
  KV_CHECK(!ec, "server.socket: cannot listen on {}: {}", path, ec.message());
  impl_->unix_path = path;
  impl_->unix_acc = std::move(acc);
  impl_->accept<local::acceptor, local::socket>(*impl_->unix_acc, false, impl_);
}

std::pair<std::string, uint16_t> parse_host_port(const std::string& address) {
  std::string host = "127.0.0.1", port = address;
  auto colon = address.rfind(':');
  if (colon != std::string::npos) {
    if (colon > 0) host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  KV_CHECK(!port.empty() && port.size() <= 5 &&
               port.find_first_not_of("0123456789") == std::string::npos,
           "server.http: '{}' is not host:port", address);
  int n = std::stoi(port);
  KV_CHECK(n <= 65535, "server.http: port {} is out of range", n);
  return {host, uint16_t(n)};
}

uint16_t HttpServer::listen_tcp(const std::string& address) {
  using tcp = asio::ip::tcp;
  auto [host, port] = parse_host_port(address);
  error_code ec;
  auto ip = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  KV_CHECK(!ec, "server.http: '{}' is not an IP address", host);
  tcp::endpoint ep(ip, port);
  auto acc = std::make_unique<tcp::acceptor>(impl_->io);
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
  KV_CHECK(!ec, "server.http: cannot listen on {}: {}", address, ec.message());
  uint16_t bound = acc->local_endpoint().port();
  impl_->tcp_acc = std::move(acc);
  impl_->accept<tcp::acceptor, tcp::socket>(*impl_->tcp_acc, true, impl_);
  return bound;
}

void HttpServer::post(std::function<void()> fn) {
  asio::post(impl_->io, std::move(fn));
}

size_t HttpServer::busy_connections() const {
  size_t n = 0;
  for (auto& [p, w] : impl_->conns)
    if (auto c = w.lock(); c && c->busy()) ++n;
  return n;
}

size_t HttpServer::connections() const {
  return impl_->conns.size();
}

uint64_t HttpServer::refused_connections() const {
  return impl_->refused;
}

void HttpServer::stop_accepting() {
  asio::post(impl_->io, [impl = impl_] {
    impl->stopped = true;
    error_code ec;
    if (impl->unix_acc) impl->unix_acc->close(ec);
    if (impl->tcp_acc) impl->tcp_acc->close(ec);
  });
}

void HttpServer::stop() {
  asio::post(impl_->io, [impl = impl_] {
    impl->stopped = true;
    error_code ec;
    if (impl->unix_acc) impl->unix_acc->close(ec);
    if (impl->tcp_acc) impl->tcp_acc->close(ec);
    auto conns = impl->conns;
    for (auto& [p, w] : conns)
      if (auto c = w.lock()) c->close();
  });
}

}  // namespace kvasir
