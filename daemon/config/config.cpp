#include "daemon/config/config.h"

#include <sys/stat.h>
#include <toml++/toml.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "base/check.h"
#include "base/cores.h"
#include "base/cpu_list.h"
#include "base/log.h"

namespace kvasir {
namespace fs = std::filesystem;

namespace {

constexpr int32_t kMaxInflightLimit = 64;  // ring slots are allocated up front

// Refuses keys the file does not know: a typo must not silently fall back to
// a default ("max_row = 8" would otherwise run with 32 rows).
void check_keys(const toml::table& t, const std::string& where,
                std::initializer_list<std::string_view> known) {
  for (auto&& [k, v] : t) {
    bool ok = false;
    for (auto kk : known) ok = ok || kk == k.str();
    KV_CHECK(ok, "{}{}: unknown key", where.empty() ? "" : where + ".", k.str());
  }
}

const toml::table* sub_table(const toml::table& root, std::string_view name) {
  auto* n = root.get(name);
  if (!n) return nullptr;
  KV_CHECK(n->is_table(), "{}: must be a table ([{}])", name, name);
  return n->as_table();
}

int32_t get_int(const toml::table& t, std::string_view key, const std::string& field, int32_t def,
                int64_t lo, int64_t hi) {
  auto* n = t.get(key);
  if (!n) return def;
  auto v = n->value<int64_t>();
  KV_CHECK(n->is_integer() && v, "{}: must be an integer", field);
  KV_CHECK(*v >= lo && *v <= hi, "{}: {} is out of range [{}, {}]", field, *v, lo, hi);
  return int32_t(*v);
}

// A number of seconds (or a factor) in [lo, hi]; TOML integers are accepted.
double get_double(const toml::table& t, std::string_view key, const std::string& field, double def,
                  double lo, double hi, std::string_view unit = "seconds") {
  auto* n = t.get(key);
  if (!n) return def;
  auto v = n->value<double>();  // an integer converts; a string or a bool does not
  KV_CHECK(v && (n->is_integer() || n->is_floating_point()), "{}: must be a number", field);
  KV_CHECK(std::isfinite(*v) && *v >= lo && *v <= hi,
           "{}: {} is out of range: must be {} in [{}, {}]", field, *v, unit, lo, hi);
  return *v;
}

std::string get_str(const toml::table& t, std::string_view key, const std::string& field,
                    const std::string& def) {
  auto* n = t.get(key);
  if (!n) return def;
  KV_CHECK(n->is_string(), "{}: must be a string", field);
  return std::string(*n->value<std::string_view>());
}

uint64_t get_size(const toml::table& t, std::string_view key, const std::string& field,
                  uint64_t def) {
  auto* n = t.get(key);
  if (!n) return def;
  if (n->is_integer()) {
    int64_t v = *n->value<int64_t>();
    KV_CHECK(v >= 0, "{}: must not be negative (got {})", field, v);
    return uint64_t(v);
  }
  KV_CHECK(n->is_string(), "{}: must be a size like \"512MiB\"", field);
  return parse_size(*n->value<std::string_view>(), field);
}

std::string resolve(const std::string& base_dir, const std::string& p) {
  if (p.empty()) return p;
  fs::path path(p);
  if (path.is_absolute()) return path.lexically_normal().string();
  return (fs::path(base_dir) / path).lexically_normal().string();
}

// "0-14" or "7" → inclusive range.
void parse_layers(std::string_view s, const std::string& field, StageCfg& st) {
  auto bad = [&] {
    KV_FAIL("{}: \"{}\" is not a layer range like \"0-14\" (inclusive)", field, s);
  };
  auto num = [&](std::string_view x) -> int32_t {
    while (!x.empty() && x.front() == ' ') x.remove_prefix(1);
    while (!x.empty() && x.back() == ' ') x.remove_suffix(1);
    if (x.empty() || x.size() > 6) bad();
    int32_t v = 0;
    for (char c : x) {
      if (!std::isdigit(static_cast<unsigned char>(c))) bad();
      v = v * 10 + (c - '0');
    }
    return v;
  };
  auto dash = s.find('-');
  if (dash == std::string_view::npos) {
    st.first = st.last = num(s);
  } else {
    st.first = num(s.substr(0, dash));
    st.last = num(s.substr(dash + 1));
  }
  KV_CHECK(st.first <= st.last, "{}: \"{}\" ends before it starts", field, s);
}

// The key file: one line, read once at start. Refused if others may read it
// (the key would leak to every local user) or if it is not a small text file.
std::string read_api_key_file(const std::string& path) {
  const char* f = "server.api_key_file";
  struct stat st {};
  KV_CHECK(::stat(path.c_str(), &st) == 0, "{}: {}: {}", f, path, std::strerror(errno));
  KV_CHECK(S_ISREG(st.st_mode), "{}: {} is not a regular file", f, path);
  KV_CHECK((st.st_mode & 0007) == 0,
           "{}: {} is accessible by other users (mode {:04o}); chmod 600 (or 640 for a group)", f,
           path, st.st_mode & 07777);
  KV_CHECK(st.st_size <= 4096, "{}: {} is {} bytes; a key file holds one short line", f, path,
           int64_t(st.st_size));
  std::ifstream in(path, std::ios::binary);
  KV_CHECK(in.good(), "{}: cannot read {}: {}", f, path, std::strerror(errno));
  std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  KV_CHECK(!in.bad(), "{}: cannot read {}", f, path);
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
  KV_CHECK(!key.empty(), "{}: {} is empty", f, path);
  for (unsigned char c : key)
    KV_CHECK(c >= 0x21 && c < 0x7f,
             "{}: {}: the key must be one line of printable characters without spaces", f, path);
  return key;
}

// [recovery] (docs/recovery.md). The bounds keep every value meaningful: a
// back-off past an hour or a watchdog k below 1 (a batch as slow as its own
// p99 is "hung") is a typo, not a policy.
void parse_recovery(const toml::table& t, RecoveryCfg& r) {
  check_keys(t, "recovery",
             {"watchdog_k", "watchdog_floor_s", "watchdog_busy_cap_s", "backoff_s", "backoff_max_s",
              "max_restarts", "restart_window_s"});
  r.watchdog_k =
      get_double(t, "watchdog_k", "recovery.watchdog_k", r.watchdog_k, 1, 1e6, "a factor");
  r.watchdog_floor_s =
      get_double(t, "watchdog_floor_s", "recovery.watchdog_floor_s", r.watchdog_floor_s, 0, 86400);
  // Below the floor is allowed: 0 means no cap; a cap under the floor only
  // catches spinning stages sooner.
  r.watchdog_busy_cap_s = get_double(t, "watchdog_busy_cap_s", "recovery.watchdog_busy_cap_s",
                                     r.watchdog_busy_cap_s, 0, 86400);
  r.backoff_s = get_double(t, "backoff_s", "recovery.backoff_s", r.backoff_s, 0, 3600);
  r.backoff_max_s =
      get_double(t, "backoff_max_s", "recovery.backoff_max_s", r.backoff_max_s, 0, 3600);
  KV_CHECK(r.backoff_max_s >= r.backoff_s,
           "recovery.backoff_max_s: {} is below recovery.backoff_s = {}", r.backoff_max_s,
           r.backoff_s);
  r.max_restarts = get_int(t, "max_restarts", "recovery.max_restarts", r.max_restarts, 0, 1000);
  r.restart_window_s =
      get_double(t, "restart_window_s", "recovery.restart_window_s", r.restart_window_s, 1, 86400);
}

}  // namespace

uint64_t parse_size(std::string_view text, const std::string& field) {
  std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string num = s.substr(0, i), unit = s.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  KV_CHECK(!num.empty() && num.find('.') == num.rfind('.') && num != ".",
           "{}: \"{}\" is not a size like \"512MiB\"", field, text);
  double v = std::stod(num);
  double mult = 0;
  static const std::pair<const char*, double> units[] = {{"", 1},          {"B", 1},
                                                         {"KiB", 1024.0},  {"MiB", 1048576.0},
                                                         {"GiB", 1 << 30}, {"TiB", 1099511627776.0},
                                                         {"KB", 1e3},      {"MB", 1e6},
                                                         {"GB", 1e9},      {"TB", 1e12},
                                                         {"K", 1024.0},    {"M", 1048576.0},
                                                         {"G", 1 << 30}};
  for (auto& [name, m] : units)
    if (unit == name) mult = m;
  KV_CHECK(mult > 0, "{}: unknown unit \"{}\" in \"{}\" (use B, KiB, MiB, GiB, TiB, KB, MB, GB)",
           field, unit, text);
  double bytes = v * mult;
  KV_CHECK(bytes < 1.8e19 && std::isfinite(bytes), "{}: \"{}\" is too large", field, text);
  return uint64_t(bytes);
}

void validate_plan(const PlanCfg& plan) {
  const auto n = plan.stages.size();
  KV_CHECK(n >= 2,
           "stages: the plan has {} stage{}; a ring needs at least two, because head "
           "(embeddings, batches in) and tail (output head, sampling) are distinct roles",
           n, n == 1 ? "" : "s");
  KV_CHECK(plan.max_rows > 0, "plan.max_rows: must be > 0");
  KV_CHECK(plan.max_tokens > 0, "plan.max_tokens: must be > 0");
  KV_CHECK(plan.max_rows <= plan.max_tokens,
           "plan.max_rows: {} rows cannot fit in max_tokens = {} (each row carries >= 1 token)",
           plan.max_rows, plan.max_tokens);
  KV_CHECK(plan.max_inflight >= 0 && plan.max_inflight <= kMaxInflightLimit,
           "plan.max_inflight: {} is out of range [0, {}] (0 = number of stages)",
           plan.max_inflight, kMaxInflightLimit);
  std::set<std::string> gpus;
  for (size_t i = 0; i < n; ++i) {
    const auto& s = plan.stages[i];
    const std::string f = fmt::format("stages[{}]", s.entry >= 0 ? size_t(s.entry) : i);
    KV_CHECK(s.threads > 0, "{}.threads: must be > 0", f);
    if (s.device != "cpu") {
      bool ok = s.is_gpu() && s.device.size() > 5 && s.device.size() <= 8;
      for (size_t k = 5; ok && k < s.device.size(); ++k)
        ok = std::isdigit(static_cast<unsigned char>(s.device[k]));
      KV_CHECK(ok, "{}.device: \"{}\" is not \"cpu\" or \"cuda:N\"", f, s.device);
      // One stage per GPU of each host: cuda:0 on the leader and on a
      // worker are two devices.
      KV_CHECK(gpus.insert(s.host + " " + s.device).second,
               "{}.device: {} is already used by another stage{} (one stage per GPU)", f, s.device,
               s.host.empty() ? "" : " on " + s.host);
    }
    if (plan.auto_layers) continue;  // chosen at load (apply_split)
    KV_CHECK(s.first >= 0 && s.first <= s.last, "{}.layers: {}-{} is not a range", f, s.first,
             s.last);
    if (i == 0) {
      KV_CHECK(s.first == 0, "{}.layers: starts at {}; layers 0-{} are assigned to no stage", f,
               s.first, s.first - 1);
    } else {
      const auto& p = plan.stages[i - 1];
      const size_t pe = p.entry >= 0 ? size_t(p.entry) : i - 1;
      KV_CHECK(s.first > p.last, "{}.layers: {}-{} overlaps stages[{}] ({}-{})", f, s.first, s.last,
               pe, p.first, p.last);
      KV_CHECK(s.first == p.last + 1,
               "{}.layers: starts at {} but stages[{}] ends at {}; layers {}-{} are assigned to "
               "no stage",
               f, s.first, pe, p.last, p.last + 1, s.first - 1);
    }
  }
}

namespace {

// One parser per table of the file; each applies that table's rules.

void parse_model(const toml::table& root, const std::string& base_dir, ModelCfg& m) {
  auto* model = sub_table(root, "model");
  KV_CHECK(model, "model: missing [model] table (model.path is required)");
  check_keys(*model, "model", {"path"});
  m.path = resolve(base_dir, get_str(*model, "path", "model.path", ""));
  KV_CHECK(!m.path.empty(), "model.path: required");
}

void parse_plan(const toml::table& p, PlanCfg& plan) {
  check_keys(p, "plan", {"max_rows", "max_tokens", "max_inflight", "spin_us"});
  plan.max_rows = get_int(p, "max_rows", "plan.max_rows", 32, 0, 1 << 16);
  plan.max_tokens = get_int(p, "max_tokens", "plan.max_tokens", 512, 0, 1 << 20);
  plan.max_inflight = get_int(p, "max_inflight", "plan.max_inflight", 0, 0, kMaxInflightLimit);
  plan.spin_us =
      get_int(p, "spin_us", "plan.spin_us", PlanCfg::kDefaultSpinUs, 0, PlanCfg::kMaxSpinUs);
}

StageCfg parse_stage(const toml::node& n, const std::string& f) {
  auto* t = n.as_table();
  KV_CHECK(t, "{}: must be a table", f);
  check_keys(*t, f, {"layers", "device", "threads", "experts", "cpus", "host"});
  StageCfg st;
  auto* layers = t->get("layers");
  KV_CHECK(layers, "{}.layers: required (e.g. \"0-14\", or \"auto\")", f);
  if (layers->is_string() && *layers->value<std::string_view>() == "auto") {
    st.first = st.last = -1;  // chosen at load from measured costs
  } else if (layers->is_integer()) {
    st.first = st.last = int32_t(*layers->value<int64_t>());
  } else {
    KV_CHECK(layers->is_string(), "{}.layers: must be a string like \"0-14\"", f);
    parse_layers(*layers->value<std::string_view>(), f + ".layers", st);
  }
  if (auto* ex = t->get("experts")) {
    // An expert group's range (docs/expert-groups.md): parsed as a layer
    // range is, into a scratch StageCfg.
    KV_CHECK(ex->is_string(), "{}.experts: must be a string like \"0-63\" (inclusive)", f);
    StageCfg r;
    parse_layers(*ex->value<std::string_view>(), f + ".experts", r);
    st.experts_first = r.first;
    st.experts_last = r.last;
  }
  st.device = get_str(*t, "device", f + ".device", "cpu");
  st.host = get_str(*t, "host", f + ".host", "");
  if (auto* c = t->get("cpus")) {
    KV_CHECK(c->is_string(), "{}.cpus: must be a string like \"0-15\" or \"0,2,4-7\"", f);
    std::vector<int> cpus;
    const Status ok =
        check_cpu_list(*c->value<std::string_view>(), f + ".cpus", allowed_cpus(), cpus);
    KV_CHECK(ok.ok(), "{}", ok.message());
    st.cpus = format_cpu_list(cpus);
  }
  // 0: every core this process may run on; the CPU stages share them by
  // need (stages/core_share.h), so each may hold all of them.
  st.threads = get_int(*t, "threads", f + ".threads", 0, 0, 1024);
  if (st.threads == 0) st.threads = std::min(available_cores(), 1024);
  return st;
}

}  // namespace

int32_t parallel_stages(const PlanCfg& plan, int cores) {
  int32_t gpu = 0, cpu = 0;
  int64_t threads = 0;
  for (const StageCfg& s : plan.stages) {
    if (s.is_gpu()) {
      gpu++;
    } else {
      cpu++;
      threads += s.threads;
    }
  }
  return gpu + (threads <= cores ? cpu : std::min<int32_t>(cpu, 1));
}

int32_t PlanCfg::inflight() const {
  if (max_inflight > 0) return max_inflight;
  // Stages sharing the cores take turns on them whatever the ring holds: a
  // second micro-batch let both compute at once on a core each, the 16
  // decodes of 16 concurrent requests going 8 + 8, so each stage read and
  // unpacked its weights once per 8 tokens on one core instead of once per
  // 16 on all of them (the 1B shape: 1.25x the CPU time per token).
  return std::max(1, parallel_stages(*this, available_cores()));
}

namespace {

void parse_stages(const toml::node& n, PlanCfg& plan) {
  auto* arr = n.as_array();
  KV_CHECK(arr, "stages: must be an array of tables ([[stages]])");
  for (size_t i = 0; i < arr->size(); ++i)
    plan.stages.push_back(parse_stage((*arr)[i], fmt::format("stages[{}]", i)));
  // "auto" is a plan, not a stage's range: all of them or none.
  size_t autos = 0;
  for (const StageCfg& s : plan.stages) autos += s.first < 0;
  for (size_t i = 0; i < plan.stages.size() && autos > 0; ++i)
    KV_CHECK(plan.stages[i].first < 0,
             "stages[{}].layers: \"auto\" must be given for every stage or none (the split "
             "is chosen for the whole ring)",
             i);
  plan.auto_layers = autos > 0;
  plan.stages = form_groups(std::move(plan.stages));
}

// `static` models a padded batcher: every member of a batch computes its
// longest prompt. Reusing cached blocks would make it something else, so
// caching is off under it by default and refused when asked for.
void settle_prefix_caching(Config& c) {
  if (c.scheduler.policy != "static") return;
  KV_CHECK(!(c.kv.prefix_caching_set && c.kv.prefix_caching),
           "kv.prefix_caching: not with scheduler.policy = \"static\" (a padded batcher "
           "computes every prompt); set it to false or choose another policy");
  c.kv.prefix_caching = false;
}

void parse_kv(const toml::table& k, KvCfg& kv) {
  check_keys(k, "kv",
             {"block_size", "memory", "dtype", "gpu_memory_utilization", "prefix_caching"});
  if (auto* n = k.get("prefix_caching")) {
    KV_CHECK(n->is_boolean(), "kv.prefix_caching: must be true or false");
    kv.prefix_caching = *n->value<bool>();
    kv.prefix_caching_set = true;
  }
  kv.block_size = get_int(k, "block_size", "kv.block_size", 16, 1, 1024);
  kv.memory = get_size(k, "memory", "kv.memory", kv.memory);
  kv.dtype = get_str(k, "dtype", "kv.dtype", "f16");
  KV_CHECK(kv.dtype == "f16" || kv.dtype == "f32", "kv.dtype: \"{}\" is not f16 or f32", kv.dtype);
  KV_CHECK(kv.memory > 0, "kv.memory: must be > 0");
  if (auto* g = k.get("gpu_memory_utilization")) {
    auto v = g->value<double>();
    KV_CHECK(v && std::isfinite(*v) && *v > 0 && *v <= 1,
             "kv.gpu_memory_utilization: must be a fraction in (0, 1]");
    kv.gpu_memory_utilization = *v;
  }
}

// scheduler.itl_target_ms: "auto", or milliseconds (0 = no target).
double parse_itl_target(const toml::table& s, double def) {
  const char* f = "scheduler.itl_target_ms";
  auto* n = s.get("itl_target_ms");
  if (!n) return def;
  if (n->is_string()) {
    KV_CHECK(*n->value<std::string_view>() == "auto",
             "{}: \"{}\" is not \"auto\" or a number of milliseconds", f,
             *n->value<std::string_view>());
    return SchedulerCfg::kItlAuto;
  }
  return get_double(s, "itl_target_ms", f, def, 0, 600000, "milliseconds (0 = no target)");
}

void parse_cuda(const toml::table& t, CudaCfg& c) {
  check_keys(t, "cuda", {"graphs", "quantize"});
  if (auto* g = t.get("graphs")) {
    KV_CHECK(g->is_boolean(), "cuda.graphs: must be true or false");
    c.graphs = *g->value<bool>();
  }
  c.quantize = get_str(t, "quantize", "cuda.quantize", c.quantize);
  KV_CHECK(c.quantize == "none" || c.quantize == "fp8", "cuda.quantize: \"{}\" is not none or fp8",
           c.quantize);
}

// [cuda] keys that only mean something with a GPU stage.
void check_cuda(const Config& c) {
  bool any_gpu = false;
  for (const StageCfg& s : c.plan.stages) any_gpu = any_gpu || s.is_gpu();
  KV_CHECK(c.cuda.quantize == "none" || any_gpu,
           "cuda.quantize: \"{}\" but no stage is on a GPU (only GPU stages quantise)",
           c.cuda.quantize);
}

void parse_scheduler(const toml::table& s, SchedulerCfg& sc) {
  check_keys(s, "scheduler",
             {"policy", "chunk_size", "max_num_seqs", "max_queue", "itl_target_ms", "warmup"});
  sc.policy = get_str(s, "policy", "scheduler.policy", "continuous+chunked");
  // The names daemon/engine/scheduler.h parses (kept literal here: config
  // has no dependency on the engine).
  KV_CHECK(sc.policy == "naive" || sc.policy == "static" || sc.policy == "continuous" ||
               sc.policy == "continuous+chunked",
           "scheduler.policy: \"{}\" is not one of naive, static, continuous, "
           "continuous+chunked",
           sc.policy);
  sc.chunk_size = get_int(s, "chunk_size", "scheduler.chunk_size", 512, 1, 1 << 20);
  sc.max_num_seqs = get_int(s, "max_num_seqs", "scheduler.max_num_seqs", 256, 1, 1 << 20);
  // At least 1: a request waits in the queue before its first batch, so 0
  // would refuse every request (a daemon that serves nobody).
  sc.max_queue = get_int(s, "max_queue", "scheduler.max_queue", 1024, 1, 1 << 24);
  sc.itl_target_ms = parse_itl_target(s, sc.itl_target_ms);
  if (auto* n = s.get("warmup")) {
    KV_CHECK(n->is_boolean(), "scheduler.warmup: must be true or false");
    sc.warmup = *n->value<bool>();
  }
}

// The draft count bounds a row's verification records (ipc DescRow::n_draft
// is a byte) and what a decode row may add to a micro-batch.
constexpr int32_t kMaxDraft = 16;

void parse_speculative(const toml::table& t, SpeculativeCfg& sc) {
  check_keys(t, "speculative",
             {"method", "max_draft", "ngram_max", "ngram_min", "adaptive", "probe_interval",
              "max_step_growth", "suffix_max_depth", "suffix_min_prob", "suffix_cache_requests",
              "grammar_forced"});
  sc.method = get_str(t, "method", "speculative.method", sc.method);
  KV_CHECK(sc.method == "none" || sc.method == "ngram" || sc.method == "suffix",
           "speculative.method: \"{}\" is not one of none, ngram, suffix", sc.method);
  sc.max_draft = get_int(t, "max_draft", "speculative.max_draft", sc.max_draft, 1, kMaxDraft);
  sc.ngram_max = get_int(t, "ngram_max", "speculative.ngram_max", sc.ngram_max, 1, 64);
  sc.ngram_min = get_int(t, "ngram_min", "speculative.ngram_min", sc.ngram_min, 1, 64);
  KV_CHECK(sc.ngram_min <= sc.ngram_max, "speculative.ngram_min ({}) exceeds ngram_max ({})",
           sc.ngram_min, sc.ngram_max);
  sc.suffix_max_depth =
      get_int(t, "suffix_max_depth", "speculative.suffix_max_depth", sc.suffix_max_depth, 2, 256);
  sc.suffix_min_prob = get_double(t, "suffix_min_prob", "speculative.suffix_min_prob",
                                  sc.suffix_min_prob, 1e-6, 1, "a probability");
  sc.suffix_cache_requests =
      get_int(t, "suffix_cache_requests", "speculative.suffix_cache_requests",
              sc.suffix_cache_requests, 0, 100000);
  if (auto* n = t.get("adaptive")) {
    KV_CHECK(n->is_boolean(), "speculative.adaptive: must be true or false");
    sc.adaptive = *n->value<bool>();
  }
  sc.probe_interval =
      get_int(t, "probe_interval", "speculative.probe_interval", sc.probe_interval, 1, 4096);
  sc.max_step_growth = get_double(t, "max_step_growth", "speculative.max_step_growth",
                                  sc.max_step_growth, 0, kMaxDraft, "a fraction of the step");
  if (auto* n = t.get("grammar_forced")) {
    KV_CHECK(n->is_boolean(), "speculative.grammar_forced: must be true or false");
    sc.grammar_forced = *n->value<bool>();
  }
}

double get_seconds(const toml::table& t, const char* key, const char* field, double def, double lo,
                   double hi) {
  auto* d = t.get(key);
  if (!d) return def;
  auto v = d->value<double>();
  KV_CHECK(v && std::isfinite(*v) && *v >= lo && *v <= hi, "{}: must be seconds in [{}, {}]", field,
           lo, hi);
  return *v;
}

void check_host_port(const std::string& http) {
  auto colon = http.rfind(':');
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < http.size();
  int port = 0;
  for (size_t i = colon + 1; ok && i < http.size(); ++i) {
    ok = std::isdigit(static_cast<unsigned char>(http[i]));
    port = port * 10 + (http[i] - '0');
    ok = ok && port <= 65535;
  }
  KV_CHECK(ok, "server.http: \"{}\" is not \"host:port\"", http);
}

// server.served_model_name: a string or a list of 1 to 16 distinct
// strings, each 1 to 256 bytes of printable ASCII (a name travels in URLs,
// JSON and logs).
std::vector<std::string> parse_served_names(const toml::table& s) {
  const char* f = "server.served_model_name";
  const toml::node* n = s.get("served_model_name");
  if (!n) return {};
  std::vector<std::string> names;
  if (auto v = n->value<std::string>()) {
    names.push_back(*v);
  } else if (const toml::array* a = n->as_array()) {
    for (const toml::node& e : *a) {
      auto v = e.value<std::string>();
      KV_CHECK(v.has_value(), "{}: must be a string or a list of strings", f);
      names.push_back(*v);
    }
  } else {
    KV_FAIL("{}: must be a string or a list of strings", f);
  }
  KV_CHECK(!names.empty() && names.size() <= 16, "{}: 1 to 16 names (got {})", f, names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    KV_CHECK(!name.empty() && name.size() <= 256, "{}: a name of 1 to 256 bytes (got {})", f,
             name.size());
    for (char c : name)
      KV_CHECK(c >= 0x20 && c < 0x7f, "{}: '{}' holds a control or non-ASCII byte", f, name);
    for (size_t j = 0; j < i; ++j) KV_CHECK(names[j] != name, "{}: '{}' is listed twice", f, name);
  }
  return names;
}

void parse_server(const toml::table& s, ServerCfg& sv) {
  check_keys(s, "server",
             {"socket", "http", "api_key", "api_key_file", "max_body", "drain_timeout",
              "read_timeout", "max_connections", "served_model_name"});
  sv.socket = get_str(s, "socket", "server.socket", sv.socket);
  sv.http = get_str(s, "http", "server.http", "");
  sv.api_key = get_str(s, "api_key", "server.api_key", "");
  sv.max_body = get_size(s, "max_body", "server.max_body", sv.max_body);
  sv.api_key_file = get_str(s, "api_key_file", "server.api_key_file", "");
  sv.drain_timeout =
      get_seconds(s, "drain_timeout", "server.drain_timeout", sv.drain_timeout, 0, 86400);
  // Below 0.1 s a slow but honest client could not send a request at all.
  sv.read_timeout =
      get_seconds(s, "read_timeout", "server.read_timeout", sv.read_timeout, 0.1, 3600);
  sv.max_connections = get_int(s, "max_connections", "server.max_connections", 256, 1, 65536);
  KV_CHECK(sv.max_body > 0, "server.max_body: must be > 0");
  if (!sv.http.empty()) check_host_port(sv.http);
  sv.served_model_name = parse_served_names(s);
}

// After every table: paths against the config's folder, the key file read.
void resolve_server(const std::string& base_dir, ServerCfg& sv) {
  KV_CHECK(!sv.socket.empty(), "server.socket: required");
  sv.socket = resolve(base_dir, sv.socket);
  if (sv.api_key_file.empty()) return;
  KV_CHECK(sv.api_key.empty(),
           "server.api_key_file: set together with server.api_key; keep one of them");
  sv.api_key_file = resolve(base_dir, sv.api_key_file);
  sv.api_key = read_api_key_file(sv.api_key_file);
}

void parse_grammar(const toml::table& t, GrammarCfg& g) {
  check_keys(t, "grammar",
             {"enabled", "workers", "cache_capacity", "compile_timeout", "max_spec_bytes"});
  if (auto* n = t.get("enabled")) {
    KV_CHECK(n->is_boolean(), "grammar.enabled: must be true or false");
    g.enabled = *n->value<bool>();
  }
  g.workers = get_int(t, "workers", "grammar.workers", g.workers, 1, 64);
  g.cache_capacity =
      get_int(t, "cache_capacity", "grammar.cache_capacity", g.cache_capacity, 0, 1 << 20);
  g.compile_timeout_s =
      get_double(t, "compile_timeout", "grammar.compile_timeout", g.compile_timeout_s, 0.01, 600);
  g.max_spec_bytes = get_size(t, "max_spec_bytes", "grammar.max_spec_bytes", g.max_spec_bytes);
  KV_CHECK(g.max_spec_bytes >= 1024 && g.max_spec_bytes <= (16u << 20),
           "grammar.max_spec_bytes: {} is out of range [1KiB, 16MiB]", g.max_spec_bytes);
}

void parse_cluster(const toml::table& t, const std::string& base_dir, ClusterCfg& c) {
  check_keys(t, "cluster", {"key", "join_timeout", "link_timeout"});
  c.key = resolve(base_dir, get_str(t, "key", "cluster.key", ""));
  c.join_timeout_s =
      get_double(t, "join_timeout", "cluster.join_timeout", c.join_timeout_s, 0.1, 86400);
  c.link_timeout_s =
      get_double(t, "link_timeout", "cluster.link_timeout", c.link_timeout_s, 0.5, 3600);
}

void parse_log(const toml::table& l, const std::string& base_dir, LogCfg& lc) {
  check_keys(l, "log", {"level", "batches"});
  lc.level = get_str(l, "level", "log.level", lc.level);
  KV_CHECK(log::parse_level(lc.level).has_value(),
           "log.level: \"{}\" is not one of trace, debug, info, warn, error, off", lc.level);
  lc.batches = resolve(base_dir, get_str(l, "batches", "log.batches", lc.batches));
}

}  // namespace

Config parse_config(std::string_view text, const std::string& base_dir, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    KV_FAIL("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column,
            e.description());
  }
  Config c;
  c.source = source;
  check_keys(root, "",
             {"model", "plan", "stages", "kv", "cuda", "scheduler", "server", "recovery", "grammar",
              "speculative", "log", "cluster"});
  parse_model(root, base_dir, c.model);
  if (auto* p = sub_table(root, "plan")) parse_plan(*p, c.plan);
  if (auto* n = root.get("stages")) parse_stages(*n, c.plan);
  if (auto* k = sub_table(root, "kv")) parse_kv(*k, c.kv);
  if (auto* t = sub_table(root, "cuda")) parse_cuda(*t, c.cuda);
  if (auto* s = sub_table(root, "scheduler")) parse_scheduler(*s, c.scheduler);
  if (auto* s = sub_table(root, "server")) parse_server(*s, c.server);
  if (auto* r = sub_table(root, "recovery")) parse_recovery(*r, c.recovery);
  if (auto* g = sub_table(root, "grammar")) parse_grammar(*g, c.grammar);
  if (auto* t = sub_table(root, "speculative")) parse_speculative(*t, c.speculative);
  if (auto* l = sub_table(root, "log")) parse_log(*l, base_dir, c.log);
  if (auto* t = sub_table(root, "cluster")) parse_cluster(*t, base_dir, c.cluster);
  resolve_server(base_dir, c.server);
  validate_plan(c.plan);
  settle_prefix_caching(c);
  check_cuda(c);
  validate_cluster(c);
  return c;
}

