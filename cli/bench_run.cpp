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
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>

#include "base/sse.h"
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

// Tokens a chunk carries: logprobs.tokens says how many (text can hold
// back a partial character or be empty for a special token).
size_t chunk_tokens(const json& ch) {
  if (auto lp = ch.find("logprobs");
      lp != ch.end() && lp->is_object() && lp->contains("tokens") && (*lp)["tokens"].is_array())
    return (*lp)["tokens"].size();
  return ch.contains("text") && ch["text"].is_string() && !ch["text"].empty() ? 1 : 0;
}

// The timing of one streamed request, chunk by chunk (docs/cli.md "What is
// measured"). Choices (n > 1) are timed apart: TTFT is the request's first
// token, each ITL a gap within one choice.
struct StreamTimer {
  using Clock = std::chrono::steady_clock;
  explicit StreamTimer(RequestResult& r) : r_(r), t0(Clock::now()) {}
  void on_event(const json& j, Clock::time_point now) {
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      r_.prompt_tokens = u->value("prompt_tokens", int64_t(0));
      r_.completion_tokens = u->value("completion_tokens", int64_t(0));
      if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
        r_.cached_tokens = d->value("cached_tokens", int64_t(0));
    }
    auto c = j.find("choices");
    if (c == j.end() || !c->is_array() || c->empty() || !(*c)[0].is_object()) return;
    const json& ch = (*c)[0];
    const int index = ch.value("index", 0);
    if (index == 0 && ch.contains("text") && ch["text"].is_string())
      r_.text += ch["text"].get<std::string>();
    const size_t k = chunk_tokens(ch);
    if (k == 0) return;
    auto it = last_.find(index);
    if (!first) {
      first = true;
      r_.ttft_s = secs(now - t0);
    }
    if (it == last_.end()) {
      // Tokens that came with a choice's first: no gap was observed between them.
      r_.itl_s.insert(r_.itl_s.end(), k - 1, 0.0);
    } else {
      // k tokens after one gap: the gap is shared evenly among them.
      r_.itl_s.insert(r_.itl_s.end(), k, secs(now - it->second) / double(k));
    }
    last_[index] = now;
  }
  static double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

  RequestResult& r_;
  Clock::time_point t0;
  bool first = false;
  std::map<int, Clock::time_point> last_;
};

