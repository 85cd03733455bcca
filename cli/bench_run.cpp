// cli/bench_run.cpp — running a `kvasir bench` workload against a daemon.
//
// Threads: one dispatcher (the caller) releases each request at its arrival
// time into a queue; `workers` threads (the concurrency cap) each stream one
// request at a time over its own connection; one sampler polls
// /kvasir/v1/stats (KV waste over the run) and draws the progress bar.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "cli/bench.h"

namespace kvasir::cli {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// Source text for synthetic prompts: tokenized once, its ids are cycled to
// any length. Plain prose, so every id is an ordinary token (no specials).
constexpr const char* kPromptSource =
    "The river runs past the old mill, where the miller's daughter keeps a record of every "
    "boat that passes: its name, its cargo, the hour it came and the hour it left. In spring "
    "the water rises and the boats come faster; in autumn the barges carry grain and apples "
    "down to the city, and the bargemen stop to trade stories about storms, bridges and the "
    "price of salt. She writes it all down in a ledger with a green cover, one line for each "
    "boat, and in the evening she reads the day's lines aloud to her grandfather, who "
    "remembers when the mill wheel still turned and the whole valley smelled of flour.";

json get_json(const Endpoint& ep, const std::string& path) {
  HttpResult r = http_call(ep, "GET", path);
  if (r.status != 200) throw std::runtime_error(path + ": " + error_message(r.body));
  json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error(path + ": the daemon sent malformed JSON");
  return j;
}

std::vector<int64_t> prompt_pool(const Endpoint& ep) {
  json body = {{"prompt", kPromptSource}, {"add_special_tokens", false}};
  HttpResult r = http_call(ep, "POST", "/tokenize", body.dump());
  if (r.status != 200) throw std::runtime_error("/tokenize: " + error_message(r.body));
  json j = json::parse(r.body, nullptr, false);
  std::vector<int64_t> ids;
  if (!j.is_discarded() && j.contains("tokens") && j["tokens"].is_array())
    for (const auto& t : j["tokens"])
      if (t.is_number_integer()) ids.push_back(t.get<int64_t>());
  if (ids.size() < 16) throw std::runtime_error("/tokenize gave too few tokens for prompts");
  return ids;
}

int64_t max_model_len(const Endpoint& ep) {
  json m = get_json(ep, "/v1/models");
  if (m.contains("data") && m["data"].is_array() && !m["data"].empty() &&
      m["data"][0].contains("max_model_len") && m["data"][0]["max_model_len"].is_number_integer())
    return m["data"][0]["max_model_len"].get<int64_t>();
  return 0;  // unknown: the daemon will judge each request
}

// Streams one request; times every token (docs/cli.md "What is measured").
RequestResult run_one(const Endpoint& ep, const std::string& body) {
  RequestResult r;
  auto t0 = Clock::now(), last = t0;
  bool first = false;
  std::string error;
  SseReader sse;
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  try {
    HttpResult h = http_stream(ep, "POST", "/v1/completions", body, [&](std::string_view bytes) {
      auto now = Clock::now();
      for (const auto& d : sse.feed(bytes)) {
        if (d == "[DONE]") continue;
        json j = json::parse(d, nullptr, false);
        if (j.is_discarded() || !j.is_object()) continue;
        if (j.contains("error")) {
          error = error_message(d);
          continue;
        }
        if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
          r.prompt_tokens = u->value("prompt_tokens", int64_t(0));
          r.completion_tokens = u->value("completion_tokens", int64_t(0));
        }
        auto c = j.find("choices");
        if (c == j.end() || !c->is_array() || c->empty() || !(*c)[0].is_object()) continue;
        const json& ch = (*c)[0];
        // logprobs.tokens says how many tokens this chunk carries (text can
        // hold back a partial character or be empty for a special token).
        size_t k = 0;
        if (auto lp = ch.find("logprobs"); lp != ch.end() && lp->is_object() &&
                                           lp->contains("tokens") && (*lp)["tokens"].is_array())
          k = (*lp)["tokens"].size();
        else if (ch.contains("text") && ch["text"].is_string() && !ch["text"].empty())
          k = 1;
        if (k == 0) continue;
        if (!first) {
          first = true;
          r.ttft_s = secs(now - t0);
          // Tokens that came with the first: no gap was observed between them.
          r.itl_s.insert(r.itl_s.end(), k - 1, 0.0);
        } else {
          // k tokens after one gap: the gap is shared evenly among them.
          r.itl_s.insert(r.itl_s.end(), k, secs(now - last) / double(k));
        }
        last = now;
      }
    });
    r.e2e_s = secs(Clock::now() - t0);
    if (h.status != 200)
      r.error = "HTTP " + std::to_string(h.status) + ": " + error_message(h.body);
    else if (!error.empty())
      r.error = error;
    else if (!first)
      r.error = "the stream ended without a token";
    else
      r.ok = true;
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

std::string request_body(const BenchRequest& q, const std::vector<int64_t>& pool, uint64_t salt) {
  json b = {{"max_tokens", q.max_tokens},
            {"temperature", 0},
            {"ignore_eos", true},  // exact token counts (docs/api.md)
            {"logprobs", 0},       // per-chunk token counts; the logprob is computed anyway
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  if (!q.prompt.empty()) {
    b["prompt"] = q.prompt;
  } else {
    // Start each request elsewhere in the pool so prompts differ.
    std::vector<int64_t> ids(size_t(q.prompt_len));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = pool[(salt + i) % pool.size()];
    b["prompt"] = ids;
  }
  return b.dump();
}

bool progress_enabled(const std::string& mode) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  return isatty(STDERR_FILENO);
}

// The daemon is ready and every synthetic request fits the model's context.
void check_daemon(const Endpoint& ep, const std::vector<BenchRequest>& workload) {
  HttpResult h = http_call(ep, "GET", "/health");
  if (h.status != 200) throw std::runtime_error("kvasird at " + ep.describe() + " is not ready");
  int64_t ctx = max_model_len(ep);
  for (size_t i = 0; i < workload.size(); ++i) {
    const auto& q = workload[i];
    if (ctx > 0 && q.prompt.empty() && int64_t(q.prompt_len) + q.max_tokens > ctx)
      throw std::runtime_error("request " + std::to_string(i) + ": prompt length " +
                               std::to_string(q.prompt_len) + " + max tokens " +
                               std::to_string(q.max_tokens) + " exceeds the model's context (" +
                               std::to_string(ctx) + ")");
  }
}

// The request bodies, made before the run starts (synthetic prompts from
// the daemon's tokens of kPromptSource, each starting elsewhere in it).
std::vector<std::string> request_bodies(const Endpoint& ep, const BenchOptions& o,
                                        const std::vector<BenchRequest>& workload) {
  bool synthetic = std::any_of(workload.begin(), workload.end(),
                               [](const BenchRequest& q) { return q.prompt.empty(); });
  std::vector<int64_t> pool = synthetic ? prompt_pool(ep) : std::vector<int64_t>{};
  std::vector<std::string> bodies(workload.size());
  std::mt19937_64 rng(o.seed ^ 0x6b76617369726265ull);
  for (size_t i = 0; i < workload.size(); ++i)
    bodies[i] = request_body(workload[i], pool, synthetic ? rng() % pool.size() : 0);
  return bodies;
}

// One run: the caller dispatches each request at its arrival time to
// `workers` threads (each streams one at a time); a sampler polls the
// stats and draws the progress bar.
class Run {
 public:
  Run(const Endpoint& ep, const BenchOptions& o, const std::vector<BenchRequest>& workload,
      const std::vector<std::string>& bodies)
      : results(workload.size()), ep_(ep), o_(o), workload_(workload), bodies_(bodies) {}

  // Sends every request, waits for the last; returns the wall time (s).
  double go() {
    size_t n_workers = std::min<size_t>(
        workload_.size(), o_.concurrency > 0 ? size_t(o_.concurrency) : size_t(kMaxBenchWorkers));
    n_workers = std::min<size_t>(n_workers, kMaxBenchWorkers);
    t0_ = Clock::now();
    std::vector<std::thread> workers;
    for (size_t w = 0; w < n_workers; ++w) workers.emplace_back([this] { work(); });
    bar_ = progress_enabled(o_.progress);
    std::thread sampler([this] { sample(); });
    dispatch();
    for (auto& t : workers) t.join();
    double wall = std::chrono::duration<double>(Clock::now() - t0_).count();
    sampling_ = false;
    sampler.join();
    if (bar_) {
      draw_bar();  // the final state, 100%
      std::fprintf(stderr, "\n");
    }
    return wall;
  }

  std::vector<RequestResult> results;
  std::vector<StatsSample> samples;  // the stats polled during the run

 private:
  // Releases each request at its arrival time, then lets the workers end.
  void dispatch() {
    for (size_t i = 0; i < workload_.size(); ++i) {
      std::this_thread::sleep_until(t0_ +
                                    std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(workload_[i].arrival_s)));
      {
        std::lock_guard lk(mu_);
        ready_.push_back(i);
      }
      cv_.notify_one();
    }
    {
      std::lock_guard lk(mu_);
      closing_ = true;
    }
    cv_.notify_all();
  }

  // A worker: runs released requests, one at a time, until the dispatch ends.
  void work() {
    for (;;) {
      size_t i;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return closing_ || !ready_.empty(); });
        if (ready_.empty()) return;
        i = ready_.front();
        ready_.pop_front();
      }
      results[i] = run_one(ep_, bodies_[i]);
      out_tokens_ += results[i].completion_tokens;
      failed_ += !results[i].ok;
      ++done_;
    }
  }

  void sample() {
    auto next = Clock::now();
    while (sampling_) {
      try {
        samples.push_back(parse_stats(get_json(ep_, "/kvasir/v1/stats")));
      } catch (const std::exception&) {
        // A missed sample only thins the waste average.
      }
      if (bar_) draw_bar();
      next += std::chrono::milliseconds(200);
      std::this_thread::sleep_until(next);
    }
  }

  void draw_bar() {
    size_t d = done_, n = workload_.size();
    int fill = int(40 * d / n);
    double el = std::chrono::duration<double>(Clock::now() - t0_).count();
    std::fprintf(stderr, "\r[%-40s] %zu/%zu  %zu failed  %.1f output tok/s ",
                 std::string(size_t(fill), '#').c_str(), d, n, size_t(failed_),
                 el > 0 ? double(out_tokens_) / el : 0.0);
    std::fflush(stderr);
  }

  const Endpoint& ep_;
  const BenchOptions& o_;
  const std::vector<BenchRequest>& workload_;
  const std::vector<std::string>& bodies_;
  Clock::time_point t0_;
  bool bar_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> ready_;  // released, not yet taken by a worker
  bool closing_ = false;
  std::atomic<size_t> done_{0}, failed_{0};
  std::atomic<int64_t> out_tokens_{0};
  std::atomic<bool> sampling_{true};
};

}  // namespace

json run_bench(const Endpoint& ep, const BenchOptions& o,
               const std::vector<BenchRequest>& workload) {
  if (workload.empty()) throw std::runtime_error("no requests to send");
  if (workload.size() > size_t(kMaxBenchRequests))
    throw std::runtime_error("too many requests (at most " + std::to_string(kMaxBenchRequests) +
                             ")");
  check_daemon(ep, workload);
  std::vector<std::string> bodies = request_bodies(ep, o, workload);
  StatsSample before = parse_stats(get_json(ep, "/kvasir/v1/stats"));
  Run run(ep, o, workload, bodies);
  double wall = run.go();
  StatsSample after = parse_stats(get_json(ep, "/kvasir/v1/stats"));
  return summarize(run.results, wall, before, after, run.samples, o);
}

}  // namespace kvasir::cli
