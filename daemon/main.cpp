// kvasird — the daemon. Kept short on purpose: parse arguments, load the
// config, open the HTTP API (daemon/api/api.h) at once — it answers 503
// "loading" with per-stage progress while the stages start
// (daemon/supervisor/loading.h) — start the stages (supervisor) and the
// bridge (engine), and on SIGTERM/SIGINT stop everything in order: drain the
// API (a second signal aborts what is left), then stop the stages and remove
// the shared segment and the socket.
//
//   kvasird --config FILE            run in the foreground
//   kvasird --check --config FILE    validate (model included), measure the
//                                    layers and compare the split with the
//                                    balanced one (CPU stages), exit 0 / 1
//   kvasird --log-level LEVEL        trace | debug | info | warn | error | off
//                                    (overrides [log] level)
//   kvasird --stage N --segment NAME (internal) a stage process
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "base/check.h"
#include "base/cores.h"
#include "base/layer_split.h"
#include "base/log.h"
#include "daemon/api/api.h"
#include "daemon/config/config.h"
#include "daemon/engine/bridge.h"
#include "daemon/engine/warmup.h"
#include "daemon/supervisor/loading.h"
#include "daemon/supervisor/remote.h"
#include "daemon/supervisor/supervisor.h"
#include "daemon/worker/worker.h"
#include "ipc/sampling.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/hf_folder.h"
#include "model/model_file.h"
#include "model/tokenizer.h"
#include "stages/stage.h"

namespace {
std::atomic<bool> g_stop{false};   // first SIGTERM/SIGINT: graceful stop
std::atomic<bool> g_abort{false};  // second: abort what the drain has not finished
std::atomic<int> g_signals{0};
void on_signal(int) {
  if (g_signals.fetch_add(1) >= 1) g_abort.store(true);
  g_stop.store(true);
}

// The API's thread: run_api, plus the hand-shake that tells main the
// listeners are up (or why they could not be).
struct ApiThread {
  std::mutex mu;
  std::condition_variable cv;
  bool listening = false, ended = false;
  std::string error;
  int rc = 0;
  std::thread thread;

  void start(const kvasir::Config& cfg, kvasir::Engine& engine, kvasir::ApiContext ctx) {
    ctx.on_listening = [this] {
      std::lock_guard lk(mu);
      listening = true;
      cv.notify_all();
    };
    thread = std::thread([this, &cfg, &engine, ctx] {
      int r = 0;
      std::string err;
      try {
        r = kvasir::run_api(cfg, engine, ctx);
      } catch (const kvasir::Error& e) {
        err = e.message();
      } catch (const std::exception& e) {
        err = e.what();
      }
      std::lock_guard lk(mu);
      rc = r;
      error = err;
      ended = true;
      cv.notify_all();
    });
  }
  // True once listening; false if run_api ended first (error says why).
  bool wait_listening() {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return listening || ended; });
    return listening && !ended;
  }
  void join() {
    if (thread.joinable()) thread.join();
  }
};

// The ring as the config plans it (the API reports it while the stages load).
kvasir::RingReport planned_ring(const kvasir::Config& cfg) {
  kvasir::RingReport r;
  r.inflight = cfg.plan.inflight();
  for (size_t i = 0; i < cfg.plan.stages.size(); ++i) {
    const kvasir::StageCfg& s = cfg.plan.stages[i];
    kvasir::StageReport one;
    one.index = int32_t(i);
    one.first_layer = s.first;
    one.last_layer = s.last;
    one.device = s.device;
    one.position = int32_t(i);
    r.stages.push_back(std::move(one));
  }
  // The expert groups' members, after the stages (as the live report has them).
  for (size_t i = 0; i < cfg.plan.stages.size(); ++i)
    for (size_t k = 0; k < cfg.plan.stages[i].members.size(); ++k) {
      const kvasir::StageCfg& m = cfg.plan.stages[i].members[k];
      kvasir::StageReport one;
      one.index = int32_t(r.stages.size());
      one.first_layer = m.first;
      one.last_layer = m.last;
      one.device = m.device;
      one.position = int32_t(i);
      one.member = int32_t(k + 1);
      r.stages.push_back(std::move(one));
    }
  return r;
}

