// cli/bench.cpp — the workload and the summary of `kvasir bench` (see bench.h).
#include "cli/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

namespace kvasir::cli {

using nlohmann::json;

namespace {

[[noreturn]] void bad_line(size_t line, const std::string& what) {
  throw std::runtime_error(fmt::format("trace line {}: {}", line, what));
}

// An integer field in [lo, hi], or `fallback` when absent.
int32_t int_field(const json& j, const char* key, int32_t lo, int32_t hi, int32_t fallback,
                  size_t line) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_number_integer()) bad_line(line, fmt::format("{} must be an integer", key));
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    bad_line(line, fmt::format("{} must be in [{}, {}] (got {})", key, lo, hi, v));
  return int32_t(v);
}

// The prefix caching fields of a trace line: n, a shared prefix, a chat turn.
void parse_sharing(const json& j, BenchRequest& r, size_t line) {
  r.n = int_field(j, "n", 1, 16, 1, line);
  r.prefix_group = int_field(j, "prefix_group", 0, kMaxBenchRequests, -1, line);
  r.prefix_len = int_field(j, "prefix_len", 1, kMaxBenchTokens, 0, line);
  if ((r.prefix_group >= 0) != (r.prefix_len > 0))
    bad_line(line, "give prefix_group and prefix_len together");
  if (r.prefix_len > 0 && !r.prompt.empty())
    bad_line(line, "a shared prefix goes with prompt_len, not a text prompt");
  r.conversation = int_field(j, "conversation", 0, kMaxBenchRequests, -1, line);
}

}  // namespace

std::vector<BenchRequest> parse_trace(std::istream& in, int32_t default_max_tokens) {
  std::vector<BenchRequest> out;
  std::string text;
  size_t line = 0;
  double last_t = 0;
  while (std::getline(in, text)) {
    ++line;
    size_t first = text.find_first_not_of(" \t\r");
    if (first == std::string::npos || text[first] == '#') continue;
    if (out.size() >= size_t(kMaxBenchRequests))
      bad_line(line, fmt::format("more than {} requests", kMaxBenchRequests));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) bad_line(line, "not a JSON object");
    BenchRequest r;
    auto t = j.find("t");
    if (t == j.end() || !t->is_number()) bad_line(line, "t (arrival, seconds) must be a number");
    r.arrival_s = t->get<double>();
    // NaN fails both comparisons, so test for the good range.
    if (!(r.arrival_s >= 0 && r.arrival_s <= 86400 * 7))
      bad_line(line, "t must be between 0 and one week");
    if (r.arrival_s < last_t) bad_line(line, "arrival times must not decrease");
    last_t = r.arrival_s;
    auto p = j.find("prompt");
    if (p != j.end()) {
      if (!p->is_string() || p->get_ref<const std::string&>().empty())
        bad_line(line, "prompt must be a non-empty string");
      if (j.contains("prompt_len")) bad_line(line, "give prompt or prompt_len, not both");
      r.prompt = p->get<std::string>();
    } else {
      // 0 only after a shared prefix: the prompt is the prefix alone.
      r.prompt_len = int_field(j, "prompt_len", 0, kMaxBenchTokens, -1, line);
      if (r.prompt_len < 0) bad_line(line, "prompt or prompt_len is required");
    }
    r.max_tokens = int_field(j, "max_tokens", 1, kMaxBenchTokens, default_max_tokens, line);
    parse_sharing(j, r, line);
    if (r.prompt.empty() && r.prompt_len + r.prefix_len == 0)
      bad_line(line, "prompt_len must be >= 1 (0 only after a shared prefix_len)");
    out.push_back(std::move(r));
  }
  if (out.empty()) throw std::runtime_error("the trace holds no requests");
  return out;
}