// Streams one request; times every token.
RequestResult run_one(const Endpoint& ep, const std::string& body) {
  RequestResult r;
  StreamTimer timer(r);
  std::string error;
  SseParser sse;
  try {
    HttpResult h = http_stream(ep, "POST", "/v1/completions", body, [&](std::string_view bytes) {
      auto now = Clock::now();
      for (const auto& ev : sse.feed(bytes)) {
        const std::string& d = ev.data;
        if (d == "[DONE]") continue;
        json j = json::parse(d, nullptr, false);
        if (j.is_discarded() || !j.is_object()) continue;
        if (j.contains("error"))
          error = error_message(d);
        else
          timer.on_event(j, now);
      }
    });
    r.e2e_s = StreamTimer::secs(Clock::now() - timer.t0);
    if (h.status != 200)
      r.error = "HTTP " + std::to_string(h.status) + ": " + error_message(h.body);
    else if (!error.empty())
      r.error = error;
    else if (!timer.first)
      r.error = "the stream ended without a token";
    else
      r.ok = true;
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

// The body of a request whose prompt is `prompt` (text or token ids).
std::string request_body(const BenchRequest& q, json prompt) {
  json b = {{"max_tokens", q.max_tokens},
            {"temperature", 0},
            {"ignore_eos", true},  // exact token counts (docs/api.md)
            {"logprobs", 0},       // per-chunk token counts; the logprob is computed anyway
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"prompt", std::move(prompt)}};
  if (q.n > 1) b["n"] = q.n;
  return b.dump();
}

// `len` ids of the pool from `start` on, cycling.
std::vector<int64_t> pool_ids(const std::vector<int64_t>& pool, uint64_t start, int32_t len) {
  std::vector<int64_t> ids(size_t(std::max(len, 0)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = pool[(start + i) % pool.size()];
  return ids;
}

// Where group g's shared prefix starts in the pool: fixed per group, so
// every request of the group sends the same tokens.
uint64_t group_start(int32_t g, size_t pool_size) {
  return (uint64_t(g) * 0x9E3779B97F4A7C15ull >> 17) % pool_size;
}

std::string detokenize(const Endpoint& ep, const std::vector<int64_t>& ids) {
  HttpResult r = http_call(ep, "POST", "/detokenize", json{{"tokens", ids}}.dump());
  json j = json::parse(r.body, nullptr, false);
  if (r.status != 200 || j.is_discarded() || !j.contains("prompt") || !j["prompt"].is_string())
    throw std::runtime_error("/detokenize: " + error_message(r.body));
  return j["prompt"].get<std::string>();
}

bool progress_enabled(const std::string& mode) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  return isatty(STDERR_FILENO);
}

// The daemon is ready and every synthetic request fits the model's context
// (a chat's later turns grow with its replies: the daemon judges those).
void check_daemon(const Endpoint& ep, const std::vector<BenchRequest>& workload) {
  HttpResult h = http_call(ep, "GET", "/health");
  if (h.status != 200) throw std::runtime_error("kvasird at " + ep.describe() + " is not ready");
  int64_t ctx = max_model_len(ep);
  for (size_t i = 0; i < workload.size(); ++i) {
    const auto& q = workload[i];
    const int64_t len = int64_t(q.prompt_len) + q.prefix_len;
    if (ctx > 0 && q.prompt.empty() && len + q.max_tokens > ctx)
      throw std::runtime_error("request " + std::to_string(i) + ": prompt length " +
                               std::to_string(len) + " + max tokens " +
                               std::to_string(q.max_tokens) + " exceeds the model's context (" +
                               std::to_string(ctx) + ")");
  }
}

// What the run sends, made before it starts. Synthetic prompts are the
// daemon's tokens of kPromptSource, each request's own part starting
// elsewhere in it, after its group's shared prefix. A chat turn's prompt is
// made when it is sent (it holds the previous reply): here its own part and
// system prompt as text, and the links between turns.
struct Prepared {
  std::vector<std::string> bodies;  // whole bodies; empty for chat turns
  std::vector<std::string> user, system;
  std::vector<int64_t> prev, next;  // a chat's previous and next turn (-1: none)
  std::vector<int64_t> shared;      // shared prefix tokens of each request's prompt
};

// Where request i's own part starts in the pool: a shuffled order of every
// offset, so that no two requests (up to the pool's size) share their first
// token's position, and so no prefix that the workload does not mean to
// share (two requests from the same offset would share whole blocks).
struct Offsets {
  Offsets(size_t pool, std::mt19937_64& rng) : order(pool) {
    std::iota(order.begin(), order.end(), uint64_t(0));
    std::shuffle(order.begin(), order.end(), rng);
  }
  uint64_t operator()(size_t i) const { return order[i % order.size()]; }
  std::vector<uint64_t> order;
};

void prepare_chats(const Endpoint& ep, const std::vector<BenchRequest>& workload,
                   const std::vector<int64_t>& pool, const Offsets& at, Prepared& p) {
  std::map<int32_t, int64_t> last;  // conversation → its latest turn so far
  for (size_t i = 0; i < workload.size(); ++i) {
    const BenchRequest& q = workload[i];
    if (q.conversation < 0) continue;
    p.user[i] = !q.prompt.empty() ? q.prompt : detokenize(ep, pool_ids(pool, at(i), q.prompt_len));
    if (q.prefix_len > 0)
      p.system[i] =
          detokenize(ep, pool_ids(pool, group_start(q.prefix_group, pool.size()), q.prefix_len));
    auto it = last.find(q.conversation);
    if (it != last.end()) {
      p.prev[i] = it->second;
      p.next[size_t(it->second)] = int64_t(i);
    }
    last[q.conversation] = int64_t(i);
  }
}

Prepared prepare(const Endpoint& ep, const BenchOptions& o,
                 const std::vector<BenchRequest>& workload) {
  bool synthetic = std::any_of(workload.begin(), workload.end(), [](const BenchRequest& q) {
    return q.prompt.empty() || q.prefix_len > 0;
  });
  std::vector<int64_t> pool = synthetic ? prompt_pool(ep) : std::vector<int64_t>{};
  const size_t n = workload.size();
  Prepared p{std::vector<std::string>(n), std::vector<std::string>(n), std::vector<std::string>(n),
             std::vector<int64_t>(n, -1), std::vector<int64_t>(n, -1), std::vector<int64_t>(n, 0)};
  std::mt19937_64 rng(o.seed ^ 0x6b76617369726265ull);
  const Offsets at(std::max<size_t>(pool.size(), 1), rng);
  for (size_t i = 0; i < n; ++i) {
    const BenchRequest& q = workload[i];
    p.shared[i] = q.prefix_len;
    if (q.conversation >= 0) continue;
    if (!q.prompt.empty()) {
      p.bodies[i] = request_body(q, q.prompt);
      continue;
    }
    std::vector<int64_t> ids;
    if (q.prefix_len > 0)
      ids = pool_ids(pool, group_start(q.prefix_group, pool.size()), q.prefix_len);
    const std::vector<int64_t> own = pool_ids(pool, at(i), q.prompt_len);
    ids.insert(ids.end(), own.begin(), own.end());
    p.bodies[i] = request_body(q, ids);
  }
  prepare_chats(ep, workload, pool, at, p);
  return p;
}

// One run: the caller dispatches each request at its arrival time to
// `workers` threads (each streams one at a time); a sampler polls the
// stats and draws the progress bar.
class Run {
 public:
  Run(const Endpoint& ep, const BenchOptions& o, const std::vector<BenchRequest>& workload,
      const Prepared& prep)
      : results(workload.size()),
        ep_(ep),
        o_(o),
        workload_(workload),
        prep_(prep),
        prompts_(workload.size()),
        arrived_(workload.size(), false),
        finished_(workload.size(), false),
        unreleased_(workload.size()) {}

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
  // Releases each request at its arrival time (a chat turn also waits for
  // its previous turn: the worker that finishes that one releases it),
  // then lets the workers end once nothing is left to release.
  void dispatch() {
    for (size_t i = 0; i < workload_.size(); ++i) {
      std::this_thread::sleep_until(t0_ +
                                    std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(workload_[i].arrival_s)));
      std::lock_guard lk(mu_);
      arrived_[i] = true;
      const int64_t prev = prep_.prev[i];
      if (prev < 0 || finished_[size_t(prev)]) release(i);
    }
    {
      std::lock_guard lk(mu_);
      closing_ = true;
    }
    cv_.notify_all();
  }

  // Under mu_.
  void release(size_t i) {
    ready_.push_back(i);
    unreleased_--;
    cv_.notify_one();
  }

  // A chat turn's prompt: the conversation so far (the previous turn's
  // prompt and reply), then this turn as the user's.
  std::string chat_body(size_t i) {
    const int64_t prev = prep_.prev[i];
    std::string text;
    {
      std::lock_guard lk(mu_);
      if (prev >= 0)
        text = prompts_[size_t(prev)] + results[size_t(prev)].text + "\n";
      else if (!prep_.system[i].empty())
        text = prep_.system[i] + "\n\n";
    }
    text += "User: " + prep_.user[i] + "\nAssistant:";
    prompts_[i] = text;
    return request_body(workload_[i], text);
  }

  // A worker: runs released requests, one at a time, until none is left.
  void work() {
    for (;;) {
      size_t i;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return (closing_ && unreleased_ == 0) || !ready_.empty(); });
        if (ready_.empty()) return;
        i = ready_.front();
        ready_.pop_front();
      }
      const bool chat = workload_[i].conversation >= 0;
      RequestResult r = run_one(ep_, chat ? chat_body(i) : prep_.bodies[i]);
      r.shared_tokens = prep_.shared[i];
      out_tokens_ += r.completion_tokens;
      failed_ += !r.ok;
      ++done_;
      std::lock_guard lk(mu_);
      results[i] = std::move(r);
      finished_[i] = true;
      const int64_t next = prep_.next[i];
      if (next >= 0 && arrived_[size_t(next)]) release(size_t(next));
      if (closing_ && unreleased_ == 0) cv_.notify_all();
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
  const Prepared& prep_;
  std::vector<std::string> prompts_;  // chat turns: the prompt sent
  Clock::time_point t0_;
  bool bar_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> ready_;  // released, not yet taken by a worker
  std::vector<bool> arrived_, finished_;
  size_t unreleased_;  // not yet in ready_
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
  const Prepared prep = prepare(ep, o, workload);
  StatsSample before = parse_stats(get_json(ep, "/kvasir/v1/stats"));
  Run run(ep, o, workload, prep);
  double wall = run.go();
  StatsSample after = parse_stats(get_json(ep, "/kvasir/v1/stats"));
  return summarize(run.results, wall, before, after, run.samples, o);
}

}  // namespace kvasir::cli