// "a-b" of an expert group's process, null for a stage outside a group.
nlohmann::json experts_text(const kvasir::StageCfg& s) {
  if (!s.is_group()) return nullptr;
  return fmt::format("{}-{}", s.experts_first, s.experts_last);
}

// The plan and scheduler settings as /kvasir/v1/stats reports them (what
// `kvasir diagnose` reasons from).
nlohmann::json plan_json(const kvasir::Config& cfg) {
  nlohmann::json stages = nlohmann::json::array();
  for (const kvasir::StageCfg& s : cfg.plan.stages) {
    nlohmann::json members = nlohmann::json::array();
    for (const kvasir::StageCfg& m : s.members)
      members.push_back({{"experts", experts_text(m)}, {"threads", m.threads}});
    stages.push_back({{"layers", fmt::format("{}-{}", s.first, s.last)},
                      {"device", s.device},
                      {"threads", s.threads}});
    if (!s.host.empty()) stages.back()["host"] = s.host;  // on a worker (docs/multi-host.md)
    if (s.is_group()) {
      stages.back()["experts"] = experts_text(s);
      stages.back()["members"] = std::move(members);
    }
  }
  const double itl = cfg.scheduler.itl_target_ms;
  return {{"max_rows", cfg.plan.max_rows},
          {"max_tokens", cfg.plan.max_tokens},
          {"max_inflight", cfg.plan.inflight()},
          {"parallel_stages", kvasir::parallel_stages(cfg.plan, kvasir::available_cores())},
          {"stages", std::move(stages)},
          {"policy", cfg.scheduler.policy},
          {"chunk_size", cfg.scheduler.chunk_size},
          {"max_num_seqs", cfg.scheduler.max_num_seqs},
          {"itl_target_ms",
           itl == kvasir::SchedulerCfg::kItlAuto ? nlohmann::json("auto") : nlohmann::json(itl)},
          {"kv_memory", cfg.kv.memory},
          {"kv_block_size", cfg.kv.block_size}};
}

// ---- the layer split by measured time (docs/scheduler.md) ----

bool all_cpu(const kvasir::Config& cfg) {
  for (const kvasir::StageCfg& s : cfg.plan.stages)
    if (s.is_gpu()) return false;
  return true;
}

// Each layer's cost on this CPU for a micro-batch of the plan's under load:
// a ring slot's share of max_rows as decode rows at 256 positions, and a
// prompt piece as many tokens long (as the ends add theirs). Why the piece:
// the output head is paid per sampled row, the layers per token, so the
// split that balances decode-only steps (where the head weighs several
// layers) overloads the first stage once prompts are computed
// too; a piece as long as the decode rows is a load whose prompts are as
// long as its answers (each stage computes two tokens per sampled one),
// between decode-only and prompt-heavy (docs/scheduler.md).
kvasir::SplitCosts measured_costs(const kvasir::Config& cfg, int* rows) {
  *rows = std::max(1, cfg.plan.max_rows / std::max(1, cfg.plan.inflight()));
  const kvasir::LayerCosts c =
      kvasir::measure_layer_costs(cfg.model.path, cfg.plan.stages[0].threads, *rows, *rows, 256);
  return kvasir::SplitCosts{c.layer_ms, c.head_ms, c.tail_ms};
}

std::string split_text(const kvasir::SplitCosts& c, const std::vector<std::pair<int, int>>& split) {
  std::string ranges, ms;
  for (size_t s = 0; s < split.size(); ++s) {
    ranges += fmt::format("{}{}-{}", s ? " | " : "", split[s].first, split[s].second);
    ms += fmt::format(
        "{}{:.1f}", s ? " | " : "",
        kvasir::stage_cost(c, split[s].first, split[s].second, int(s), int(split.size())));
  }
  return fmt::format("{} ({} ms per stage)", ranges, ms);
}

