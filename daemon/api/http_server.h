// daemon/api/http_server.h — the HTTP/1.1 transport of the front door.
//
// Boost.Asio + Boost.Beast (all of Beast lives in http_server.cpp): listeners
// on a Unix socket (mode 0660, a stale socket file removed first) and on TCP,
// keep-alive, a body limit (413), a header limit (431), and a read timeout
// that closes slowloris clients. It knows nothing of routes: each complete
// request goes to the handler with a Responder, which answers once (respond)
// or streams (start_stream, write..., finish).
//
// Threading: one io_context thread runs every connection. Responder methods
// may be called from any thread (they post to that thread); the handler runs
// on it. on_close callbacks run on it when the client goes away before the
// response is finished (EOF while waiting, or a failed write).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace boost::asio {
class io_context;
}

namespace kvasir {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // path + query as sent
  std::string path;                            // target without the query
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  bool tcp = false;  // came over TCP (not the Unix socket)
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class Responder {
 public:
  virtual ~Responder() = default;
  // A whole response.
  virtual void respond(int status, std::string content_type, std::string body) = 0;
  // A chunked response; write() sends one chunk each, finish() ends it.
  virtual void start_stream(int status, std::string content_type) = 0;
  virtual void write(std::string data) = 0;
  virtual void finish() = 0;
  // Called once, on the io thread, if the client disconnects before the
  // response is complete. Set it before anything can fail.
  virtual void on_close(std::function<void()> fn) = 0;
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<Responder>)>;

struct HttpServerOptions {
  uint64_t max_body = 8ull << 20;
  uint32_t max_header = 64 * 1024;                 // bytes of the request head
  std::chrono::milliseconds read_timeout{30000};   // one whole request, head and body
  std::chrono::milliseconds write_timeout{60000};  // one write that makes no progress
  // Connections open at once; beyond, a new one gets 503 and is closed. With
  // max_body and max_header this bounds request memory:
  // max_connections × (max_body + max_header).
  int max_connections = 256;
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& io, HttpServerOptions opts, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; throws kvasir::Error naming the address on failure.
  void listen_unix(const std::string& path);
  // "host:port" or ":port" / "port" (127.0.0.1); port 0 picks a free one.
  // Returns the bound port.
  uint16_t listen_tcp(const std::string& address);
  // Stops accepting and closes every connection (on the io thread).
  void stop();
  // Stops accepting; connections stay (to drain).
  void stop_accepting();
  // Runs fn on the io thread.
  void post(std::function<void()> fn);
  // Io thread only. Connections with a response pending or bytes still
  // queued (a drain waits for 0 before closing, so last events arrive);
  // all open connections; connections refused over max_connections.
  size_t busy_connections() const;
  size_t connections() const;
  uint64_t refused_connections() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// "host:port" → (host, port); "8000" or ":8000" → ("127.0.0.1", 8000).
// Throws kvasir::Error on anything else.
std::pair<std::string, uint16_t> parse_host_port(const std::string& address);

}  // namespace kvasir
