// daemon/api/api.cpp — the service, its route table and the small routes
// (health, models, tokenize, detokenize), and DeferredEngine. Generation is
// in api_generate.cpp, stats and metrics in api_stats.cpp, run_api in
// api_run.cpp.
#include "daemon/api/api.h"

#include <fmt/format.h>

#include <string_view>

#include "base/check.h"
#include "daemon/api/api_internal.h"

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

// ---- service ----

ApiService::ApiService(Engine& engine, ApiContext ctx, ApiOptions opts,
                       std::function<void(std::function<void()>)> post)
    : impl_(std::make_shared<Impl>(engine, std::move(ctx), std::move(opts), std::move(post))) {
  if (impl_->ctx.codec && !impl_->ctx.facts)
    impl_->ctx.facts = std::make_shared<const ModelFacts>(model_facts(*impl_->ctx.codec));
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
  for (const auto& a : ctx.listed_aliases)
    if (model == a) return;
  throw ApiError(
      ErrorCode::kModelNotFound,
      fmt::format("the model '{}' does not exist; this server serves '{}'", model, ctx.model_name),
      "model");
}

// ---- routing ----

namespace {

using Impl = ApiService::Impl;

struct Route {
  std::string_view path;  // the path, or (prefix) what it starts with
  bool prefix;
  std::string_view method;
  bool needs_codec;        // 503 not_ready without a tokenizer
  std::string_view label;  // the route in kvasir_http_responses_total
  Impl::Handler handler;
};

const Route kRoutes[] = {
    {"/v1/completions", false, "POST", true, "/v1/completions", &Impl::serve_completions},
    {"/v1/chat/completions", false, "POST", true, "/v1/chat/completions", &Impl::serve_chat},
    {"/health", false, "GET", false, "/health", &Impl::serve_health},
    {"/v1/models", false, "GET", false, "/v1/models", &Impl::serve_models},
    {"/v1/models/", true, "GET", false, "/v1/models/{id}", &Impl::serve_model},
    {"/tokenize", false, "POST", true, "/tokenize", &Impl::serve_tokenize},
    {"/detokenize", false, "POST", true, "/detokenize", &Impl::serve_detokenize},
    {"/kvasir/v1/stats", false, "GET", false, "/kvasir/v1/stats", &Impl::serve_stats},
    {"/metrics", false, "GET", false, "/metrics", &Impl::serve_metrics},
};

const Route* find_route(const std::string& path) {
  for (const Route& r : kRoutes)
    if (r.prefix ? path.rfind(r.path, 0) == 0 : path == r.path) return &r;
  return nullptr;
}

}  // namespace

void ApiService::Impl::handle(HttpRequest& req, const Res& res) {
  const Route* r = find_route(req.path);
  // Unknown paths share one name: a client cannot grow the metrics without bound.
  const std::string route(r ? r->label : "(unknown)");
  try {
    check_api_key(req);
    if (!r)
      throw ApiError(ErrorCode::kNotFound, fmt::format("no route {} {}", req.method, req.path));
    if (r->needs_codec && !ctx.codec)
      throw ApiError(ErrorCode::kLoading, "no tokenizer is loaded for this model");
    if (req.method != r->method)
      throw ApiError(ErrorCode::kMethodNotAllowed,
                     fmt::format("{} takes {} (not {})", req.path, r->method, req.method));
    (this->*(r->handler))(req, res, route);
  } catch (const ApiError& e) {
    send_error(res, route, e);
  } catch (const Error& e) {
    send_error(res, route, ApiError(e.code(), e.message()));
  } catch (const std::exception& e) {
    send_error(res, route,
               ApiError(ErrorCode::kInternal, std::string("internal error: ") + e.what()));
  }
}

// TCP only (the Unix socket relies on file permissions); /health stays open
// for load balancers.
void ApiService::Impl::check_api_key(const HttpRequest& req) const {
  if (!req.tcp || opts.api_key.empty() || req.path == "/health") return;
  if (!constant_time_equal(req.header("authorization"), "Bearer " + opts.api_key))
    throw ApiError(ErrorCode::kUnauthenticated,
                   "invalid or missing API key (Authorization: Bearer KEY)");
}

// ---- the small routes ----

void ApiService::Impl::serve_completions(const HttpRequest& req, const Res& res,
                                         const std::string&) {
  generate(req, res, /*chat=*/false);
}

void ApiService::Impl::serve_chat(const HttpRequest& req, const Res& res, const std::string&) {
  generate(req, res, /*chat=*/true);
}