// layers = "auto": the balanced split of the measured costs, before the
// model checks (they need ranges).
void resolve_auto_layers(kvasir::Config& cfg) {
  if (!cfg.plan.auto_layers) return;
  for (size_t i = 0; i < cfg.plan.stages.size(); ++i)
    KV_CHECK(!cfg.plan.stages[i].is_gpu(),
             "stages[{}].layers: \"auto\" measures the layers on the CPU; give the stages of a "
             "plan with a cuda device their layers",
             i);
  int rows = 0;
  const kvasir::SplitCosts c = measured_costs(cfg, &rows);
  const auto split = kvasir::balanced_split(c, int(cfg.plan.stages.size()));
  KV_CHECK(!split.empty(), "stages: {} stages for {} layers", cfg.plan.stages.size(),
           c.layer.size());
  kvasir::apply_split(cfg.plan, split);
  KV_LOG_INFO("main",
              "layers = \"auto\": {}, measured with {} decode rows and a {}-token prompt piece",
              split_text(c, split), rows, rows);
}

// kvasird --check: how unbalanced the configured split is, and the
// balanced one (CPU plans; a GPU stage's layers cost what the CPU cannot say).
void report_split(const kvasir::Config& cfg) {
  if (!all_cpu(cfg)) {
    std::printf("layer split: not measured (the plan has a cuda stage)\n");
    return;
  }
  int rows = 0;
  kvasir::SplitCosts c;
  try {
    c = measured_costs(cfg, &rows);
  } catch (const kvasir::Error& e) {
    // The model is valid but the CPU executor cannot run it (a GPU-only
    // model, e.g. BF16 norms): the check stands, the split is unmeasured.
    std::printf("layer split: not measured (the CPU cannot run this model: %s)\n",
                e.message().c_str());
    return;
  }
  std::vector<std::pair<int, int>> now;
  for (const kvasir::StageCfg& s : cfg.plan.stages) now.emplace_back(s.first, s.last);
  const auto best = kvasir::balanced_split(c, int(now.size()));
  double lo = 1e300, hi = 0;
  for (size_t s = 0; s < now.size(); ++s) {
    const double t = kvasir::stage_cost(c, now[s].first, now[s].second, int(s), int(now.size()));
    lo = std::min(lo, t), hi = std::max(hi, t);
  }
  std::printf(
      "layer costs (micro-batch of %d decode rows and a %d-token prompt piece): %.2f ms per "
      "layer (mean), head +%.2f ms, tail +%.2f ms\n",
      rows, rows, kvasir::stage_cost(c, 0, int(c.layer.size()) - 1, 1, 3) / c.layer.size(), c.head,
      c.tail);
  std::printf("configured split: %s: the slowest stage is %.2fx the fastest\n",
              split_text(c, now).c_str(), lo > 0 ? hi / lo : 0.0);
  std::printf("balanced split:   %s: a step %.2fx faster (layers = \"auto\" applies it)\n",
              split_text(c, best).c_str(), hi / kvasir::split_step(c, best));
}

// The command line.
struct Args {
  std::string config_path, segment, log_level, simd_inherit;
  bool check = false;
  int stage = -1;
  bool worker = false;
  kvasir::WorkerArgs worker_args;
};

