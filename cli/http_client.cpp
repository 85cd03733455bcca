// cli/http_client.cpp — see http_client.h. All of the CLI's Beast is here.
#include "cli/http_client.h"

// clang-format off
#include <utility>  // first: Boost 1.74 Asio uses std::exchange (GCC 12)
// clang-format on
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace kvasir::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::string Endpoint::describe() const {
  return tcp ? "http://" + host + ":" + std::to_string(port) : "unix:" + socket;
}

Endpoint resolve_endpoint(const std::string& socket_opt, const std::string& url_opt) {
  Endpoint ep;
  if (const char* k = std::getenv("KVASIR_API_KEY")) ep.api_key = k;
  if (!url_opt.empty()) {
    std::string u = url_opt;
    if (u.rfind("http://", 0) == 0)
      u = u.substr(7);
    else if (u.find("://") != std::string::npos)
      throw std::runtime_error("--url: only http://HOST:PORT is supported (got " + url_opt + ")");
    u = u.substr(0, u.find('/'));
    auto colon = u.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == u.size())
      throw std::runtime_error("--url: expected http://HOST:PORT (got " + url_opt + ")");
    ep.tcp = true;
    ep.host = u.substr(0, colon);
    try {
      int port = std::stoi(u.substr(colon + 1));
      if (port <= 0 || port > 65535) throw std::out_of_range("port");
      ep.port = uint16_t(port);
    } catch (const std::exception&) {
      throw std::runtime_error("--url: bad port in " + url_opt);
    }
    return ep;
  }
  if (!socket_opt.empty())
    ep.socket = socket_opt;
  else if (const char* s = std::getenv("KVASIR_SOCKET"); s && *s)
    ep.socket = s;
  else
    ep.socket = "/run/kvasir/kvasir.sock";
  return ep;
}

namespace {

template <class Socket>
HttpResult exchange(Socket& sock, const Endpoint& ep, const std::string& method,
                    const std::string& target, const std::string& body,
                    const std::function<void(std::string_view)>* on_data) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, ep.tcp ? ep.host : "localhost");
  req.set(http::field::user_agent, "kvasir-cli");
  req.set(http::field::connection, "close");
  if (ep.tcp && !ep.api_key.empty()) req.set(http::field::authorization, "Bearer " + ep.api_key);
  if (!body.empty() || method == "POST") {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  http::write(sock, req);

  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> p;
  p.body_limit(std::numeric_limits<std::uint64_t>::max());
  http::read_header(sock, buf, p);
  HttpResult r;
  r.status = int(p.get().result_int());
  bool stream = on_data && r.status / 100 == 2;
  char tmp[8192];
  while (!p.is_done()) {
    p.get().body().data = tmp;
    p.get().body().size = sizeof tmp;
    beast::error_code ec;
    // read_some: hand over what has arrived. http::read would wait until the
    // 8 KiB buffer is full, so a stream of small SSE events came in bursts.
    http::read_some(sock, buf, p, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) throw beast::system_error(ec);
    std::string_view got(tmp, sizeof tmp - p.get().body().size);
    if (stream)
      (*on_data)(got);
    else
      r.body.append(got);
  }
  return r;
}

HttpResult call(const Endpoint& ep, const std::string& method, const std::string& target,
                const std::string& body, const std::function<void(std::string_view)>* on_data) {
  asio::io_context io;
  try {
    if (ep.tcp) {
      asio::ip::tcp::resolver res(io);
      asio::ip::tcp::socket s(io);
      asio::connect(s, res.resolve(ep.host, std::to_string(ep.port)));
      return exchange(s, ep, method, target, body, on_data);
    }
    asio::local::stream_protocol::socket s(io);
    s.connect(asio::local::stream_protocol::endpoint(ep.socket));
    return exchange(s, ep, method, target, body, on_data);
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("cannot talk to kvasird at " + ep.describe() + ": " +
                             e.code().message());
  }
}

}  // namespace

HttpResult http_call(const Endpoint& ep, const std::string& method, const std::string& target,
                     const std::string& body, std::chrono::milliseconds) {
  return call(ep, method, target, body, nullptr);
}

HttpResult http_stream(const Endpoint& ep, const std::string& method, const std::string& target,
                       const std::string& body,
                       const std::function<void(std::string_view)>& on_data) {
  return call(ep, method, target, body, &on_data);
}

std::string error_message(const std::string& body) {
  try {
    auto j = nlohmann::json::parse(body);
    if (j.contains("error") && j["error"].is_object() && j["error"]["message"].is_string())
      return j["error"]["message"].get<std::string>();
  } catch (const std::exception&) {
  }
  return body.empty() ? "(no message)" : body;
}

}  // namespace kvasir::cli
