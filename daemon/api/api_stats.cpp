// daemon/api/api_stats.cpp — what the API reports about itself and the
// engine: the latency histograms, GET /kvasir/v1/stats (JSON, read by
// `kvasir status`, `kvasir top` and `kvasir bench`) and GET /metrics
// (Prometheus). Both are built from the engine's typed reports
// (Engine::stats, Engine::ring_report) and the API's own counters.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/expert_load.h"
#include "daemon/api/api_internal.h"

namespace kvasir {

using nlohmann::json;

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

namespace {

json timing_json(const SchedTiming& t) {
  return {{"itl_target_ms", t.itl_target_ms},
          {"itl_target_auto", t.itl_target_auto},
          {"step_budget_ms", t.step_budget_ms},
          {"cost_ready", t.cost_ready},
          {"batches", t.batches},
          {"prefill_batches", t.prefill_batches},
          {"decode_rows", t.decode_rows},
          {"decode_rows_with_prefill", t.decode_rows_with_prefill},
          {"step_ms_decode", t.step_ms_decode},
          {"step_ms_prefill", t.step_ms_prefill},
          {"mean_rows", t.mean_rows},
          {"mean_tokens", t.mean_tokens},
          {"ring_depth", t.ring_depth},
          {"aim", t.aim},
          {"over_target", t.over_target},
          {"prefill_cut", t.prefill_cut},
          {"prefill_aged", t.prefill_aged},
          {"admission_waits", t.admission_waits}};
}

// Hits over queries, both in tokens (0 before any lookup).
double hit_rate(const EngineStats& s) {
  return s.prefix_queries > 0 ? double(s.prefix_hits) / double(s.prefix_queries) : 0.0;
}

json prefix_cache_json(const EngineStats& s) {
  return {{"enabled", s.prefix_caching},
          {"queries", s.prefix_queries},
          {"hits", s.prefix_hits},
          {"hit_rate", hit_rate(s)},
          {"blocks_cached", s.blocks_cached},
          {"blocks_evictable", s.blocks_evictable},
          {"blocks_swa_cached", s.blocks_swa_cached},
          {"blocks_swa_evictable", s.blocks_swa_evictable},
          {"resets", s.prefix_resets}};
}

json forced_json(const EngineStats& s) {
  const int64_t n = s.spec_forced_drafts;
  return {{"drafts", n},
          {"draft_tokens", s.spec_forced_proposed},
          {"accepted_tokens", s.spec_forced_accepted},
          {"mean_accepted_length", n > 0 ? 1.0 + double(s.spec_forced_accepted) / double(n) : 0.0}};
}

json speculative_json(const EngineStats& s) {
  return {{"method", s.spec_method},
          {"drafts", s.spec_drafts},
          {"draft_tokens", s.spec_proposed},
          {"accepted_tokens", s.spec_accepted},
          {"acceptance_rate",
           s.spec_proposed > 0 ? double(s.spec_accepted) / double(s.spec_proposed) : 0.0},
          {"mean_accepted_length",
           s.spec_drafts > 0 ? 1.0 + double(s.spec_accepted) / double(s.spec_drafts) : 0.0},
          {"zero_drafts_acceptance", s.spec_zero_by_acceptance},
          {"zero_drafts_cost", s.spec_zero_by_cost},
          {"probes", s.spec_probes},
          {"grammar_forced", forced_json(s)}};
}

// The links to worker hosts (docs/multi-host.md): [] on one host.
json links_json(const std::vector<LinkHealth>& links) {
  json out = json::array();
  for (const LinkHealth& l : links)
    out.push_back({{"host", l.host},
                   {"stages", fmt::format("{}-{}", l.first_stage, l.last_stage)},
                   {"state", l.state},
                   {"joins", l.joins},
                   {"bytes_sent", l.bytes_sent},
                   {"bytes_received", l.bytes_received},
                   {"rtt_ms", double(l.rtt_ns) / 1e6},
                   {"last_error", l.last_error}});
  return out;
}

json engine_stats_json(const EngineStats& s) {
  return {{"waiting", s.waiting},
          {"running", s.running},
          {"blocks_total", s.blocks_total},
          {"blocks_free", s.blocks_free},
          {"blocks_swa_total", s.blocks_swa_total},
          {"blocks_swa_free", s.blocks_swa_free},
          {"preemptions", s.preemptions},
          {"tokens_generated", s.tokens_generated},
          {"tokens_prompt", s.tokens_prompt},
          {"kv_slots_used", s.kv_slots_used},
          {"kv_waste", s.kv_waste},
          {"state", engine_state_name(s.state)},
          {"restarts", s.restarts},
          {"faults", s.faults},
          {"requeued", s.requeued},
          {"last_recovery_s", s.last_recovery_s},
          {"last_fault", s.last_fault},
          {"links", links_json(s.links)},
          {"timing", timing_json(s.timing)},
          {"prefix_cache", prefix_cache_json(s)},
          {"speculative", speculative_json(s)}};
}

std::string layers_text(const StageReport& s) {
  return fmt::format("{}-{}", s.first_layer, s.last_layer);
}

json cost_json(const StageCost& c) {
  return {{"fixed_ms", c.fixed_ms},       {"per_token_ms", c.per_token_ms},
          {"per_kctx_ms", c.per_kctx_ms}, {"per_sample_ms", c.per_sample_ms},
          {"rms_ms", c.rms_ms},           {"mean_busy_ms", c.mean_busy_ms},
          {"samples", c.samples}};
}

// A MoE stage's expert load since start (docs/api.md): the reader takes
// differences of `routed` for an interval, as it does of busy_s.
json experts_json(const StageReport& s) {
  uint64_t total = 0;
  for (uint64_t c : s.routed) total += c;
  json j = {{"n_experts", s.n_experts},
            {"experts_per_slot", s.experts_per_slot},
            {"routed", s.routed},
            {"routed_total", total},
            {"imbalance", expert_imbalance(s.routed)}};
  if (s.group_firsts.empty()) return j;
  // An expert group's leader: the tokens routed to each process's range
  // (a folded counter goes to the process holding its first expert) and
  // their max / mean, the group's imbalance across its processes.
  std::vector<uint64_t> per(s.group_firsts.size(), 0);
  for (size_t i = 0; i < s.routed.size(); ++i) {
    const int64_t e = int64_t(i) * s.experts_per_slot;
    size_t k = 0;
    while (k + 1 < s.group_firsts.size() && s.group_firsts[k + 1] <= e) ++k;
    per[k] += s.routed[i];
  }
  j["group"] = {{"firsts", s.group_firsts}, {"routed", per}, {"imbalance", expert_imbalance(per)}};
  return j;
}

json stage_json(const StageReport& s) {
  json j = {{"index", s.index},         {"position", s.position},    {"member", s.member},
            {"layers", layers_text(s)}, {"device", s.device},        {"simd", s.simd},
            {"busy_s", s.busy_s},       {"starved_s", s.starved_s},  {"blocked_s", s.blocked_s},
            {"state", s.state},         {"state_s", s.state_s},      {"batches", s.batches},
            {"tokens", s.tokens},       {"cost", cost_json(s.cost)}, {"handoff_s", s.handoff_s},
            {"handoffs", s.handoffs}};
  if (s.n_experts > 0) j["experts"] = experts_json(s);
  return j;
}

// An expert slot's label: its expert, or the range it folds ("34-35").
std::string expert_label(const StageReport& s, size_t slot) {
  const int64_t first = int64_t(slot) * s.experts_per_slot;
  const int64_t last = std::min<int64_t>(first + s.experts_per_slot, s.n_experts) - 1;
  return first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last);
}

// Tokens routed per expert, MoE stages only: at most 256 series a stage.
void expert_series(std::string& out, const RingReport& ring) {
  bool any = false;
  for (const StageReport& s : ring.stages) any = any || (s.n_experts > 0 && !s.routed.empty());
  if (!any) return;
  out +=
      "# HELP kvasir_expert_routed_tokens_total Tokens routed to an expert, summed over a "
      "stage's MoE layers\n# TYPE kvasir_expert_routed_tokens_total counter\n";
  for (size_t i = 0; i < ring.stages.size(); ++i) {
    const StageReport& s = ring.stages[i];
    for (size_t e = 0; e < s.routed.size(); ++e)
      out += fmt::format("kvasir_expert_routed_tokens_total{{stage=\"{}\",expert=\"{}\"}} {}\n", i,
                         expert_label(s, e), s.routed[e]);
  }
}

json latency_json(const Histogram& h) {
  return json{{"count", h.n},
              {"p50_s", h.quantile(0.5)},
              {"p99_s", h.quantile(0.99)},
              {"mean_s", h.n ? h.sum / double(h.n) : 0.0}};
}

// "# HELP name help\n# TYPE name type\nname value\n".
void gauge(std::string& out, const char* name, const char* help, double v,
           const char* type = "gauge") {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
}

// Speculative decoding's counters, labelled by drafter, named after vLLM's
// vllm:spec_decode_num_drafts / _num_draft_tokens / _num_accepted_tokens.
void spec_series(std::string& out, const EngineStats& s) {
  auto series = [&](const char* name, const char* help, int64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{{method=\"{}\"}} {}\n", name, help,
                       name, name, s.spec_method, v);
  };
  series("kvasir_spec_decode_num_drafts_total", "Decode rows that carried draft tokens",
         s.spec_drafts);
  series("kvasir_spec_decode_num_draft_tokens_total", "Draft tokens proposed", s.spec_proposed);
  series("kvasir_spec_decode_num_accepted_tokens_total", "Draft tokens the model accepted",
         s.spec_accepted);
  // The adaptive draft length (no vLLM counterpart): eligible decode rows
  // that drafted nothing, by why, and the one-draft probes.
  const char* zero = "kvasir_spec_decode_num_zero_draft_rows_total";
  out += fmt::format(
      "# HELP {} Decode rows that could have drafted and drafted nothing\n# TYPE {} counter\n"
      "{}{{method=\"{}\",reason=\"acceptance\"}} {}\n{}{{method=\"{}\",reason=\"cost\"}} {}\n",
      zero, zero, zero, s.spec_method, s.spec_zero_by_acceptance, zero, s.spec_method,
      s.spec_zero_by_cost);
  series("kvasir_spec_decode_num_probes_total", "One-draft probes of resting sequences",
         s.spec_probes);
  // Of the three vLLM-named series, the grammar-forced drafts alone.
  auto forced = [&](const char* name, const char* help, int64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{{method=\"grammar\"}} {}\n", name, help,
                       name, name, v);
  };
  forced("kvasir_spec_decode_forced_num_drafts_total",
         "Decode rows that drafted grammar-forced tokens", s.spec_forced_drafts);
  forced("kvasir_spec_decode_forced_num_draft_tokens_total", "Grammar-forced draft tokens",
         s.spec_forced_proposed);
  forced("kvasir_spec_decode_forced_num_accepted_tokens_total",
         "Grammar-forced draft tokens the model accepted", s.spec_forced_accepted);
}

// The per-stage counters, one series each, labelled by stage, layers, device.
void stage_series(std::string& out, const RingReport& ring) {
  auto series = [&](const char* name, const char* help, auto value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name);
    for (size_t i = 0; i < ring.stages.size(); ++i) {
      const StageReport& s = ring.stages[i];
      // An expert group's member: its position's stage label and its index.
      const std::string who = s.member > 0
                                  ? fmt::format("stage=\"{}\",member=\"{}\"", s.position, s.member)
                                  : fmt::format("stage=\"{}\"", i);
      out += fmt::format("{}{{{},layers=\"{}\",device=\"{}\"}} {}\n", name, who, layers_text(s),
                         s.device, double(value(s)));
    }
  };
  series("kvasir_stage_busy_seconds_total", "Time a stage held a batch",
         [](const StageReport& s) { return s.busy_s; });
  series("kvasir_stage_starved_seconds_total", "Time a stage had nothing to take",
         [](const StageReport& s) { return s.starved_s; });
  series("kvasir_stage_blocked_seconds_total", "Time a stage waited on the next",
         [](const StageReport& s) { return s.blocked_s; });
  series("kvasir_stage_batches_total", "Micro-batches a stage ran",
         [](const StageReport& s) { return s.batches; });
  series("kvasir_stage_tokens_total", "Tokens a stage ran",
         [](const StageReport& s) { return s.tokens; });
  series("kvasir_stage_handoff_seconds_total",
         "Time from a batch being ready for a stage to the stage holding it",
         [](const StageReport& s) { return s.handoff_s; });
  series("kvasir_stage_handoffs_total", "Batches whose handoff was timed",
         [](const StageReport& s) { return s.handoffs; });
}

}  // namespace

json ApiService::Impl::stats_json() {
  const RingReport ring = engine.ring_report();
  json stages = json::array();
  for (const StageReport& s : ring.stages) stages.push_back(stage_json(s));
  json body = {{"inflight", ring.inflight},
               {"stages", std::move(stages)},
               {"ring_return", {{"seconds", ring.return_s}, {"results", ring.returns}}}};
  body["model"] = ctx.model_name;
  if (!ctx.plan.is_null()) body["plan"] = ctx.plan;
  body["ready"] = engine.ready();
  body["uptime_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  body["engine"] = engine_stats_json(engine.stats());
  if (ctx.loading && !engine.ready()) body["loading"] = ctx.loading();
  std::lock_guard lk(metrics.mu);
  body["latency"] = {{"ttft", latency_json(metrics.ttft)},
                     {"itl", latency_json(metrics.itl)},
                     {"e2e", latency_json(metrics.e2e)}};
  body["requests"] = {{"cancelled", metrics.cancelled},
                      {"stopped_by_string", metrics.stopped_by_string}};
  return body;
}

std::string ApiService::Impl::metrics_text() {
  std::string out;
  EngineStats s = engine.stats();
  gauge(out, "kvasir_ready", "1 when the model is loaded and serving", engine.ready() ? 1 : 0);
  gauge(out, "kvasir_requests_running", "Requests being generated", s.running);
  gauge(out, "kvasir_requests_waiting", "Requests queued", s.waiting);
  gauge(out, "kvasir_prompt_tokens_total", "Prompt tokens processed", double(s.tokens_prompt),
        "counter");
  gauge(out, "kvasir_generation_tokens_total", "Tokens generated", double(s.tokens_generated),
        "counter");
  gauge(out, "kvasir_kv_blocks_total", "KV cache blocks", double(s.blocks_total));
  gauge(out, "kvasir_kv_blocks_free", "Free KV cache blocks", double(s.blocks_free));
  gauge(out, "kvasir_kv_usage_ratio", "Share of KV blocks in use",
        s.blocks_total > 0 ? double(s.blocks_total - s.blocks_free) / double(s.blocks_total) : 0.0);
  if (s.blocks_swa_total > 0) {  // a sliding-window group: its own pool
    gauge(out, "kvasir_kv_sliding_blocks_total", "Sliding-window group's KV blocks",
          double(s.blocks_swa_total));
    gauge(out, "kvasir_kv_sliding_blocks_free", "Sliding-window group's free KV blocks",
          double(s.blocks_swa_free));
    gauge(out, "kvasir_kv_sliding_blocks_cached",
          "Sliding-window group's KV blocks a later prompt may reuse", double(s.blocks_swa_cached));
    gauge(out, "kvasir_kv_sliding_blocks_evictable",
          "Sliding-window group's cached KV blocks no sequence holds (counted as free)",
          double(s.blocks_swa_evictable));
  }
  gauge(out, "kvasir_kv_blocks_cached", "KV blocks whose prefix a later prompt may reuse",
        double(s.blocks_cached));
  gauge(out, "kvasir_kv_blocks_evictable", "Cached KV blocks no sequence holds (counted as free)",
        double(s.blocks_evictable));
  gauge(out, "kvasir_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache",
        double(s.prefix_queries), "counter");
  gauge(out, "kvasir_prefix_cache_hits_total", "Prompt tokens found in the prefix cache",
        double(s.prefix_hits), "counter");
  gauge(out, "kvasir_prefix_cache_resets_total", "Prefix cache emptied for a new epoch",
        double(s.prefix_resets), "counter");
  spec_series(out, s);
  gauge(out, "kvasir_preemptions_total", "Sequences preempted for lack of KV blocks",
        double(s.preemptions), "counter");
  gauge(out, "kvasir_stage_restarts_total", "Stage processes restarted after a loss",
        double(s.restarts), "counter");
  gauge(out, "kvasir_requests_requeued_total", "Sequences recomputed after a stage loss",
        double(s.requeued), "counter");
  gauge(out, "kvasir_degraded", "1 while a lost stage is being recovered", s.degraded ? 1 : 0);
  {
    std::lock_guard lk(metrics.mu);
    gauge(out, "kvasir_requests_cancelled_total", "Requests whose client disconnected",
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
  const RingReport ring = engine.ring_report();
  gauge(out, "kvasir_ring_inflight", "Micro-batches in the ring now", ring.in_ring);
  gauge(out, "kvasir_ring_inflight_capacity", "Micro-batches the ring may hold at once",
        ring.inflight);
  stage_series(out, ring);
  expert_series(out, ring);
  return out;
}

}  // namespace kvasir