// Parses argv into `a`; an exit status when the process should end now
// (--help, a bad option).
std::optional<int> parse_args(int argc, char** argv, Args& a) {
  CLI::App app{"kvasird — serves one model as a ring of stage processes"};
  app.add_option("--config", a.config_path, "configuration file (TOML)");
  app.add_flag("--check", a.check, "validate the configuration and the model, then exit");
  app.add_option("--log-level", a.log_level,
                 "trace, debug, info, warn, error or off (default: [log] level, else info)")
      ->check([](const std::string& v) {
        return kvasir::log::parse_level(v) ? std::string() : "not a log level: " + v;
      });
  app.add_flag("--worker", a.worker,
               "serve a slice of a leader's ring (docs/multi-host.md): listen, join, relay");
  app.add_option("--listen", a.worker_args.listen, "with --worker: ADDR:PORT to listen on");
  app.add_option("--cluster-key", a.worker_args.key_path, "with --worker: the cluster key file");
  app.add_option("--link-timeout", a.worker_args.link_timeout_s,
                 "with --worker: seconds without a frame from the leader that end its session "
                 "(the leader's cluster.link_timeout)")
      ->check(CLI::Range(0.5, 3600.0));
  app.add_option("--leaders", a.worker_args.leaders, "(tests) serve N leaders, then exit")
      ->group("");
  app.add_option("--stage", a.stage, "(internal) run stage N")->group("");
  app.add_option("--segment", a.segment, "(internal) the instance's shared segment")->group("");
  app.add_option("--simd-inherit", a.simd_inherit,
                 "(internal) a restarted stage's predecessor's kernel choices")
      ->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

// Before any thread starts, so every thread inherits the dispositions.
void install_signal_handlers() {
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
}

bool model_present(const kvasir::Config& cfg, const std::string& config_path) {
  if (std::filesystem::exists(cfg.model.path)) return true;
  KV_LOG_ERROR("main",
               "no model at {}: get the default model with "
               "`sudo /usr/share/kvasir/fetch-model` (Debian package) or `scripts/fetch-model` "
               "(source tree), or set model.path in {}",
               cfg.model.path, config_path);
  return false;
}

// The model's tokenizer: the GGUF file's, or a folder's tokenizer.json
// (hf_folder_tokenizer). A folder without a readable one throws, naming
// the file: the daemon refuses to start rather than answer every text
// request 503.
std::unique_ptr<kvasir::Tokenizer> load_tokenizer(const kvasir::ModelFile& model) {
  if (model.gguf()) return kvasir::Tokenizer::from_gguf(*model.gguf());
  return kvasir::hf_folder_tokenizer(model.path());
}

// The model's chat template, or none (then chat requests get 400): the
// GGUF file's, or a folder's chat_template.jinja / tokenizer_config.json.
std::unique_ptr<kvasir::ChatTemplate> load_chat_template(const kvasir::ModelFile& model) {
  try {
    return std::make_unique<kvasir::ChatTemplate>(
        model.gguf() ? kvasir::ChatTemplate::from_gguf(*model.gguf())
                     : kvasir::ChatTemplate::from_hf_dir(model.path()));
  } catch (const kvasir::Error&) {
    return nullptr;
  }
}

// The sampling values a request that omits them gets: the folder's
// generation_config.json's, as vLLM's --generation-config auto applies
// them; a GGUF file has none (SamplingParams' own defaults). Throws
// (kModelFormat, naming the file) for a value no request could send.
kvasir::SamplingParams sampling_defaults(const kvasir::ModelFile& model) {
  kvasir::SamplingParams s;
  if (model.gguf()) return s;
  const kvasir::GenerationDefaults g = kvasir::read_generation_config(model.path());
  s.temperature = g.temperature.value_or(s.temperature);
  s.top_p = g.top_p.value_or(s.top_p);
  s.top_k = std::max(0, g.top_k.value_or(s.top_k));  // -1: off, as a request's
  s.min_p = g.min_p.value_or(s.min_p);
  s.repetition_penalty = g.repetition_penalty.value_or(s.repetition_penalty);
  // Refused at load: a bad default would otherwise fail every request that
  // relies on it, with a 400 about a field it never sent.
  if (kvasir::Status st = kvasir::validate_sampling(s); !st.ok())
    KV_FAIL_CODE(kvasir::ErrorCode::kModelFormat, "{}/generation_config.json: {}", model.path(),
                 st.message());
  return s;
}

kvasir::SupervisorOptions supervisor_options(const kvasir::Config& cfg) {
  kvasir::SupervisorOptions o;
  static_cast<kvasir::RecoveryCfg&>(o.recovery) = cfg.recovery;  // [recovery] of the config
  return o;
}

// The running daemon: its parts in the order they start. The API thread
// uses all of them; the destructor ends it before any of them goes away,
// whatever happened (an exception included).
class Daemon {
 public:
  Daemon(const kvasir::Config& cfg, const kvasir::ModelConfig& mc)
      : cfg_(cfg),
        mc_(mc),
        model_(kvasir::ModelFile::open(cfg.model.path)),
        tok_(load_tokenizer(*model_)),
        chat_(load_chat_template(*model_)),
        sampling_(sampling_defaults(*model_)),
        sup_(cfg, mc, supervisor_options(cfg)),
        loading_(cfg, sup_.segment_name()),
        deferred_(planned_ring(cfg)) {}
  ~Daemon() {
    g_stop.store(true);
    g_abort.store(true);
    api_.join();
  }

  // Opens the API, loads the stages, serves until a stop; the exit status.
  int run() {
    // Before anything starts: a log that cannot be written is a config error.
    if (!cfg_.log.batches.empty()) {
      std::unique_ptr<kvasir::BatchLog> log;
      if (kvasir::Status st = kvasir::BatchLog::open(cfg_.log.batches, &log); !st.ok()) {
        KV_LOG_ERROR("main", "{}", st.message());
        return 1;
      }
      batch_log_ = std::move(log);
      KV_LOG_INFO("main", "a line per micro-batch to {}", cfg_.log.batches);
    }
    if (!start_api()) return 1;
    Loaded l = load_stages();
    if (!l.error.empty()) return stopped_while_loading(l.error);
    loading_.finish();
    KV_LOG_INFO("main", "loaded: {}", l.line);
    KV_LOG_INFO("main", "{} stages ready, {} KV blocks of {} tokens, segment {}",
                cfg_.plan.stages.size(), sup_.kv_blocks(), cfg_.kv.block_size, sup_.segment_name());
    return serve();
  }

 private:
  struct Loaded {
    std::string error;  // why the stages did not start ("" when they did)
    std::string line;   // the last progress line
  };

  kvasir::ApiContext api_context() {
    kvasir::ApiContext ctx;
    if (tok_) {
      ctx.codec = kvasir::make_text_codec(*tok_, chat_.get());
      facts_ = std::make_shared<const kvasir::ModelFacts>(kvasir::model_facts(*ctx.codec));
      ctx.facts = facts_;
    }
    if (tok_ && cfg_.grammar.enabled) ctx.grammar = grammar_service();
    ctx.model_name = mc_.name;
    ctx.sampling_defaults = sampling_;
    ctx.max_model_len = mc_.context_length;
    ctx.plan = plan_json(cfg_);
    ctx.stop = &g_stop;
    ctx.abort = &g_abort;
    ctx.loading = [this] { return loading_.snapshot(); };
    return ctx;
  }

  // Structured outputs checked on arrival ([grammar], docs/structured-outputs.md).
  std::shared_ptr<kvasir::GrammarService> grammar_service() const {
    kvasir::GrammarServiceOptions o;
    o.max_spec_bytes = cfg_.grammar.max_spec_bytes;
    return kvasir::make_grammar_service(o);
  }

  // False (logged why) when the API cannot listen (e.g. a daemon already
  // runs on the socket): nothing of the stages has started then.
  bool start_api() {
    api_.start(cfg_, deferred_, api_context());
    if (api_.wait_listening()) return true;
    api_.join();
    KV_LOG_ERROR("main", "{}", api_.error);
    return false;
  }

  // Starts the stages (the supervisor) while two watchers run: one logs the
  // progress about once a second; one turns a stop signal into the
  // segment's shutdown flag (the stages leave their preload early and
  // start() fails: that is a stop).
  Loaded load_stages() {
    std::atomic<bool> loaded{false};
    std::thread progress([&] {
      std::string last;
      for (int tick = 0; !loaded.load(); ++tick) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (tick % 10 != 9 || loaded.load()) continue;
        std::string line = loading_.log_line();
        if (line != last) KV_LOG_INFO("main", "loading: {}", line);
        last = line;
      }
    });
    std::thread stop_while_loading([&] {
      while (!loaded.load()) {
        if (g_stop.load() && loading_.request_shutdown()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    Loaded l;
    try {
      sup_.start();
    } catch (const std::exception& e) {
      l.error = e.what();
    }
    l.line = loading_.log_line();
    loaded.store(true);
    progress.join();
    stop_while_loading.join();
    return l;
  }

  // The stages did not start: a stop signal (exit 0) or a failure (exit 1).
  int stopped_while_loading(const std::string& error) {
    g_stop.store(true);
    api_.join();
    if (g_signals.load() > 0) {
      KV_LOG_INFO("main", "stopped while loading");
      return 0;
    }
    KV_LOG_ERROR("main", "{}", error);
    return 1;
  }

  kvasir::BridgeConfig bridge_config() const {
    using namespace kvasir;
    BridgeConfig bc;
    bc.limits = SchedLimits{cfg_.plan.max_rows, cfg_.plan.max_tokens, cfg_.scheduler.chunk_size,
                            cfg_.scheduler.max_num_seqs};
    // The config validated the name already (daemon/config/config.cpp).
    bc.limits.policy = parse_policy(cfg_.scheduler.policy).value_or(Policy::kChunked);
    bc.limits.itl_target_ms = cfg_.scheduler.itl_target_ms == SchedulerCfg::kItlAuto
                                  ? kItlTargetAuto
                                  : cfg_.scheduler.itl_target_ms;
    bc.limits.prefix_caching = cfg_.kv.prefix_caching;  // off under static (the config's rule)
    bc.limits.parallel_stages = kvasir::parallel_stages(cfg_.plan, kvasir::available_cores());
    // The config validated the method's name and the ranges.
    bc.limits.spec.method =
        parse_draft_method(cfg_.speculative.method).value_or(DraftMethod::kNone);
    bc.limits.spec.max_draft = cfg_.speculative.max_draft;
    bc.limits.spec.ngram_max = cfg_.speculative.ngram_max;
    bc.limits.spec.ngram_min = cfg_.speculative.ngram_min;
    bc.limits.spec.suffix_max_depth = cfg_.speculative.suffix_max_depth;
    bc.limits.spec.suffix_min_prob = cfg_.speculative.suffix_min_prob;
    bc.limits.spec.suffix_cache_requests = cfg_.speculative.suffix_cache_requests;
    bc.limits.spec.adaptive = cfg_.speculative.adaptive;
    bc.limits.spec.probe_interval = cfg_.speculative.probe_interval;
    bc.limits.spec.max_step_growth = cfg_.speculative.max_step_growth;
    bc.limits.spec.grammar_forced = cfg_.speculative.grammar_forced;
    bc.max_queue = cfg_.scheduler.max_queue;
    bc.n_blocks = sup_.kv_blocks();
    bc.sliding = kvasir::SlidingKv{mc_.sliding_window, sup_.kv_blocks_swa()};
    bc.block_size = cfg_.kv.block_size;
    bc.vocab = mc_.vocab;
    bc.context_length = mc_.context_length;
    bc.batch_log = batch_log_;
    if (facts_) bc.eos_ids = facts_->eog_ids;
    return bc;
  }

  // Serves through the bridge until the API's graceful stop ends, then stops
  // the engine and the stages (the segment is removed).
  int serve() {
    kvasir::BridgeConfig bc = bridge_config();
    KV_LOG_INFO("main", "scheduler policy {}, prefix caching {}",
                kvasir::policy_name(bc.limits.policy), bc.limits.prefix_caching ? "on" : "off");
    // A lost stage is restarted and its requests recomputed
    // (docs/recovery.md); past the restart limit the engine fails for good:
    // /health says unhealthy and new work is refused, the daemon stays up.
    kvasir::Bridge engine(sup_.segment(), bc, [&] { return sup_.health(); });
    if (cfg_.scheduler.warmup) {
      // The API answers 503 "loading" meanwhile (the engine is not attached).
      const kvasir::WarmupResult w =
          kvasir::warm_up(engine, mc_.vocab, 300, [] { return g_stop.load(); });
      if (w.failed > 0)
        KV_LOG_WARN("main", "warm-up: {} of its requests did not finish; serving cold", w.failed);
      else
        KV_LOG_INFO("main", "warm-up: {} requests in {:.2f} s", w.requests, w.seconds);
    }
    deferred_.attach(&engine);
    api_.join();  // returns after the graceful stop (or a lost stage)
    deferred_.attach(nullptr);
    engine.shutdown();
    sup_.stop();
    if (!engine.failure().empty()) {
      KV_LOG_ERROR("main", "{}", engine.failure());
      return 1;
    }
    if (!api_.error.empty()) {
      KV_LOG_ERROR("main", "{}", api_.error);
      return 1;
    }
    KV_LOG_INFO("main", "stopped");
    return api_.rc;
  }

  const kvasir::Config& cfg_;
  const kvasir::ModelConfig& mc_;
  std::unique_ptr<kvasir::ModelFile> model_;
  std::unique_ptr<kvasir::Tokenizer> tok_;
  // Read off the tokenizer and template once (api_context): the routes'
  // and the scheduler's end-of-generation ids are the same list.
  std::shared_ptr<const kvasir::ModelFacts> facts_;
  std::unique_ptr<kvasir::ChatTemplate> chat_;
  kvasir::SamplingParams sampling_;  // what a request's omitted sampling fields get
  kvasir::Supervisor sup_;
  kvasir::LoadingMonitor loading_;
  kvasir::DeferredEngine deferred_;              // 503 "loading" until the bridge is attached
  std::shared_ptr<kvasir::BatchLog> batch_log_;  // [log] batches, or null
  ApiThread api_;
};
}  // namespace

int main(int argc, char** argv) {
  // Before any thread: a worker restarted at once must listen on its port
  // again, where the killed one's connections linger in TIME_WAIT (a
  // minute on Linux); without SO_REUSEADDR UCX's bind fails ("Address
  // already in use") and the leader cannot rejoin it meanwhile. UCX reads
  // this only from the environment (ucp_config_modify does not reach its
  // TCP connection manager); an operator's own setting stands.
  setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
  Args a;
  if (std::optional<int> rc = parse_args(argc, argv, a)) return *rc;

  using namespace kvasir;
  const std::optional<log::Level> level = log::parse_level(a.log_level);
  if (a.stage >= 0) {
    log::init({fmt::format("kvasird stage {}", a.stage), level.value_or(log::Level::kInfo)});
    return stage_main(a.stage, a.segment, a.simd_inherit);
  }
  if (a.worker) {
    log::init({"kvasird worker", level.value_or(log::Level::kInfo)});
    return run_worker(a.worker_args);
  }
  log::init({"kvasird", level.value_or(log::Level::kInfo)});
  if (a.config_path.empty()) {
    KV_LOG_ERROR("main", "--config FILE is required");
    return 2;
  }
  try {
    Config cfg = load_config(a.config_path);
    if (!level) log::set_level(*log::parse_level(cfg.log.level));
    if (!model_present(cfg, a.config_path)) return 1;
    resolve_auto_layers(cfg);
    ModelConfig mc = check_config(cfg);
    if (a.check) {
      std::printf("%s: valid (%zu stages, %d layers, max_inflight %d)\n", a.config_path.c_str(),
                  cfg.plan.stages.size(), mc.n_layers, cfg.plan.inflight());
      report_split(cfg);
      if (const std::string hosts = WorkerLink::describe(cfg); !hosts.empty())
        std::printf("%s\n", hosts.c_str());
      return 0;
    }
    install_signal_handlers();
    Daemon daemon(cfg, mc);
    return daemon.run();
  } catch (const Error& e) {
    KV_LOG_ERROR("main", "{}", e.message());
    return 1;
  }
}
