// daemon/api/api.cpp — routing, the small routes (health, models, tokenize,
// stats, metrics) and run_api. Generation routes are in api_generate.cpp.
#include "daemon/api/api.h"

// clang-format off
#include <utility>  // first: Boost 1.74 Asio uses std::exchange (GCC 12)
// clang-format on
#include <fmt/format.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cmath>

#include "base/check.h"
#include "base/log.h"
#include "daemon/api/api_internal.h"
#include "daemon/config/config.h"

namespace kvasir {

using nlohmann::json;

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Compares every byte of the longer string whatever the lengths are.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

// ---- histograms ----

void Histogram::observe(double v) {
  size_t i =
      std::upper_bound(bounds.begin(), bounds.end(), v, [](double x, double b) { return x <= b; }) -
      bounds.begin();
  // upper_bound with <= finds the first bound >= v (Prometheus "le").
  counts[i]++;
  sum += v;
  n++;
}

double Histogram::quantile(double q) const {
  if (n == 0) return 0;
  uint64_t want = uint64_t(std::ceil(q * double(n))), seen = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    seen += counts[i];
    if (seen >= want) return i < bounds.size() ? bounds[i] : bounds.back();
  }
  return bounds.back();
}

void Histogram::prometheus(std::string& out, const std::string& name,
                           const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cum += counts[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], cum);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, n, name, sum,
                     name, n);
}

// ---- service ----

ApiService::ApiService(Engine& engine, ApiContext ctx, ApiOptions opts,
                       std::function<void(std::function<void()>)> post)
    : impl_(std::make_shared<Impl>(engine, std::move(ctx), std::move(opts), std::move(post))) {
  impl_->created_unix = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
}

ApiService::~ApiService() {
  shutdown();
}

void ApiService::begin_drain() {
  impl_->draining = true;
}

size_t ApiService::in_flight() const {
  std::lock_guard lk(impl_->gens_mu);
  return impl_->gens.size();
}

void ApiService::handle(HttpRequest req, std::shared_ptr<Responder> res) {
  impl_->handle(req, res);
}

void ApiService::Impl::count(const std::string& route, int status) {
  std::lock_guard lk(metrics.mu);
  metrics.responses[{route, status}]++;
}

void ApiService::Impl::send_json(const std::shared_ptr<Responder>& res, const std::string& route,
                                 int status, const json& body) {
  count(route, status);
  res->respond(status, "application/json",
               body.dump(-1, ' ', false, json::error_handler_t::replace));
}

void ApiService::Impl::send_error(const std::shared_ptr<Responder>& res, const std::string& route,
                                  const ApiError& e) {
  send_json(res, route, e.status, error_body(e));
}

void ApiService::Impl::check_model(const std::string& model) const {
  if (model.empty() || model == ctx.model_name) return;
  for (const auto& a : ctx.model_aliases)
    if (model == a) return;
  throw ApiError(
      ErrorCode::kNotFound,
      fmt::format("the model '{}' does not exist; this server serves '{}'", model, ctx.model_name),
      "model");
}