void ApiService::Impl::serve_health(const HttpRequest&, const Res& res, const std::string& route) {
  // Load balancers and `kvasir status` move away from a stopping daemon.
  if (draining)
    return send_json(res, route, 503, {{"status", "stopping"}, {"in_flight", gens_size()}});
  // Recovery (docs/recovery.md): "degraded" while a lost stage is being
  // restarted (requests are still taken; they wait), "unhealthy" once the
  // restart limit is hit (work is refused).
  EngineStats es = engine.stats();
  if (es.state == EngineState::kFailed)
    return send_json(res, route, 503, {{"status", "unhealthy"}, {"error", es.failure}});
  if (engine.ready()) {
    json body = {{"status", es.degraded ? "degraded" : "ok"}, {"restarts", es.restarts}};
    if (es.degraded) body["last_fault"] = es.last_fault;
    // A ring across hosts: each worker's link, "serving" or why not.
    for (const LinkHealth& l : es.links)
      body["workers"].push_back({{"host", l.host}, {"state", l.state}});
    return send_json(res, route, 200, body);
  }
  json body = {{"status", "loading"}};
  if (ctx.loading) body["loading"] = ctx.loading();
  send_json(res, route, 503, body);
}

json ApiService::Impl::model_json(const std::string& id) const {
  json m = {{"id", id},
            {"object", "model"},
            {"created", created_unix},
            {"owned_by", "kvasir"},
            {"root", ctx.model_name}};
  if (const int32_t max_len = max_model_len(); max_len > 0) m["max_model_len"] = max_len;
  return m;
}

void ApiService::Impl::serve_models(const HttpRequest&, const Res& res, const std::string& route) {
  json data = json::array({model_json(ctx.model_name)});
  for (const auto& a : ctx.listed_aliases) data.push_back(model_json(a));
  send_json(res, route, 200, {{"object", "list"}, {"data", std::move(data)}});
}

namespace {

// RFC 3986 percent-decoding of one path segment: the id /v1/models lists may
// hold spaces or slashes, which a client sends as %20 and %2F. A '%' not
// followed by two hex digits is refused, not passed through.
std::string percent_decode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int h = i + 2 < s.size() ? hex(s[i + 1]) : -1;
    const int l = i + 2 < s.size() ? hex(s[i + 2]) : -1;
    if (h < 0 || l < 0)
      throw ApiError(ErrorCode::kInvalidArgument, "the model id in the path has a bad %-escape",
                     "model");
    out += char(h * 16 + l);
    i += 2;
  }
  return out;
}

}  // namespace

void ApiService::Impl::serve_model(const HttpRequest& req, const Res& res,
                                   const std::string& route) {
  const std::string_view id = std::string_view(req.path).substr(std::string_view("/v1/models/").size());
  const std::string name = percent_decode(id);
  check_model(name);
  send_json(res, route, 200, model_json(name));
}

void ApiService::Impl::serve_tokenize(const HttpRequest& req, const Res& res,
                                      const std::string& route) {
  TokenizeRequest t = parse_tokenize_request(req.body);
  // Messages: the path of a chat request (chat_prompt), so the count is
  // what a chat request with them would use.
  std::vector<int32_t> ids =
      t.chat ? chat_prompt(*t.chat) : ctx.codec->encode(*t.prompt, t.add_special_tokens, true);
  json body = {{"tokens", ids}, {"count", ids.size()}};
  if (const int32_t max_len = max_model_len(); max_len > 0) body["max_model_len"] = max_len;
  send_json(res, route, 200, body);
}

void ApiService::Impl::serve_detokenize(const HttpRequest& req, const Res& res,
                                        const std::string& route) {
  auto ids = parse_detokenize_request(req.body);
  const int32_t vocab = ctx.facts->vocab_size;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw ApiError(
          ErrorCode::kInvalidArgument,
          fmt::format("tokens[{}]: token id {} is out of range (vocabulary: {})", i, ids[i], vocab),
          "tokens");
  send_json(res, route, 200, {{"prompt", ctx.codec->decode(ids, false)}});
}

void ApiService::Impl::serve_stats(const HttpRequest&, const Res& res, const std::string& route) {
  send_json(res, route, 200, stats_json());
}

void ApiService::Impl::serve_metrics(const HttpRequest&, const Res& res, const std::string&) {
  res->respond(200, "text/plain; version=0.0.4", metrics_text());
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
void DeferredEngine::stop_choice(RequestId id, int32_t index) {
  if (Engine* e = engine_.load()) e->stop_choice(id, index);
}
EngineStats DeferredEngine::stats() const {
  Engine* e = engine_.load();
  return e ? e->stats() : EngineStats{};
}
RingReport DeferredEngine::ring_report() const {
  Engine* e = engine_.load();
  return e ? e->ring_report() : planned_;
}
bool DeferredEngine::ready() const {
  Engine* e = engine_.load();
  return e && e->ready();
}
int32_t DeferredEngine::max_sequence_tokens() const {
  Engine* e = engine_.load();
  return e ? e->max_sequence_tokens() : 0;
}

}  // namespace kvasir
