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

#include "base/expert_load.h"
#include "cli/diagnose.h"

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

namespace {

const json* prev_stage(const json* prev, size_t i) {
  if (!prev) return nullptr;
  auto it = prev->find("stages");
  if (it == prev->end() || !it->is_array() || i >= it->size()) return nullptr;
  return &(*it)[i];
}

// One stage over the interval. Its shares are of its own busy + starved +
// blocked over the interval: the daemon counts the phase a stage is in up
// to the moment it reports (docs/ring.md, "Accounting"), so the three
// partition the stage's time exactly, whatever a batch's length.
StageView stage_view(const json& s, const json* p) {
  StageView st;
  st.layers = s.value("layers", std::string("?"));
  st.device = s.value("device", std::string("?"));
  st.state = s.value("state", std::string("?"));
  std::sscanf(st.layers.c_str(), "%d-%d", &st.first_layer, &st.last_layer);
  auto d = [&](const char* k) { return num(s, k) - (p ? num(*p, k) : 0.0); };
  const double busy = std::max(d("busy_s"), 0.0), starved = std::max(d("starved_s"), 0.0),
               blocked = std::max(d("blocked_s"), 0.0);
  const double total = busy + starved + blocked;
  if (total > 0) st.busy = busy / total, st.starved = starved / total, st.blocked = blocked / total;
  const double span = total > 0 ? total : 1.0;
  st.batches_per_s = d("batches") / span;
  st.tokens_per_s = d("tokens") / span;
  const json& cost = sub(s, "cost");
  st.ms_per_batch = d("batches") > 0 ? busy * 1e3 / d("batches") : num(cost, "mean_busy_ms");
  if (d("handoffs") > 0) st.handoff_us = d("handoff_s") * 1e6 / d("handoffs");
  if (s.contains("cpu_wait_s") && total > 0) {
    st.cpu_wait = std::max(d("cpu_wait_s"), 0.0) / total;
    st.preemptions_per_s = std::max(d("preemptions"), 0.0) / total;
  }
  st.cost_fixed_ms = num(cost, "fixed_ms");
  st.cost_per_token_ms = num(cost, "per_token_ms");
  st.cost_per_sample_ms = num(cost, "per_sample_ms");
  st.experts = expert_view(s, p);
  st.position = int(num(s, "position"));
  st.member = int(num(s, "member"));
  return st;
}

// "17" or, for a folded counter, the range it covers ("34-35").
std::string expert_label(const ExpertView& v, size_t slot) {
  const int first = int(slot) * v.per_slot;
  const int last = std::min(first + v.per_slot, v.n_experts) - 1;
  return first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last);
}

// The counters of one snapshot's experts object, or empty when it has
// none or they do not fit n slots.
std::vector<uint64_t> routed_of(const json& experts, size_t n) {
  auto it = experts.find("routed");
  if (it == experts.end() || !it->is_array() || it->size() != n) return {};
  std::vector<uint64_t> out;
  for (const json& c : *it) out.push_back(c.is_number() ? c.get<uint64_t>() : 0);
  return out;
}

// An expert group's per-process routed counts over the interval (the
// stats' experts.group): each process's share and their max / mean.
void group_view(ExpertView& v, const json& g, const json* prev) {
  const json& r = g.contains("routed") ? g["routed"] : json();
  if (!r.is_array() || r.empty()) return;
  std::vector<uint64_t> d = routed_of(g, r.size());
  const std::vector<uint64_t> p = prev ? routed_of(*prev, d.size()) : std::vector<uint64_t>{};
  if (p.size() == d.size())
    for (size_t i = 0; i < d.size(); ++i) d[i] = d[i] >= p[i] ? d[i] - p[i] : 0;
  uint64_t total = 0;
  for (uint64_t c : d) total += c;
  for (uint64_t c : d) v.group_shares.push_back(total ? double(c) / double(total) : 0.0);
  v.group_imbalance = expert_imbalance(d);
}

}  // namespace