namespace {

json engine_stats_json(const EngineStats& s) {
  return {{"waiting", s.waiting},
          {"running", s.running},
          {"blocks_total", s.blocks_total},
          {"blocks_free", s.blocks_free},
          {"preemptions", s.preemptions},
          {"tokens_generated", s.tokens_generated},
          {"tokens_prompt", s.tokens_prompt},
          {"kv_slots_used", s.kv_slots_used},
          {"kv_waste", s.kv_waste},
          {"state", engine_state_name(s.state)},
          {"restarts", s.restarts},
          {"faults", s.faults},
          {"requeued", s.requeued},
          {"last_recovery_s", s.last_recovery_s}};
}

double num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

void ApiService::Impl::handle(HttpRequest& req, const std::shared_ptr<Responder>& res) {
  const std::string& p = req.path;
  std::string route = p;
  try {
    if (req.tcp && !opts.api_key.empty() && p != "/health") {
      std::string auth = req.header("authorization");
      if (!constant_time_equal(auth, "Bearer " + opts.api_key))
        throw ApiError(ErrorCode::kUnauthenticated,
                       "invalid or missing API key (Authorization: Bearer KEY)");
    }
    auto want = [&](const char* method) {
      if (req.method != method)
        throw ApiError(ErrorCode::kMethodNotAllowed,
                       fmt::format("{} takes {} (not {})", p, method, req.method));
    };
    bool needs_codec = p == "/v1/completions" || p == "/v1/chat/completions" || p == "/tokenize" ||
                       p == "/detokenize";
    if (needs_codec && !ctx.codec)
      throw ApiError(ErrorCode::kLoading, "no tokenizer is loaded for this model");
    if (p == "/v1/completions" || p == "/v1/chat/completions") {
      want("POST");
      return generate(req, res, p == "/v1/chat/completions");
    }
    if (p == "/health") {
      want("GET");
      // Load balancers and `kvasir status` move away from a stopping daemon.
      if (draining)
        return send_json(res, route, 503, {{"status", "stopping"}, {"in_flight", gens_size()}});
      // Recovery (docs/recovery.md): "degraded" while a lost stage is being
      // restarted (requests are still taken; they wait), "unhealthy" once
      // the restart limit is hit (work is refused).
      if (EngineStats es = engine.stats(); es.state == EngineState::kFailed)
        return send_json(res, route, 503, {{"status", "unhealthy"}, {"error", es.failure}});
      else if (engine.ready())
        return send_json(res, route, 200,
                         {{"status", es.degraded ? "degraded" : "ok"}, {"restarts", es.restarts}});
      json body = {{"status", "loading"}};
      if (ctx.loading) body["loading"] = ctx.loading();
      return send_json(res, route, 503, body);
    }
    if (p == "/v1/models" || p.rfind("/v1/models/", 0) == 0) {
      want("GET");
      json m = {{"id", ctx.model_name},
                {"object", "model"},
                {"created", created_unix},
                {"owned_by", "kvasir"},
                {"root", ctx.model_name}};
      if (ctx.max_model_len > 0) m["max_model_len"] = ctx.max_model_len;
      if (p == "/v1/models") return send_json(res, route, 200, {{"object", "list"}, {"data", {m}}});
      route = "/v1/models/{id}";
      check_model(p.substr(11));
      return send_json(res, route, 200, m);
    }
    if (p == "/tokenize") {
      want("POST");
      TokenizeRequest t = parse_tokenize_request(req.body);
      std::string text;
      if (t.prompt) {
        text = *t.prompt;
      } else {
        try {
          text = ctx.codec->render_chat(t.messages);
        } catch (const Error& e) {
          throw ApiError(e.code(), "cannot apply the chat template: " + e.message(), "messages");
        }
      }
      auto ids = ctx.codec->encode(text, t.add_special_tokens, true);
      json body = {{"tokens", ids}, {"count", ids.size()}};
      if (ctx.max_model_len > 0) body["max_model_len"] = ctx.max_model_len;
      return send_json(res, route, 200, body);
    }
    if (p == "/detokenize") {
      want("POST");
      auto ids = parse_detokenize_request(req.body);
      int32_t vocab = ctx.codec->vocab_size();
      for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= vocab)
          throw ApiError(ErrorCode::kInvalidArgument,
                         fmt::format("tokens[{}]: token id {} is out of range (vocabulary: {})", i,
                                     ids[i], vocab),
                         "tokens");
      return send_json(res, route, 200, {{"prompt", ctx.codec->decode(ids, false)}});
    }
    if (p == "/kvasir/v1/stats") {
      want("GET");
      json body = ctx.stage_stats ? ctx.stage_stats() : json::object();
      if (!body.is_object()) body = json::object();
      body["model"] = ctx.model_name;
      body["ready"] = engine.ready();
      body["uptime_s"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      body["engine"] = engine_stats_json(engine.stats());
      if (ctx.loading && !engine.ready()) body["loading"] = ctx.loading();
      {
        std::lock_guard lk(metrics.mu);
        auto lat = [](const Histogram& h) {
          return json{{"count", h.n},
                      {"p50_s", h.quantile(0.5)},
                      {"p99_s", h.quantile(0.99)},
                      {"mean_s", h.n ? h.sum / double(h.n) : 0.0}};
        };
        body["latency"] = {
            {"ttft", lat(metrics.ttft)}, {"itl", lat(metrics.itl)}, {"e2e", lat(metrics.e2e)}};
        body["requests"] = {{"cancelled", metrics.cancelled},
                            {"stopped_by_string", metrics.stopped_by_string}};
      }
      return send_json(res, route, 200, body);
    }
    if (p == "/metrics") {
      want("GET");
      return res->respond(200, "text/plain; version=0.0.4", metrics_text());
    }
    route = "(unknown)";
    throw ApiError(ErrorCode::kNotFound, fmt::format("no route {} {}", req.method, p));
  } catch (const ApiError& e) {
    send_error(res, route, e);
  } catch (const Error& e) {
    send_error(res, route, ApiError(e.code(), e.message()));
  } catch (const std::exception& e) {
    send_error(res, route,
               ApiError(ErrorCode::kInternal, std::string("internal error: ") + e.what()));
  }
}

std::string ApiService::Impl::metrics_text() {
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
  };
  EngineStats s = engine.stats();
  gauge("kvasir_ready", "1 when the model is loaded and serving", engine.ready() ? 1 : 0);
  gauge("kvasir_requests_running", "Requests being generated", s.running);
  gauge("kvasir_requests_waiting", "Requests queued", s.waiting);
  gauge("kvasir_prompt_tokens_total", "Prompt tokens processed", double(s.tokens_prompt),
        "counter");
  gauge("kvasir_generation_tokens_total", "Tokens generated", double(s.tokens_generated),
        "counter");
  gauge("kvasir_kv_blocks_total", "KV cache blocks", double(s.blocks_total));
  gauge("kvasir_kv_blocks_free", "Free KV cache blocks", double(s.blocks_free));
  gauge("kvasir_kv_usage_ratio", "Share of KV blocks in use",
        s.blocks_total > 0 ? double(s.blocks_total - s.blocks_free) / double(s.blocks_total) : 0.0);
  gauge("kvasir_preemptions_total", "Sequences preempted for lack of KV blocks",
        double(s.preemptions), "counter");
  gauge("kvasir_stage_restarts_total", "Stage processes restarted after a loss", double(s.restarts),
        "counter");
  gauge("kvasir_requests_requeued_total", "Sequences recomputed after a stage loss",
        double(s.requeued), "counter");
  gauge("kvasir_degraded", "1 while a lost stage is being recovered", s.degraded ? 1 : 0);
  {
    std::lock_guard lk(metrics.mu);
    gauge("kvasir_requests_cancelled_total", "Requests whose client disconnected",
          double(metrics.cancelled), "counter");
    metrics.ttft.prometheus(out, "kvasir_time_to_first_token_seconds", "Time to first token");
    metrics.itl.prometheus(out, "kvasir_inter_token_latency_seconds", "Time between tokens");
    metrics.e2e.prometheus(out, "kvasir_e2e_request_latency_seconds", "Request latency");
    out +=
        "# HELP kvasir_http_responses_total HTTP responses by route and status\n"
        "# TYPE kvasir_http_responses_total counter\n";
    for (const auto& [k, v] : metrics.responses)
      out += fmt::format("kvasir_http_responses_total{{route=\"{}\",code=\"{}\"}} {}\n", k.first,
                         k.second, v);
  }
  json st = ctx.stage_stats ? ctx.stage_stats() : json::object();
  if (st.is_object() && st.contains("inflight") && st["inflight"].is_number())
    gauge("kvasir_ring_inflight", "Micro-batches in the ring", num(st, "inflight"));
  if (st.is_object() && st.contains("stages") && st["stages"].is_array()) {
    const json& stages = st["stages"];
    auto series = [&](const char* name, const char* help, const char* key, const char* type) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
      for (size_t i = 0; i < stages.size(); ++i) {
        if (!stages[i].is_object()) continue;
        std::string layers = stages[i].value("layers", std::string());
        std::string device = stages[i].value("device", std::string());
        out += fmt::format("{}{{stage=\"{}\",layers=\"{}\",device=\"{}\"}} {}\n", name, i, layers,
                           device, num(stages[i], key));
      }
    };
    series("kvasir_stage_busy_seconds_total", "Time a stage held a batch", "busy_s", "counter");
    series("kvasir_stage_starved_seconds_total", "Time a stage had nothing to take", "starved_s",
           "counter");
    series("kvasir_stage_blocked_seconds_total", "Time a stage waited on the next", "blocked_s",
           "counter");
    series("kvasir_stage_batches_total", "Micro-batches a stage ran", "batches", "counter");
    series("kvasir_stage_tokens_total", "Tokens a stage ran", "tokens", "counter");
  }
  return out;
}