namespace {
// `conversations` chats of `turns` turns, turn-major (every chat's first
// turn, then every second...), all arriving at once: each chat is a closed
// loop of its own. A shared prefix, when given, is the system prompt of
// each chat's first turn (later turns carry it in the conversation).
std::vector<BenchRequest> chat_workload(const BenchOptions& o) {
  if (int64_t(o.conversations) * o.turns > kMaxBenchRequests)
    throw std::runtime_error("too many turns in all");
  std::vector<BenchRequest> w;
  for (int32_t t = 0; t < o.turns; ++t)
    for (int32_t c = 0; c < o.conversations; ++c) {
      BenchRequest r;
      r.conversation = c;
      r.prompt_len = o.prompt_lens[w.size() % o.prompt_lens.size()];
      r.max_tokens = o.max_tokens;
      r.n = o.n;
      if (t == 0 && o.shared_prefix_len > 0) {
        r.prefix_group = c % std::max(o.prefix_groups, 1);
        r.prefix_len = o.shared_prefix_len;
      }
      w.push_back(r);
    }
  return w;
}
}  // namespace

std::vector<BenchRequest> make_workload(const BenchOptions& o,
                                        const std::vector<BenchRequest>* trace) {
  if (trace) {
    std::vector<BenchRequest> w = *trace;
    if (o.requests > 0 && size_t(o.requests) < w.size()) w.resize(size_t(o.requests));
    return w;
  }
  if (o.prompt_lens.empty()) throw std::runtime_error("--prompt-len needs at least one length");
  if (o.conversations > 0 || o.turns > 0) {
    if (o.conversations <= 0 || o.turns <= 0)
      throw std::runtime_error("--conversations and --turns go together");
    return chat_workload(o);
  }
  int n = o.requests > 0 ? o.requests : 100;
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1.0);
  std::vector<BenchRequest> w(static_cast<size_t>(n));
  double t = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    // The first request starts the clock; the next ones follow Poisson gaps.
    if (o.rate > 0 && i > 0) t += gap(rng);
    w[i].arrival_s = t;
    w[i].prompt_len = o.prompt_lens[i % o.prompt_lens.size()];
    w[i].max_tokens = o.max_tokens;
    w[i].n = o.n;
    if (o.shared_prefix_len > 0) {  // request i: group i mod G's prefix, then its own part
      w[i].prefix_group = int32_t(i % size_t(std::max(o.prefix_groups, 1)));
      w[i].prefix_len = o.shared_prefix_len;
    }
  }
  return w;
}

Dist distribution(std::vector<double> v) {
  Dist d;
  d.count = v.size();
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  d.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  auto q = [&](double p) {
    double pos = p * double(v.size() - 1);
    size_t lo = size_t(std::floor(pos));
    size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  };
  d.p50 = q(0.50);
  d.p99 = q(0.99);
  return d;
}

StatsSample parse_stats(const json& stats) {
  StatsSample s;
  auto e = stats.find("engine");
  if (e == stats.end() || !e->is_object()) return s;
  auto get = [&](const char* k, int64_t fallback) {
    auto it = e->find(k);
    return it != e->end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
  };
  s.preemptions = get("preemptions", 0);
  s.kv_slots_used = get("kv_slots_used", -1);
  s.kv_waste = get("kv_waste", -1);
  s.running = int32_t(std::clamp<int64_t>(get("running", 0), 0, INT32_MAX));
  if (auto pc = e->find("prefix_cache"); pc != e->end() && pc->is_object()) {
    s.prefix_queries = pc->value("queries", int64_t(0));
    s.prefix_hits = pc->value("hits", int64_t(0));
  }
  if (auto sp = e->find("speculative"); sp != e->end() && sp->is_object()) {
    s.spec_method = sp->value("method", std::string());
    s.spec_drafts = sp->value("drafts", int64_t(0));
    s.spec_draft_tokens = sp->value("draft_tokens", int64_t(0));
    s.spec_accepted = sp->value("accepted_tokens", int64_t(0));
  }
  return s;
}

