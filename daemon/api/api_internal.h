// daemon/api/api_internal.h — shared state of the API's routes (api.cpp), its
// statistics (api_stats.cpp) and its generation requests (api_generate.cpp).
// Not a public header.
#pragma once

#include <chrono>
#include <map>
#include <mutex>

#include "daemon/api/api.h"

namespace kvasir {

// A Prometheus histogram with fixed bounds (seconds).
struct Histogram {
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1) {}
  void observe(double v);
  // The q-quantile estimated from the buckets (upper bound of its bucket).
  double quantile(double q) const;
  void prometheus(std::string& out, const std::string& name, const std::string& help) const;

  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t n = 0;
};

struct ApiMetrics {
  std::mutex mu;
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram itl{{0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5}};
  Histogram e2e{{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  std::map<std::pair<std::string, int>, uint64_t> responses;  // (route, status) → count
  uint64_t cancelled = 0;                                     // client disconnects
  uint64_t stopped_by_string = 0;
};

// Lets engine callbacks reach the io thread only while the API is alive.
struct PostGate {
  std::mutex mu;
  bool open = true;
  std::function<void(std::function<void()>)> post;
  void run(std::function<void()> fn) {
    std::lock_guard lk(mu);
    if (open) post(std::move(fn));
  }
  void close() {
    std::lock_guard lk(mu);
    open = false;
  }
};

class Generation;

struct ApiService::Impl : std::enable_shared_from_this<ApiService::Impl> {
  Impl(Engine& e, ApiContext c, ApiOptions o, std::function<void(std::function<void()>)> post)
      : engine(e), ctx(std::move(c)), opts(std::move(o)), gate(std::make_shared<PostGate>()) {
    gate->post = std::move(post);
  }

  using Res = std::shared_ptr<Responder>;
  // One route: the request, its responder, and the route's name in
  // kvasir_http_responses_total.
  using Handler = void (Impl::*)(const HttpRequest&, const Res&, const std::string& route);

  // Finds the route (api.cpp's table), checks the API key, the method and
  // the codec, runs the route's handler, and answers what it throws.
  void handle(HttpRequest& req, const Res& res);
  void check_api_key(const HttpRequest& req) const;
  void check_model(const std::string& model) const;

  // The routes (api.cpp; statistics in api_stats.cpp).
  void serve_completions(const HttpRequest& req, const Res& res, const std::string& route);
  void serve_chat(const HttpRequest& req, const Res& res, const std::string& route);
  void serve_health(const HttpRequest& req, const Res& res, const std::string& route);
  void serve_models(const HttpRequest& req, const Res& res, const std::string& route);
  void serve_model(const HttpRequest& req, const Res& res, const std::string& route);
  void serve_tokenize(const HttpRequest& req, const Res& res, const std::string& route);
  void serve_detokenize(const HttpRequest& req, const Res& res, const std::string& route);
  void serve_stats(const HttpRequest& req, const Res& res, const std::string& route);
  void serve_metrics(const HttpRequest& req, const Res& res, const std::string& route);

  // POST /v1/completions and /v1/chat/completions (api_generate.cpp).
  void generate(const HttpRequest& req, const Res& res, bool chat);
  std::vector<int32_t> chat_prompt(const ChatTurns& turns) const;
  std::vector<int32_t> completion_prompt(const CompletionRequest& req, std::string& echo) const;
  void check_context(CompletionRequest& req, size_t prompt_tokens) const;
  // The most tokens a sequence may reach: the engine's figure once the
  // stages are up (the context, or less where the KV pool holds less),
  // the model's context before; 0 = unknown.
  int32_t max_model_len() const;
  // The bodies of /v1/models entries, /kvasir/v1/stats and /metrics.
  nlohmann::json model_json(const std::string& id) const;  // one /v1/models entry
  nlohmann::json stats_json();
  std::string metrics_text();

  void send_json(const std::shared_ptr<Responder>& res, const std::string& route, int status,
                 const nlohmann::json& body);
  void send_error(const std::shared_ptr<Responder>& res, const std::string& route,
                  const ApiError& e);
  void count(const std::string& route, int status);

  Engine& engine;
  ApiContext ctx;
  ApiOptions opts;
  std::shared_ptr<PostGate> gate;
  ApiMetrics metrics;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  int64_t created_unix = 0;
  std::atomic<uint64_t> next_serial{1};
  std::atomic<bool> draining{false};
  std::mutex gens_mu;
  std::map<uint64_t, std::weak_ptr<Generation>> gens;  // in flight, for shutdown
  size_t gens_size() {
    std::lock_guard lk(gens_mu);
    return gens.size();
  }
};

// The ApiError of an engine error: its code, its message, and "prompt" as
// the parameter when the prompt is at fault. The HTTP status, type and code
// string come from the table (errors.h), like every other error's.
ApiError engine_error(const Status& error);

}  // namespace kvasir