// ---- DeferredEngine ----

RequestId DeferredEngine::submit(GenRequest req, EventSink sink) {
  if (Engine* e = engine_.load()) return e->submit(std::move(req), std::move(sink));
  TokenEvent ev;
  ev.finish = FinishReason::kError;
  ev.error = Status(ErrorCode::kLoading, "the model is not ready yet (still loading)");
  sink(ev);
  return 0;
}
void DeferredEngine::cancel(RequestId id) {
  if (Engine* e = engine_.load()) e->cancel(id);
}
EngineStats DeferredEngine::stats() const {
  Engine* e = engine_.load();
  return e ? e->stats() : EngineStats{};
}
RingReport DeferredEngine::ring_report() const {
  Engine* e = engine_.load();
  return e ? e->ring_report() : RingReport{};
}
bool DeferredEngine::ready() const {
  Engine* e = engine_.load();
  return e && e->ready();
}

// ---- run_api ----

int run_api(const Config& cfg, Engine& engine, const ApiContext& ctx) {
  boost::asio::io_context io(1);
  HttpServerOptions hopts;
  hopts.max_body = cfg.server.max_body;
  hopts.read_timeout =
      std::chrono::milliseconds(int64_t(std::max(0.1, cfg.server.read_timeout) * 1000));
  hopts.max_connections = cfg.server.max_connections;
  ApiOptions aopts;
  aopts.api_key = cfg.server.api_key;
  // The model file's name is accepted as "model" too (clients often send it).
  ApiContext actx = ctx;
  if (!cfg.model.path.empty()) {
    std::string file = cfg.model.path.substr(cfg.model.path.find_last_of('/') + 1);
    actx.model_aliases.push_back(file);
    if (auto dot = file.rfind(".gguf"); dot != std::string::npos)
      actx.model_aliases.push_back(file.substr(0, dot));
  }
  std::shared_ptr<ApiService> api;
  HttpServer server(io, hopts, [&api](HttpRequest req, std::shared_ptr<Responder> res) {
    api->handle(std::move(req), std::move(res));
  });
  api = std::make_shared<ApiService>(engine, actx, aopts, [&io](std::function<void()> fn) {
    boost::asio::post(io, std::move(fn));
  });
  server.listen_unix(cfg.server.socket);
  KV_LOG_INFO("api", "API on unix:{}", cfg.server.socket);
  if (!cfg.server.http.empty()) {
    uint16_t port = server.listen_tcp(cfg.server.http);
    KV_LOG_INFO("api", "API on http://{}:{}{}", parse_host_port(cfg.server.http).first, port,
                cfg.server.api_key.empty() ? "" : " (API key required)");
  }
  if (ctx.on_listening) ctx.on_listening();

  // Poll the stop flags (set from signal handlers). The stop runs in phases:
  // serving → draining (new generations 503, running ones finish) →
  // closing (last bytes flush) → done.
  using Clock = std::chrono::steady_clock;
  enum class Phase { kServing, kDraining, kClosing } phase = Phase::kServing;
  boost::asio::steady_timer timer(io);
  Clock::time_point drain_until, close_until;
  size_t drained_from = 0, aborted = 0;
  std::string abort_why;
  auto millis = [](double s) { return std::chrono::milliseconds(int64_t(std::max(0.0, s) * 1e3)); };
  std::function<void()> poll = [&] {
    auto now = Clock::now();
    if (phase == Phase::kServing && ctx.stop && ctx.stop->load()) {
      phase = Phase::kDraining;
      api->begin_drain();
      drain_until = now + millis(cfg.server.drain_timeout);
      drained_from = api->in_flight();
      KV_LOG_INFO("api", "stopping: draining {} request(s) for up to {} s", drained_from,
                  cfg.server.drain_timeout);
    }
    if (phase == Phase::kDraining) {
      bool abort_now = ctx.abort && ctx.abort->load();
      if (api->in_flight() > 0 && (abort_now || now >= drain_until)) {
        abort_why =
            abort_now ? "a second stop signal"
                      : fmt::format("server.drain_timeout passed, {} s", cfg.server.drain_timeout);
        aborted = api->abort_all(
            fmt::format("the daemon is stopping; this request was aborted ({})", abort_why));
      }
      if (api->in_flight() == 0) {
        phase = Phase::kClosing;
        close_until = now + std::min(hopts.write_timeout, std::chrono::milliseconds(5000));
      }
    }
    if (phase == Phase::kClosing && (server.busy_connections() == 0 || now >= close_until)) {
      std::string line =
          aborted ? fmt::format("drain ended ({}): {} request(s) finished, {} aborted", abort_why,
                                drained_from - std::min(drained_from, aborted), aborted)
                  : fmt::format("drained: {} request(s) finished", drained_from);
      KV_LOG_INFO("api", "{}", line);
      if (ctx.on_drained) ctx.on_drained(line);
      api->shutdown();
      server.stop();
      return;
    }
    timer.expires_after(std::chrono::milliseconds(phase == Phase::kServing ? 100 : 20));
    timer.async_wait([&](boost::system::error_code ec) {
      if (!ec) poll();
    });
  };
  poll();
  io.run();
  api->shutdown();
  return aborted ? 1 : 0;
}

}  // namespace kvasir