namespace {
json ms(const Dist& d) {
  return {{"mean", d.mean * 1e3}, {"p50", d.p50 * 1e3}, {"p99", d.p99 * 1e3}, {"count", d.count}};
}

// Prefix caching, three ways: the daemon's hit rate over the run (tokens
// found / tokens looked up, from its stats), the prompt tokens the
// responses say were cached, and those as a share of the workload's shared
// prefixes (null without any).
void add_prefix_figures(json& s, int64_t cached, int64_t shared, int64_t prompt_tok,
                        const StatsSample& before, const StatsSample& after) {
  const int64_t q = after.prefix_queries - before.prefix_queries;
  const int64_t h = after.prefix_hits - before.prefix_hits;
  s["prefix_hit_rate"] = q > 0 ? json(double(h) / double(q)) : json(nullptr);
  s["cached_tokens"] = cached;
  s["cached_fraction"] = prompt_tok > 0 ? double(cached) / double(prompt_tok) : 0.0;
  s["shared_prefix_tokens"] = shared;
  s["shared_hit_rate"] = shared > 0 ? json(double(cached) / double(shared)) : json(nullptr);
}

// Speculative decoding over the run: the drafter and its counters' deltas,
// the acceptance rate and the mean accepted length (1 + accepted / drafts,
// vLLM's); null where the stats carry no engine.speculative (an older
// daemon).
json spec_figures(const StatsSample& before, const StatsSample& after) {
  if (after.spec_method.empty()) return nullptr;
  const int64_t drafts = after.spec_drafts - before.spec_drafts;
  const int64_t proposed = after.spec_draft_tokens - before.spec_draft_tokens;
  const int64_t accepted = after.spec_accepted - before.spec_accepted;
  return {
      {"method", after.spec_method},
      {"drafts", drafts},
      {"draft_tokens", proposed},
      {"accepted_tokens", accepted},
      {"acceptance_rate", proposed > 0 ? json(double(accepted) / double(proposed)) : json(nullptr)},
      {"mean_accepted_length",
       drafts > 0 ? json(1.0 + double(accepted) / double(drafts)) : json(nullptr)}};
}

// Waste as a share of allocated KV, summed over the samples (KV slot-time):
// a mean of per-sample ratios would let an instant with one short sequence
// (half a block wasted of one block) weigh as much as a full pool.
void add_kv_waste(json& s, const std::vector<StatsSample>& samples) {
  double waste_sum = 0, held_sum = 0;
  size_t n_waste = 0;
  for (const auto& x : samples) {
    if (x.kv_waste < 0 || x.kv_slots_used < 0) continue;
    int64_t held = x.kv_slots_used + x.kv_waste;
    if (held <= 0) continue;  // nothing allocated: not steady state
    waste_sum += double(x.kv_waste);
    held_sum += double(held);
    ++n_waste;
  }
  s["kv_waste"] = n_waste ? json(waste_sum / held_sum) : json(nullptr);
  s["kv_waste_samples"] = n_waste;
}

// Goodput against the targets (null without one). good: requests within both.
void add_goodput(json& s, const BenchOptions& o, const std::vector<double>& itl, int64_t good,
                 size_t n_requests, double wall) {
  if (o.ttft_target_ms <= 0 && o.itl_target_ms <= 0) {
    s["goodput"] = nullptr;
    return;
  }
  // Per token, not per request: the share of all ITL samples (one per
  // token after the first) within the ITL target. A request's mean can
  // hide a multi-second gap among fifty short ones; this cannot.
  json within = nullptr;
  if (o.itl_target_ms > 0 && !itl.empty())
    within = double(std::count_if(itl.begin(), itl.end(),
                                  [&](double x) { return x * 1e3 <= o.itl_target_ms; })) /
             double(itl.size());
  s["goodput"] = {{"ttft_target_ms", o.ttft_target_ms},
                  {"itl_target_ms", o.itl_target_ms},
                  {"requests", good},
                  {"requests_per_s", double(good) / wall},
                  {"fraction", n_requests == 0 ? 0.0 : double(good) / double(n_requests)},
                  {"itl_within_target", within}};
}
}  // namespace