void apply_split(PlanCfg& plan, const std::vector<std::pair<int, int>>& ranges) {
  KV_CHECK(ranges.size() == plan.stages.size(), "stages: a split of {} ranges for {} stages",
           ranges.size(), plan.stages.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    plan.stages[i].first = ranges[i].first;
    plan.stages[i].last = ranges[i].second;
  }
  plan.auto_layers = false;
  validate_plan(plan);
}

Config load_config(const std::string& path) {
  std::error_code ec;
  KV_CHECK(fs::is_regular_file(path, ec), "config: {}: no such file", path);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  auto dir = fs::absolute(fs::path(path)).parent_path().string();
  return parse_config(ss.str(), dir, path);
}

uint64_t kv_bytes_per_block(const ModelConfig& m, int32_t n_layers, int32_t block_size,
                            const std::string& dtype) {
  return kv_block_bytes(m, n_layers, block_size, dtype == "f32" ? 4 : 2);
}

namespace {

// What the CUDA backend does not run (the stage refuses it at load too,
// stages/cuda/executor.cpp): refused before any process starts.
// The MoE kernels' limits (kernels/cuda/moe_route.h kMoeMaxExperts,
// kMoeMaxTopK; the daemon does not include kernels/cuda).
constexpr int32_t kGpuMoeMaxExperts = 1024;
constexpr int32_t kGpuMoeMaxTopK = 64;

void check_gpu_model(size_t i, const ModelConfig& m) {
  // GPU stages run Mixtral-style experts only (llama with experts: no shared
  // expert, no q/k norm, bf16 experts), within the kernels' limits.
  if (m.moe()) {
    const bool mixtral = m.arch == "llama" && m.shared_expert_ffn == 0 && !m.qk_norm &&
                         !m.fp8_weights && m.n_experts <= kGpuMoeMaxExperts &&
                         m.n_experts_used <= kGpuMoeMaxTopK;
    KV_CHECK_CODE(
        mixtral, ErrorCode::kModelFormat,
        "stages[{}].device: a GPU stage cannot run this model: it is a {} mixture "
        "of experts ({} experts, top {}{}{}{}) and GPU stages run only Mixtral-style ones "
        "(llama, at most {} experts, top {}); cpu stages run it",
        i, m.arch, m.n_experts, m.n_experts_used,
        m.shared_expert_ffn > 0 ? ", a shared expert" : "",
        m.qk_norm ? ", per-head q/k RMSNorm" : "", m.fp8_weights ? ", FP8 experts" : "",
        kGpuMoeMaxExperts, kGpuMoeMaxTopK);
  }
  KV_CHECK_CODE(!m.qk_norm, ErrorCode::kModelFormat,
                "stages[{}].device: a GPU stage cannot run this model: its per-head q/k RMSNorm "
                "({}) is implemented on cpu stages only",
                i, m.arch);
}

// An expert group's ranges end at the model's last expert (form_groups has
// checked they ascend from 0 without gap or overlap), so they partition its
// experts exactly.
void check_group_model(const StageCfg& s, const ModelConfig& m) {
  if (!s.is_group()) return;
  KV_CHECK(m.moe(),
           "stages[{}].experts: the model ({}) has no experts; an expert group needs a mixture "
           "of experts",
           s.entry, m.arch);
  const StageCfg& last = s.members.empty() ? s : s.members.back();
  KV_CHECK(last.experts_last < m.n_experts,
           "stages[{}].experts: {}-{} goes past the model's last expert {} ({} experts)",
           last.entry, last.experts_first, last.experts_last, m.n_experts - 1, m.n_experts);
  KV_CHECK(last.experts_last == m.n_experts - 1,
           "stages[{}].experts: ends at {}; experts {}-{} of the model are held by no member "
           "of the group",
           last.entry, last.experts_last, last.experts_last + 1, m.n_experts - 1);
}

}  // namespace

