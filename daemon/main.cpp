// kvasird — the daemon. Kept short on purpose: parse arguments, load the
// config, open the HTTP API (daemon/api.h) at once — it answers 503 "loading"
// with per-stage progress while the stages start (daemon/loading.h) — start
// the stages (supervisor) and the bridge (engine), and on SIGTERM/SIGINT stop
// everything in order: drain the API (a second signal aborts what is left),
// then stop the stages and remove the shared segment and the socket.
//
//   kvasird --config FILE            run in the foreground
//   kvasird --check --config FILE    validate (model included), exit 0 / 1
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
#include "base/log.h"
#include "daemon/api/api.h"
#include "daemon/config/config.h"
#include "daemon/engine/bridge.h"
#include "daemon/supervisor/loading.h"
#include "daemon/supervisor/supervisor.h"
#include "model/chat_template.h"
#include "model/gguf.h"
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
    r.stages.push_back(std::move(one));
  }
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvasird — serves one model as a ring of stage processes"};
  std::string config_path, segment, log_level;
  bool check = false;
  int stage = -1;
  app.add_option("--config", config_path, "configuration file (TOML)");
  app.add_flag("--check", check, "validate the configuration and the model, then exit");
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error or off (default: [log] level, else info)")
      ->check([](const std::string& v) {
        return kvasir::log::parse_level(v) ? std::string() : "not a log level: " + v;
      });
  app.add_option("--stage", stage, "(internal) run stage N")->group("");
  app.add_option("--segment", segment, "(internal) the instance's shared segment")->group("");
  CLI11_PARSE(app, argc, argv);

  using namespace kvasir;
  const std::optional<log::Level> level = log::parse_level(log_level);
  if (stage >= 0) {
    log::init({fmt::format("kvasird stage {}", stage), level.value_or(log::Level::kInfo)});
    return stage_main(stage, segment);
  }
  log::init({"kvasird", level.value_or(log::Level::kInfo)});
  if (config_path.empty()) {
    KV_LOG_ERROR("main", "--config FILE is required");
    return 2;
  }
  ApiThread api;
  try {
    Config cfg = load_config(config_path);
    if (!level) log::set_level(*log::parse_level(cfg.log.level));
    if (!std::filesystem::exists(cfg.model.path)) {
      KV_LOG_ERROR("main",
                   "no model at {}: get the default model with "
                   "`sudo /usr/share/kvasir/fetch-model` (Debian package) or `scripts/fetch-model` "
                   "(source tree), or set model.path in {}",
                   cfg.model.path, config_path);
      return 1;
    }
    ModelConfig mc = check_config(cfg);
    if (check) {
      std::printf("%s: valid (%zu stages, %d layers, max_inflight %d)\n", config_path.c_str(),
                  cfg.plan.stages.size(), mc.n_layers, cfg.plan.inflight());
      return 0;
    }
    // Before any thread starts, so every thread inherits the dispositions.
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);

    auto model = ModelFile::open(cfg.model.path);
    std::unique_ptr<Tokenizer> tok;
    if (model->gguf()) tok = Tokenizer::from_gguf(*model->gguf());
    std::unique_ptr<ChatTemplate> chat;
    if (model->gguf()) {
      try {
        chat = std::make_unique<ChatTemplate>(ChatTemplate::from_gguf(*model->gguf()));
      } catch (const Error&) {  // no template: chat requests get 400
      }
    }
    SupervisorOptions sup_opt;
    static_cast<RecoveryCfg&>(sup_opt.recovery) = cfg.recovery;  // [recovery] of the config
    Supervisor sup(cfg, mc, sup_opt);
    LoadingMonitor loading(cfg, sup.segment_name());
    DeferredEngine deferred(planned_ring(cfg));  // 503 "loading" until the bridge is attached

    ApiContext ctx;
    if (tok) ctx.codec = make_text_codec(*tok, chat.get());
    ctx.model_name = mc.name;
    ctx.max_model_len = mc.context_length;
    ctx.stop = &g_stop;
    ctx.abort = &g_abort;
    ctx.loading = [&] { return loading.snapshot(); };
    api.start(cfg, deferred, ctx);
    // Whatever happens next, the API thread (which uses everything above)
    // ends before those objects do.
    struct JoinApi {
      ApiThread& a;
      ~JoinApi() {
        g_stop.store(true);
        g_abort.store(true);
        a.join();
      }
    } join_api{api};
    if (!api.wait_listening()) {
      api.join();
      KV_LOG_ERROR("main", "{}", api.error);
      return 1;
    }

    // Progress in the log while the stages load (about once a second).
    std::atomic<bool> loaded{false};
    std::thread progress([&] {
      std::string last;
      for (int tick = 0; !loaded.load(); ++tick) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (tick % 10 != 9 || loaded.load()) continue;
        std::string line = loading.log_line();
        if (line != last) KV_LOG_INFO("main", "loading: {}", line);
        last = line;
      }
    });
    // A stop signal while loading: the stages see the segment's shutdown flag
    // (they leave their preload early) and start() fails; that is a stop.
    std::thread stop_while_loading([&] {
      while (!loaded.load()) {
        if (g_stop.load() && loading.request_shutdown()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    std::string start_error;
    try {
      sup.start();
    } catch (const Error& e) {
      start_error = e.message();
    }
    std::string done_line = loading.log_line();
    loaded.store(true);
    progress.join();
    stop_while_loading.join();
    if (!start_error.empty()) {
      g_stop.store(true);
      api.join();
      if (g_signals.load() > 0) {
        KV_LOG_INFO("main", "stopped while loading");
        return 0;
      }
      KV_LOG_ERROR("main", "{}", start_error);
      return 1;
    }
    loading.finish();
    KV_LOG_INFO("main", "loaded: {}", done_line);
    KV_LOG_INFO("main", "{} stages ready, {} KV blocks of {} tokens, segment {}",
                cfg.plan.stages.size(), sup.kv_blocks(), cfg.kv.block_size, sup.segment_name());

    BridgeConfig bc;
    bc.limits = SchedLimits{cfg.plan.max_rows, cfg.plan.max_tokens, cfg.scheduler.chunk_size,
                            cfg.scheduler.max_num_seqs};
    // The config validated the name already (daemon/config.cpp).
    bc.limits.policy = parse_policy(cfg.scheduler.policy).value_or(Policy::kChunked);
    KV_LOG_INFO("main", "scheduler policy {}", policy_name(bc.limits.policy));
    bc.max_queue = cfg.scheduler.max_queue;
    bc.n_blocks = sup.kv_blocks();
    bc.block_size = cfg.kv.block_size;
    bc.vocab = mc.vocab;
    bc.context_length = mc.context_length;
    if (tok)
      for (int32_t id = 0; id < tok->vocab_size(); ++id)
        if (tok->is_eog(id)) bc.eos_ids.push_back(id);
    // A lost stage is restarted and its requests recomputed
    // (docs/recovery.md); past the restart limit the engine fails for good:
    // /health says unhealthy and new work is refused, the daemon stays up.
    Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
    deferred.attach(&engine);

    api.join();  // returns after the graceful stop (or a lost stage)
    deferred.attach(nullptr);
    engine.shutdown();
    sup.stop();  // stages end; the segment is removed
    if (!engine.failure().empty()) {
      KV_LOG_ERROR("main", "{}", engine.failure());
      return 1;
    }
    if (!api.error.empty()) {
      KV_LOG_ERROR("main", "{}", api.error);
      return 1;
    }
    KV_LOG_INFO("main", "stopped");
    return api.rc;
  } catch (const Error& e) {
    KV_LOG_ERROR("main", "{}", e.message());
    return 1;
  }
}