json summarize(const std::vector<RequestResult>& results, double wall_s, const StatsSample& before,
               const StatsSample& after, const std::vector<StatsSample>& samples,
               const BenchOptions& o) {
  std::vector<double> ttft, itl, e2e;
  int64_t completed = 0, failed = 0, prompt_tok = 0, out_tok = 0, good = 0;
  int64_t cached = 0, shared = 0;
  json errors = json::array();
  for (const auto& r : results) {
    if (!r.ok) {
      ++failed;
      if (errors.size() < 5) errors.push_back(r.error);
      continue;
    }
    ++completed;
    prompt_tok += r.prompt_tokens;
    out_tok += r.completion_tokens;
    cached += r.cached_tokens;
    shared += r.shared_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    // Goodput (as vLLM's): TTFT within its target and the request's mean
    // inter-token latency (its TPOT) within its target.
    double tpot = r.itl_s.empty() ? 0
                                  : std::accumulate(r.itl_s.begin(), r.itl_s.end(), 0.0) /
                                        double(r.itl_s.size());
    bool ttft_ok = o.ttft_target_ms <= 0 || r.ttft_s * 1e3 <= o.ttft_target_ms;
    bool itl_ok = o.itl_target_ms <= 0 || tpot * 1e3 <= o.itl_target_ms;
    good += ttft_ok && itl_ok;
  }
  double wall = std::max(wall_s, 1e-9);
  json s = {{"requests", results.size()},
            {"completed", completed},
            {"failed", failed},
            {"duration_s", wall_s},
            {"prompt_tokens", prompt_tok},
            {"output_tokens", out_tok},
            {"requests_per_s", double(completed) / wall},
            {"output_tok_s", double(out_tok) / wall},
            {"total_tok_s", double(prompt_tok + out_tok) / wall},
            {"ttft_ms", ms(distribution(ttft))},
            {"itl_ms", ms(distribution(itl))},
            {"e2e_ms", ms(distribution(e2e))},
            {"preemptions", after.preemptions - before.preemptions},
            {"concurrency", o.concurrency},
            {"rate", o.rate},
            {"errors", errors}};
  add_kv_waste(s, samples);
  add_prefix_figures(s, cached, shared, prompt_tok, before, after);
  s["speculative"] = spec_figures(before, after);
  add_goodput(s, o, itl, good, results.size(), wall);
  return s;
}

