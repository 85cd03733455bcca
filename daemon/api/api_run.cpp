// daemon/api/api_run.cpp — run_api: the API served on the daemon's
// listeners until a stop signal, then the graceful stop (api.h).
#include "daemon/api/api.h"

// clang-format off
#include <utility>  // first: Boost 1.74 Asio uses std::exchange (GCC 12)
// clang-format on
#include <fmt/format.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "base/log.h"
#include "daemon/config/config.h"

namespace kvasir {

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds millis(double s) {
  return std::chrono::milliseconds(int64_t(std::max(0.0, s) * 1e3));
}

HttpServerOptions http_options(const Config& cfg) {
  HttpServerOptions o;
  o.max_body = cfg.server.max_body;
  o.read_timeout = millis(std::max(0.1, cfg.server.read_timeout));
  o.max_connections = cfg.server.max_connections;
  return o;
}

// The model file's name, with and without ".gguf": clients often send it
// as "model".
std::vector<std::string> file_aliases(const std::string& model_path) {
  if (model_path.empty()) return {};
  std::string file = model_path.substr(model_path.find_last_of('/') + 1);
  std::vector<std::string> out{file};
  if (auto dot = file.rfind(".gguf"); dot != std::string::npos) out.push_back(file.substr(0, dot));
  return out;
}

void listen(HttpServer& server, const Config& cfg) {
  server.listen_unix(cfg.server.socket);
  KV_LOG_INFO("api", "API on unix:{}", cfg.server.socket);
  if (cfg.server.http.empty()) return;
  uint16_t port = server.listen_tcp(cfg.server.http);
  KV_LOG_INFO("api", "API on http://{}:{}{}", parse_host_port(cfg.server.http).first, port,
              cfg.server.api_key.empty() ? "" : " (API key required)");
}

// The graceful stop, polled on the io thread (the stop flags are set from
// signal handlers): serving → draining (new generations 503, running ones
// finish) → closing (the last bytes flush) → done (the server stops, so
// io.run() returns).
class StopPoller {
 public:
  StopPoller(boost::asio::io_context& io, const Config& cfg, const ApiContext& ctx,
             HttpServer& server, ApiService& api, std::chrono::milliseconds write_timeout)
      : cfg_(cfg),
        ctx_(ctx),
        server_(server),
        api_(api),
        timer_(io),
        close_wait_(std::min(write_timeout, std::chrono::milliseconds(5000))) {}

  void poll() {
    auto now = Clock::now();
    if (phase_ == Phase::kServing && ctx_.stop && ctx_.stop->load()) begin_drain(now);
    if (phase_ == Phase::kDraining) drain(now);
    if (phase_ == Phase::kClosing && (server_.busy_connections() == 0 || now >= close_until_))
      return finish();
    timer_.expires_after(std::chrono::milliseconds(phase_ == Phase::kServing ? 100 : 20));
    timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) poll();
    });
  }
  size_t aborted() const { return aborted_; }

 private:
  enum class Phase { kServing, kDraining, kClosing };

  void begin_drain(Clock::time_point now) {
    phase_ = Phase::kDraining;
    api_.begin_drain();
    drain_until_ = now + millis(cfg_.server.drain_timeout);
    drained_from_ = api_.in_flight();
    KV_LOG_INFO("api", "stopping: draining {} request(s) for up to {} s", drained_from_,
                cfg_.server.drain_timeout);
  }

  // At the drain timeout or a second stop signal, what still runs is aborted.
  void drain(Clock::time_point now) {
    bool abort_now = ctx_.abort && ctx_.abort->load();
    if (api_.in_flight() > 0 && (abort_now || now >= drain_until_)) {
      abort_why_ =
          abort_now ? "a second stop signal"
                    : fmt::format("server.drain_timeout passed, {} s", cfg_.server.drain_timeout);
      aborted_ = api_.abort_all(
          fmt::format("the daemon is stopping; this request was aborted ({})", abort_why_));
    }
    if (api_.in_flight() == 0) {
      phase_ = Phase::kClosing;
      close_until_ = now + close_wait_;
    }
  }

  void finish() {
    std::string line =
        aborted_ ? fmt::format("drain ended ({}): {} request(s) finished, {} aborted", abort_why_,
                               drained_from_ - std::min(drained_from_, aborted_), aborted_)
                 : fmt::format("drained: {} request(s) finished", drained_from_);
    KV_LOG_INFO("api", "{}", line);
    if (ctx_.on_drained) ctx_.on_drained(line);
    api_.shutdown();
    server_.stop();
  }

  const Config& cfg_;
  const ApiContext& ctx_;
  HttpServer& server_;
  ApiService& api_;
  boost::asio::steady_timer timer_;
  const std::chrono::milliseconds close_wait_;
  Phase phase_ = Phase::kServing;
  Clock::time_point drain_until_, close_until_;
  size_t drained_from_ = 0, aborted_ = 0;
  std::string abort_why_;
};

}  // namespace

int run_api(const Config& cfg, Engine& engine, const ApiContext& ctx) {
  boost::asio::io_context io(1);
  const HttpServerOptions hopts = http_options(cfg);
  ApiOptions aopts;
  aopts.api_key = cfg.server.api_key;
  ApiContext actx = ctx;
  const auto& served = cfg.server.served_model_name;
  if (served.empty()) {
    for (auto& alias : file_aliases(cfg.model.path)) actx.model_aliases.push_back(std::move(alias));
  } else {  // the operator's names replace the file's (vLLM's --served-model-name)
    actx.model_name = served[0];
    actx.model_aliases.clear();
    actx.listed_aliases.assign(served.begin() + 1, served.end());
  }

  std::shared_ptr<ApiService> api;
  HttpServer server(io, hopts, [&api](HttpRequest req, std::shared_ptr<Responder> res) {
    api->handle(std::move(req), std::move(res));
  });
  api = std::make_shared<ApiService>(engine, actx, aopts, [&io](std::function<void()> fn) {
    boost::asio::post(io, std::move(fn));
  });
  listen(server, cfg);
  if (ctx.on_listening) ctx.on_listening();

  StopPoller stop(io, cfg, ctx, server, *api, hopts.write_timeout);
  stop.poll();
  io.run();
  api->shutdown();
  return stop.aborted() ? 1 : 0;
}

}  // namespace kvasir
