// cli/top.cpp — see top.h.
#include "cli/top.h"

#include <fmt/format.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>

namespace kvasir::cli {

using nlohmann::json;

namespace {
double num(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}
const json& sub(const json& j, const char* k) {
  static const json empty = json::object();
  auto it = j.find(k);
  return it != j.end() && it->is_object() ? *it : empty;
}
}  // namespace

// The prefix cache's figures: the hit rate over the interval.
void prefix_view(TopView& v, const json& pc, const json* prev) {
  v.prefix_caching = pc.value("enabled", false);
  v.blocks_cached = int64_t(num(pc, "blocks_cached"));
  v.blocks_evictable = int64_t(num(pc, "blocks_evictable"));
  double q = num(pc, "queries"), h = num(pc, "hits");
  if (prev) q -= num(*prev, "queries"), h -= num(*prev, "hits");
  v.prefix_hit_rate = q > 0 ? h / q : -1;
}

TopView make_view(const json& now, const json* prev, double dt) {
  TopView v;
  v.model = now.value("model", std::string("?"));
  v.ready = now.value("ready", false);
  v.inflight = int(num(now, "inflight"));
  const json& e = sub(now, "engine");
  v.waiting = int(num(e, "waiting"));
  v.running = int(num(e, "running"));
  v.blocks_total = int64_t(num(e, "blocks_total"));
  v.blocks_free = int64_t(num(e, "blocks_free"));
  v.preemptions = int64_t(num(e, "preemptions"));
  v.restarts = int64_t(num(e, "restarts"));
  double up = std::max(num(now, "uptime_s"), 1e-9);
  if (prev) {
    const json& pe = sub(*prev, "engine");
    v.preemptions_delta = v.preemptions - int64_t(num(pe, "preemptions"));
    v.gen_tokens_per_s = (num(e, "tokens_generated") - num(pe, "tokens_generated")) / dt;
    v.prompt_tokens_per_s = (num(e, "tokens_prompt") - num(pe, "tokens_prompt")) / dt;
  } else {
    v.gen_tokens_per_s = num(e, "tokens_generated") / up;
    v.prompt_tokens_per_s = num(e, "tokens_prompt") / up;
  }
  prefix_view(v, sub(e, "prefix_cache"),
              prev ? &sub(sub(*prev, "engine"), "prefix_cache") : nullptr);
  const json& lat = sub(now, "latency");
  v.ttft_p50 = num(sub(lat, "ttft"), "p50_s");
  v.ttft_p99 = num(sub(lat, "ttft"), "p99_s");
  v.itl_p50 = num(sub(lat, "itl"), "p50_s");
  v.itl_p99 = num(sub(lat, "itl"), "p99_s");
  auto stages = now.find("stages");
  if (stages != now.end() && stages->is_array()) {
    for (size_t i = 0; i < stages->size(); ++i) {
      const json& s = (*stages)[i];
      if (!s.is_object()) continue;
      StageView st;
      st.layers = s.value("layers", std::string("?"));
      st.device = s.value("device", std::string("?"));
      const json* p = nullptr;
      if (prev && prev->contains("stages") && (*prev)["stages"].is_array() &&
          i < (*prev)["stages"].size())
        p = &(*prev)["stages"][i];
      double span = p ? dt : up;
      auto d = [&](const char* k) { return num(s, k) - (p ? num(*p, k) : 0.0); };
      st.busy = std::clamp(d("busy_s") / span, 0.0, 1.0);
      st.starved = std::clamp(d("starved_s") / span, 0.0, 1.0);
      st.blocked = std::clamp(d("blocked_s") / span, 0.0, 1.0);
      // A stage's counters and our clock are read at different instants, so
      // the shares can add up to a little over the interval; they partition
      // the stage's time, so scale them back to sum to at most 100%.
      double sum = st.busy + st.starved + st.blocked;
      if (sum > 1.0) st.busy /= sum, st.starved /= sum, st.blocked /= sum;
      st.batches_per_s = d("batches") / span;
      st.tokens_per_s = d("tokens") / span;
      v.stages.push_back(st);
    }
  }
  return v;
}

std::string diagnose(const TopView& v) {
  if (!v.ready) return "loading: the model is not ready yet";
  bool kv_low = v.blocks_total > 0 && double(v.blocks_free) < 0.05 * double(v.blocks_total);
  if (v.preemptions_delta > 0 || (kv_low && v.waiting > 0))
    return "KV-bound: sequences are preempted or wait for blocks; raise kv.memory or lower "
           "scheduler.max_num_seqs";
  if (v.stages.empty()) return "no stage statistics";
  double min_busy = 1, max_busy = 0;
  size_t slow = 0;
  for (size_t i = 0; i < v.stages.size(); ++i) {
    if (v.stages[i].busy > max_busy) max_busy = v.stages[i].busy, slow = i;
    min_busy = std::min(min_busy, v.stages[i].busy);
  }
  if (v.running == 0 && v.waiting == 0) return "idle: no requests running";
  if (max_busy - min_busy > 0.15)
    return fmt::format(
        "unbalanced: stage {} (layers {}) is busy {:.0f}% vs {:.0f}% for the least; "
        "move layers off it in [[stages]] layers",
        slow, v.stages[slow].layers, max_busy * 100, min_busy * 100);
  if (v.itl_p50 > 0 && v.itl_p99 > 4 * v.itl_p50 && v.prompt_tokens_per_s > v.gen_tokens_per_s)
    return "prefill-heavy: long prompts stall decodes (ITL p99 >> p50); lower scheduler.chunk_size";
  if (max_busy < 0.85)
    return fmt::format(
        "ring starved: stages busy at most {:.0f}%; too few sequences in flight "
        "({} running) — send more concurrent requests or raise plan.max_rows",
        max_busy * 100, v.running);
  return "saturated and balanced: the ring is the limit (add stages or devices)";
}

std::string render(const TopView& v) {
  std::string o = fmt::format("kvasir top — {}  [{}]\n\n", v.model, v.ready ? "ready" : "loading");
  o += fmt::format("{:<6} {:<10} {:<8} {:>7} {:>8} {:>8} {:>10} {:>10}\n", "stage", "layers",
                   "device", "busy%", "starved%", "blocked%", "batches/s", "tokens/s");
  for (size_t i = 0; i < v.stages.size(); ++i) {
    const auto& s = v.stages[i];
    o += fmt::format("{:<6} {:<10} {:<8} {:>7.1f} {:>8.1f} {:>8.1f} {:>10.1f} {:>10.1f}\n", i,
                     s.layers, s.device, s.busy * 100, s.starved * 100, s.blocked * 100,
                     s.batches_per_s, s.tokens_per_s);
  }
  int64_t used = v.blocks_total - v.blocks_free;
  o += fmt::format("\nring: {} micro-batches in flight at most\n", v.inflight);
  o += fmt::format("KV: {} / {} blocks used ({:.0f}%), preemptions {}\n", used, v.blocks_total,
                   v.blocks_total ? 100.0 * double(used) / double(v.blocks_total) : 0.0,
                   v.preemptions);
  if (v.prefix_caching)
    o += fmt::format(
        "prefix cache: hit rate {}, {} blocks cached ({} evictable)\n",
        v.prefix_hit_rate < 0 ? std::string("-") : fmt::format("{:.1f}%", v.prefix_hit_rate * 100),
        v.blocks_cached, v.blocks_evictable);
  if (v.restarts > 0) o += fmt::format("stage restarts: {}\n", v.restarts);
  o += fmt::format("requests: {} running, {} waiting; tokens/s: {:.1f} generated, {:.1f} prompt\n",
                   v.running, v.waiting, v.gen_tokens_per_s, v.prompt_tokens_per_s);
  o += fmt::format("TTFT p50 {:.0f} ms  p99 {:.0f} ms;  ITL p50 {:.0f} ms  p99 {:.0f} ms\n",
                   v.ttft_p50 * 1e3, v.ttft_p99 * 1e3, v.itl_p50 * 1e3, v.itl_p99 * 1e3);
  o += "\n" + diagnose(v) + "\n";
  return o;
}

namespace {
termios g_saved;
bool g_raw = false;
void restore_terminal() {
  if (!g_raw) return;
  tcsetattr(STDIN_FILENO, TCSANOW, &g_saved);
  std::fputs("\x1b[?25h\x1b[?1049l", stdout);
  std::fflush(stdout);
  g_raw = false;
}
void on_signal(int) {
  restore_terminal();
  std::_Exit(0);
}
}  // namespace

int run_top(const std::function<json()>& fetch) {
  bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  if (tty && tcgetattr(STDIN_FILENO, &g_saved) == 0) {
    termios raw = g_saved;
    raw.c_lflag &= ~tcflag_t(ICANON | ECHO);
    tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    g_raw = true;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::fputs("\x1b[?1049h\x1b[?25l", stdout);
  }
  json prev;
  bool have_prev = false;
  auto t_prev = std::chrono::steady_clock::now();
  int rc = 0;
  for (;;) {
    std::string screen;
    try {
      json now = fetch();
      auto t = std::chrono::steady_clock::now();
      double dt = std::chrono::duration<double>(t - t_prev).count();
      screen = render(make_view(now, have_prev ? &prev : nullptr, std::max(dt, 1e-3)));
      prev = std::move(now);
      have_prev = true;
      t_prev = t;
    } catch (const std::exception& e) {
      screen = std::string("kvasir top: ") + e.what() + "\n";
    }
    std::fputs(g_raw ? "\x1b[H\x1b[2J" : "\n", stdout);
    std::fputs(screen.c_str(), stdout);
    if (g_raw) std::fputs("\n(q quits)", stdout);
    std::fflush(stdout);
    pollfd pfd{STDIN_FILENO, POLLIN, 0};
    if (poll(&pfd, 1, 1000) > 0) {
      char c = 0;
      if (read(STDIN_FILENO, &c, 1) <= 0 || c == 'q' || c == 'Q') break;
    }
  }
  restore_terminal();
  return rc;
}

}  // namespace kvasir::cli