namespace {
double num(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}
double sub(const json& j, const char* k, const char* q) {
  auto it = j.find(k);
  return it != j.end() && it->is_object() ? num(*it, q) : 0.0;
}
std::string waste_text(const json& s) {
  auto it = s.find("kv_waste");
  if (it == s.end() || !it->is_number()) return "n/a";
  return fmt::format("{:.2f}%", it->get<double>() * 100);
}
std::string share_text(const json& s, const char* key) {
  auto it = s.find(key);
  if (it == s.end() || !it->is_number()) return "";
  return fmt::format("{:.1f}%", it->get<double>() * 100);
}
std::string goodput_text(const json& s) {
  auto it = s.find("goodput");
  if (it == s.end() || !it->is_object()) return "";
  return fmt::format("{:.2f} req/s ({:.0f}%)", num(*it, "requests_per_s"),
                     num(*it, "fraction") * 100);
}
std::string itl_within_text(const json& s) {
  auto it = s.find("goodput");
  if (it == s.end() || !it->is_object()) return "";
  auto w = it->find("itl_within_target");
  if (w == it->end() || !w->is_number()) return "";
  return fmt::format("{:.1f}% <= {:.0f} ms", w->get<double>() * 100, num(*it, "itl_target_ms"));
}
// "ngram: 150/400 accepted (37.5%), mean length 2.50"; "" without a drafter.
std::string spec_text(const json& s) {
  auto it = s.find("speculative");
  if (it == s.end() || !it->is_object()) return "";
  const std::string method = it->value("method", std::string());
  if (method.empty() || method == "none") return "";
  auto r = it->find("acceptance_rate"), m = it->find("mean_accepted_length");
  return fmt::format("{}: {:.0f}/{:.0f} accepted ({}), mean length {}", method,
                     num(*it, "accepted_tokens"), num(*it, "draft_tokens"),
                     r != it->end() && r->is_number()
                         ? fmt::format("{:.1f}%", r->get<double>() * 100)
                         : std::string("-"),
                     m != it->end() && m->is_number() ? fmt::format("{:.2f}", m->get<double>())
                                                      : std::string("-"));
}

// Rows of the table: label, then the text of one summary.
struct Row {
  const char* label;
  std::string (*text)(const json&);
};
const Row kRows[] = {
    {"completed / failed",
     [](const json& s) {
       return fmt::format("{:.0f} / {:.0f}", num(s, "completed"), num(s, "failed"));
     }},
    {"duration (s)", [](const json& s) { return fmt::format("{:.2f}", num(s, "duration_s")); }},
    {"requests/s", [](const json& s) { return fmt::format("{:.3f}", num(s, "requests_per_s")); }},
    {"output tok/s", [](const json& s) { return fmt::format("{:.1f}", num(s, "output_tok_s")); }},
    {"total tok/s", [](const json& s) { return fmt::format("{:.1f}", num(s, "total_tok_s")); }},
    {"TTFT mean ms",
     [](const json& s) { return fmt::format("{:.1f}", sub(s, "ttft_ms", "mean")); }},
    {"TTFT p50 ms", [](const json& s) { return fmt::format("{:.1f}", sub(s, "ttft_ms", "p50")); }},
    {"TTFT p99 ms", [](const json& s) { return fmt::format("{:.1f}", sub(s, "ttft_ms", "p99")); }},
    {"ITL mean ms", [](const json& s) { return fmt::format("{:.1f}", sub(s, "itl_ms", "mean")); }},
    {"ITL p50 ms", [](const json& s) { return fmt::format("{:.1f}", sub(s, "itl_ms", "p50")); }},
    {"ITL p99 ms", [](const json& s) { return fmt::format("{:.1f}", sub(s, "itl_ms", "p99")); }},
    {"E2E p50 ms", [](const json& s) { return fmt::format("{:.1f}", sub(s, "e2e_ms", "p50")); }},
    {"E2E p99 ms", [](const json& s) { return fmt::format("{:.1f}", sub(s, "e2e_ms", "p99")); }},
    {"preemptions", [](const json& s) { return fmt::format("{:.0f}", num(s, "preemptions")); }},
    {"KV waste", waste_text},
    {"prefix hit rate", [](const json& s) { return share_text(s, "prefix_hit_rate"); }},
    {"cached prompt", [](const json& s) { return share_text(s, "cached_fraction"); }},
    {"shared prefix hit", [](const json& s) { return share_text(s, "shared_hit_rate"); }},
    {"speculative", spec_text},
    {"goodput", goodput_text},
    {"ITL samples in target", itl_within_text},
};
}  // namespace

std::string render_summary(const json& s) {
  std::string o;
  for (const auto& row : kRows) {
    std::string t = row.text(s);
    if (!t.empty()) o += fmt::format("{:<20} {}\n", row.label, t);
  }
  auto errs = s.find("errors");
  if (errs != s.end() && errs->is_array())
    for (const auto& e : *errs)
      if (e.is_string()) o += "error: " + e.get<std::string>() + "\n";
  return o;
}

std::string render_compare(const std::vector<std::pair<std::string, json>>& runs) {
  std::string o = fmt::format("{:<20}", "");
  for (const auto& [name, s] : runs) o += fmt::format(" {:>20}", name);
  o += "\n";
  for (const auto& row : kRows) {
    std::string line = fmt::format("{:<20}", row.label);
    bool any = false;
    for (const auto& [name, s] : runs) {
      std::string t = row.text(s);
      any |= !t.empty();
      line += fmt::format(" {:>20}", t.empty() ? "-" : t);
    }
    if (any) o += line + "\n";
  }
  return o;
}

}  // namespace kvasir::cli
