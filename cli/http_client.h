// cli/http_client.h — the CLI's HTTP client: Beast over the daemon's Unix
// socket or TCP, with incremental reading of streamed bodies (SSE).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::cli {

struct Endpoint {
  bool tcp = false;
  std::string socket;  // when !tcp
  std::string host;    // when tcp
  uint16_t port = 0;
  std::string api_key;  // sent as Authorization: Bearer on TCP
  std::string describe() const;
};

// --socket, then $KVASIR_SOCKET, then /run/kvasir/kvasir.sock; --url
// (http://HOST:PORT) wins over all. The API key comes from $KVASIR_API_KEY.
// Throws std::runtime_error on a malformed URL.
Endpoint resolve_endpoint(const std::string& socket_opt, const std::string& url_opt);

struct HttpResult {
  int status = 0;
  std::string body;
};

// One request; the whole body. Throws std::runtime_error when the daemon
// cannot be reached ("cannot connect to kvasird at ...").
HttpResult http_call(const Endpoint& ep, const std::string& method, const std::string& target,
                     const std::string& body = "",
                     std::chrono::milliseconds timeout = std::chrono::minutes(10));

// One request whose body is read as it arrives: on_data gets each piece
// (only for 2xx; otherwise the body is collected into the result).
HttpResult http_stream(const Endpoint& ep, const std::string& method, const std::string& target,
                       const std::string& body,
                       const std::function<void(std::string_view)>& on_data);

// The message of an OpenAI-shaped error body, or the body itself.
std::string error_message(const std::string& body);

}  // namespace kvasir::cli