ExpertView expert_view(const json& now, const json* prev) {
  ExpertView v;
  const json& e = sub(now, "experts");
  v.n_experts = int(num(e, "n_experts"));
  if (v.n_experts <= 0) return v;
  v.per_slot = std::max(1, int(num(e, "experts_per_slot")));
  std::vector<uint64_t> d = routed_of(e, size_t((v.n_experts + v.per_slot - 1) / v.per_slot));
  const std::vector<uint64_t> p = prev ? routed_of(sub(*prev, "experts"), d.size()) : d;
  if (prev && p.size() == d.size())  // else (a first or odd snapshot): since start
    for (size_t i = 0; i < d.size(); ++i) d[i] = d[i] >= p[i] ? d[i] - p[i] : 0;
  for (uint64_t c : d) v.routed += c;
  v.imbalance = expert_imbalance(d);
  std::vector<size_t> order(d.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const size_t k = std::min<size_t>(3, order.size());
  std::partial_sort(order.begin(), order.begin() + ptrdiff_t(k), order.end(),
                    [&](size_t a, size_t b) { return d[a] > d[b] || (d[a] == d[b] && a < b); });
  for (size_t j = 0; j < k && v.routed > 0 && d[order[j]] > 0; ++j)
    v.hottest.emplace_back(expert_label(v, order[j]), double(d[order[j]]) / double(v.routed));
  group_view(v, sub(e, "group"), prev ? &sub(sub(*prev, "experts"), "group") : nullptr);
  return v;
}

namespace {

PlanView plan_view(const json& now) {
  PlanView p;
  const json& j = sub(now, "plan");
  if (j.empty()) return p;
  p.known = true;
  p.max_rows = int(num(j, "max_rows"));
  p.max_tokens = int(num(j, "max_tokens"));
  p.max_inflight = int(num(j, "max_inflight"));
  p.parallel_stages = int(num(j, "parallel_stages"));
  p.chunk_size = int(num(j, "chunk_size"));
  p.max_num_seqs = int(num(j, "max_num_seqs"));
  p.policy = j.value("policy", std::string("?"));
  p.kv_memory = num(j, "kv_memory");
  p.kv_block_size = int(num(j, "kv_block_size"));
  auto it = j.find("itl_target_ms");
  if (it != j.end() && it->is_number()) {
    p.itl_target_ms = it->get<double>();
    p.itl_target = p.itl_target_ms > 0 ? fmt::format("{:g} ms", p.itl_target_ms) : "none";
  } else {
    p.itl_target = "auto";
  }
  return p;
}

TimingView timing_view(const json& e, const json* pe) {
  TimingView t;
  const json& j = sub(e, "timing");
  const json* p = pe ? &sub(*pe, "timing") : nullptr;
  auto d = [&](const char* k) { return int64_t(num(j, k) - (p ? num(*p, k) : 0.0)); };
  t.itl_target_ms = num(j, "itl_target_ms");
  t.step_budget_ms = num(j, "step_budget_ms");
  t.cost_ready = j.value("cost_ready", false);
  t.batches = d("batches");
  t.prefill_batches = d("prefill_batches");
  t.decode_rows = d("decode_rows");
  t.decode_rows_with_prefill = d("decode_rows_with_prefill");
  t.prefill_cut = d("prefill_cut");
  t.admission_waits = d("admission_waits");
  t.step_ms_decode = num(j, "step_ms_decode");
  t.step_ms_prefill = num(j, "step_ms_prefill");
  t.mean_rows = num(j, "mean_rows");
  t.mean_tokens = num(j, "mean_tokens");
  return t;
}

// The prefix cache's figures: the hit rate over the interval.
void prefix_view(TopView& v, const json& pc, const json* prev) {
  v.prefix_caching = pc.value("enabled", false);
  v.blocks_cached = int64_t(num(pc, "blocks_cached"));
  v.blocks_evictable = int64_t(num(pc, "blocks_evictable"));
  v.blocks_swa_cached = int64_t(num(pc, "blocks_swa_cached"));
  v.blocks_swa_evictable = int64_t(num(pc, "blocks_swa_evictable"));
  double q = num(pc, "queries"), h = num(pc, "hits");
  if (prev) q -= num(*prev, "queries"), h -= num(*prev, "hits");
  v.prefix_hit_rate = q > 0 ? h / q : -1;
}

// Speculative decoding's counters, as deltas over the interval.
void spec_view(TopView& v, const json& sp, const json* prev) {
  v.spec_method = sp.is_object() ? sp.value("method", std::string()) : std::string();
  auto d = [&](const char* k) { return int64_t(num(sp, k) - (prev ? num(*prev, k) : 0.0)); };
  v.spec_drafts = d("drafts");
  v.spec_draft_tokens = d("draft_tokens");
  v.spec_accepted = d("accepted_tokens");
}

// The links to worker hosts, bytes as rates over the interval (since
// start on the first snapshot).
void links_view(TopView& v, const json& e, const json* pe) {
  static const json none = json::array();
  auto links_of = [&](const json& j) -> const json& {
    auto it = j.find("links");
    return it != j.end() && it->is_array() ? *it : none;
  };
  const json& links = links_of(e);
  for (size_t i = 0; i < links.size(); ++i) {
    const json& l = links[i];
    if (!l.is_object()) continue;
    const json* pl = pe && i < links_of(*pe).size() ? &links_of(*pe)[i] : nullptr;
    if (pl && !pl->is_object()) pl = nullptr;
    LinkView lv;
    lv.host = l.value("host", std::string());
    lv.stages = l.value("stages", std::string());
    lv.state = l.value("state", std::string());
    lv.last_error = l.value("last_error", std::string());
    lv.joins = int64_t(num(l, "joins"));
    lv.rtt_ms = num(l, "rtt_ms");
    auto rate = [&](const char* k) {
      return (num(l, k) - (pl ? num(*pl, k) : 0.0)) / v.interval_s;
    };
    lv.sent_per_s = std::max(0.0, rate("bytes_sent"));
    lv.received_per_s = std::max(0.0, rate("bytes_received"));
    v.links.push_back(std::move(lv));
  }
}

void engine_view(TopView& v, const json& now, const json* prev, double dt) {
  const json& e = sub(now, "engine");
  v.waiting = int(num(e, "waiting"));
  v.running = int(num(e, "running"));
  v.blocks_total = int64_t(num(e, "blocks_total"));
  v.blocks_free = int64_t(num(e, "blocks_free"));
  v.blocks_swa_total = int64_t(num(e, "blocks_swa_total"));
  v.blocks_swa_free = int64_t(num(e, "blocks_swa_free"));
  v.preemptions = int64_t(num(e, "preemptions"));
  v.kv_slots_used = int64_t(num(e, "kv_slots_used"));
  v.kv_waste = int64_t(num(e, "kv_waste"));
  v.restarts = int64_t(num(e, "restarts"));
  const json* pe = prev ? &sub(*prev, "engine") : nullptr;
  const double up = std::max(num(now, "uptime_s"), 1e-9);
  v.interval_s = prev ? dt : up;
  v.preemptions_delta = v.preemptions - (pe ? int64_t(num(*pe, "preemptions")) : 0);
  v.gen_tokens_per_s =
      (num(e, "tokens_generated") - (pe ? num(*pe, "tokens_generated") : 0)) / v.interval_s;
  v.prompt_tokens_per_s =
      (num(e, "tokens_prompt") - (pe ? num(*pe, "tokens_prompt") : 0)) / v.interval_s;
  v.timing = timing_view(e, pe);
  prefix_view(v, sub(e, "prefix_cache"), pe ? &sub(*pe, "prefix_cache") : nullptr);
  spec_view(v, sub(e, "speculative"), pe ? &sub(*pe, "speculative") : nullptr);
  links_view(v, e, pe);
}

}  // namespace

TopView make_view(const json& now, const json* prev, double dt) {
  TopView v;
  v.model = now.value("model", std::string("?"));
  v.ready = now.value("ready", false);
  v.inflight = int(num(now, "inflight"));
  engine_view(v, now, prev, dt);
  v.plan = plan_view(now);
  const json& lat = sub(now, "latency");
  v.ttft_p50 = num(sub(lat, "ttft"), "p50_s");
  v.ttft_p99 = num(sub(lat, "ttft"), "p99_s");
  v.itl_p50 = num(sub(lat, "itl"), "p50_s");
  v.itl_p99 = num(sub(lat, "itl"), "p99_s");
  auto stages = now.find("stages");
  if (stages != now.end() && stages->is_array())
    for (size_t i = 0; i < stages->size(); ++i)
      if ((*stages)[i].is_object()) {
        StageView one = stage_view((*stages)[i], prev_stage(prev, i));
        (one.member > 0 ? v.members : v.stages).push_back(std::move(one));
      }
  // A stage on a worker host (the plan names its host): its process and
  // counters live there, so here it is neither down nor idle but remote.
  const json& plan = sub(now, "plan");
  auto ps = plan.find("stages");
  for (size_t i = 0; ps != plan.end() && ps->is_array() && i < ps->size() && i < v.stages.size();
       ++i)
    if ((*ps)[i].is_object() && (*ps)[i].contains("host")) v.stages[i].state = "remote";
  double slowest = 0;
  for (const StageView& s : v.stages) slowest = std::max(slowest, s.ms_per_batch);
  for (StageView& s : v.stages) s.step_share = slowest > 0 ? s.ms_per_batch / slowest : 0;
  return v;
}

std::string diagnose(const TopView& v) {
  return diagnose_view(v).summary;
}

namespace {
// One line per MoE stage under the stage table: the imbalance over the
// interval and the hottest experts with their share of the routed tokens.
std::string experts_lines(const TopView& v) {
  std::string o;
  for (size_t i = 0; i < v.stages.size(); ++i) {
    const ExpertView& e = v.stages[i].experts;
    if (e.n_experts <= 0) continue;
    o += fmt::format("{:<6} experts: ", i);
    if (e.routed == 0) {
      o += fmt::format("{} experts, none routed in the interval\n", e.n_experts);
      continue;
    }
    o += fmt::format("imbalance {:.2f} (max/mean), hottest", e.imbalance);
    for (const auto& [label, share] : e.hottest)
      o += fmt::format(" {}:{:.0f}%", label, share * 100);
    if (!e.group_shares.empty()) {  // an expert group: the processes' shares
      o += fmt::format("; group imbalance {:.2f} (max/mean),", e.group_imbalance);
      for (size_t k = 0; k < e.group_shares.size(); ++k)
        o += fmt::format(" {}.{}:{:.0f}%", i, k, e.group_shares[k] * 100);
    }
    o += "\n";
  }
  return o;
}
}  // namespace

namespace {
std::string stage_row(const std::string& label, const StageView& s) {
  return fmt::format(
      "{:<6} {:<10} {:<8} {:<8} {:>7.1f} {:>8.1f} {:>8.1f} {:>10.1f} {:>10.1f} {:>9.1f} "
      "{:>6.0f} {:>10}\n",
      label, s.layers, s.device, s.state, s.busy * 100, s.starved * 100, s.blocked * 100,
      s.batches_per_s, s.tokens_per_s, s.ms_per_batch, s.member > 0 ? 0.0 : s.step_share * 100,
      s.handoff_us >= 0 ? fmt::format("{:.0f}", s.handoff_us) : std::string("-"));
}
}  // namespace

std::string render(const TopView& v) {
  std::string o = fmt::format("kvasir top — {}  [{}]\n\n", v.model, v.ready ? "ready" : "loading");
  o += fmt::format("{:<6} {:<10} {:<8} {:<8} {:>7} {:>8} {:>8} {:>10} {:>10} {:>9} {:>6} {:>10}\n",
                   "stage", "layers", "device", "now", "busy%", "starved%", "blocked%", "batches/s",
                   "tokens/s", "ms/batch", "step%", "handoff_us");
  for (size_t i = 0; i < v.stages.size(); ++i) {
    // An expert group: its leader as "i.0", then each member as "i.k".
    bool group = false;
    for (const StageView& m : v.members) group = group || m.position == int(i);
    o += stage_row(group ? fmt::format("{}.0", i) : fmt::format("{}", i), v.stages[i]);
    for (const StageView& m : v.members)
      if (m.position == int(i)) o += stage_row(fmt::format("{}.{}", i, m.member), m);
  }
  o += experts_lines(v);
  int64_t used = v.blocks_total - v.blocks_free;
  o += fmt::format("\nring: {} micro-batches in flight at most", v.inflight);
  if (v.plan.known)
    o += fmt::format("; policy {}, ITL target {}", v.plan.policy,
                     v.timing.itl_target_ms > 0 ? fmt::format("{:.0f} ms", v.timing.itl_target_ms)
                                                : v.plan.itl_target);
  o += fmt::format(
      "\nsteps: decodes only {:.1f} ms, with prefill {:.1f} ms; mean batch {:.1f} rows, "
      "{:.0f} tokens\n",
      v.timing.step_ms_decode, v.timing.step_ms_prefill, v.timing.mean_rows, v.timing.mean_tokens);
  o += fmt::format("KV: {} / {} blocks used ({:.0f}%), preemptions {}\n", used, v.blocks_total,
                   v.blocks_total ? 100.0 * double(used) / double(v.blocks_total) : 0.0,
                   v.preemptions);
  if (v.blocks_swa_total > 0) {  // the sliding layers' pool, beside the others'
    const int64_t swa = v.blocks_swa_total - v.blocks_swa_free;
    o += fmt::format("KV of the sliding-window layers: {} / {} blocks used ({:.0f}%)\n", swa,
                     v.blocks_swa_total, 100.0 * double(swa) / double(v.blocks_swa_total));
  }
  if (v.prefix_caching)
    o += fmt::format(
        "prefix cache: hit rate {}, {} blocks cached ({} evictable)\n",
        v.prefix_hit_rate < 0 ? std::string("-") : fmt::format("{:.1f}%", v.prefix_hit_rate * 100),
        v.blocks_cached, v.blocks_evictable);
  if (v.prefix_caching && v.blocks_swa_total > 0)
    o += fmt::format("prefix cache, sliding-window layers: {} blocks cached ({} evictable)\n",
                     v.blocks_swa_cached, v.blocks_swa_evictable);
  if (!v.spec_method.empty() && v.spec_method != "none")
    o += fmt::format(
        "speculative ({}): {} of {} draft tokens accepted ({}), mean accepted length {}\n",
        v.spec_method, v.spec_accepted, v.spec_draft_tokens,
        v.spec_draft_tokens > 0
            ? fmt::format("{:.1f}%", 100.0 * double(v.spec_accepted) / double(v.spec_draft_tokens))
            : std::string("-"),
        v.spec_drafts > 0
            ? fmt::format("{:.2f}", 1.0 + double(v.spec_accepted) / double(v.spec_drafts))
            : std::string("-"));
  if (v.restarts > 0) o += fmt::format("stage restarts: {}\n", v.restarts);
  for (const LinkView& l : v.links) {
    o += fmt::format(
        "link to {} (stages {}): {}, {:.2f} MB/s out, {:.2f} MB/s in, ping {:.2f} ms, {} join{}",
        l.host, l.stages, l.state, l.sent_per_s / 1e6, l.received_per_s / 1e6, l.rtt_ms, l.joins,
        l.joins == 1 ? "" : "s");
    o += l.state != "serving" && !l.last_error.empty() ? "; " + l.last_error + "\n" : "\n";
  }
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