void check_against_model(const Config& cfg, const ModelConfig& m) {
  KV_CHECK(!cfg.plan.auto_layers,
           "stages: layers = \"auto\" is chosen at load; the split is not made yet");
  const auto& st = cfg.plan.stages;
  for (size_t i = 0; i < st.size(); ++i) {
    KV_CHECK(st[i].last < m.n_layers,
             "stages[{}].layers: {}-{} goes past the model's last layer {} ({} layers)", i,
             st[i].first, st[i].last, m.n_layers - 1, m.n_layers);
    // A GPU stage sizes its KV from kv.gpu_memory_utilization once its weights
    // are on the device; whether this build has the CUDA plugin and the
    // machine a driver and that device is checked by the stage itself after
    // exec (stages/cuda_plugin.h): the daemon never loads CUDA.
    check_group_model(st[i], m);
    if (st[i].is_gpu()) {
      check_gpu_model(i, m);
      continue;
    }
    KV_CHECK(!m.fp8_weights,
             "stages[{}].device: cpu cannot run this model: its weights are FP8 (config.json's "
             "quantization_config), which only GPU stages read; put every stage on cuda:N",
             i);
    uint64_t per =
        kv_bytes_per_block(m, st[i].last - st[i].first + 1, cfg.kv.block_size, cfg.kv.dtype);
    KV_CHECK(per > 0 && cfg.kv.memory / per >= 1,
             "kv.memory: {} bytes hold no block for stages[{}] ({} bytes per block)", cfg.kv.memory,
             i, per);
  }
  KV_CHECK(st.back().last == m.n_layers - 1,
           "stages[{}].layers: ends at {}; layers {}-{} of the model are assigned to no stage",
           st.size() - 1, st.back().last, st.back().last + 1, m.n_layers - 1);
}

}  // namespace kvasir
