// kvasird — the daemon. Kept short on purpose: parse arguments, load the
// config, start the stages (supervisor) and the bridge (engine), hand over
// to the HTTP API (daemon/api.h), and stop everything in order.
//
//   kvasird --config FILE            run in the foreground
//   kvasird --check --config FILE    validate (model included), exit 0 / 1
//   kvasird --stage N --segment NAME (internal) a stage process
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "base/check.h"
#include "daemon/config.h"
#include "daemon/engine_impl.h"
#include "daemon/supervisor.h"
#include "model/gguf.h"
#include "model/model_file.h"
#include "model/tokenizer.h"
#include "stages/agent.h"
#ifdef KVASIR_HAVE_API
#include "daemon/api.h"
#include "model/chat_template.h"
#endif

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvasird — serves one model as a ring of stage processes"};
  std::string config_path, segment;
  bool check = false;
  int stage = -1;
  app.add_option("--config", config_path, "configuration file (TOML)");
  app.add_flag("--check", check, "validate the configuration and the model, then exit");
  app.add_option("--stage", stage, "(internal) run stage N")->group("");
  app.add_option("--segment", segment, "(internal) the instance's shared segment")->group("");
  CLI11_PARSE(app, argc, argv);

  if (stage >= 0) return kvasir::stage_main(stage, segment);
  if (config_path.empty()) {
    std::fprintf(stderr, "kvasird: --config FILE is required\n");
    return 2;
  }
  using namespace kvasir;
  try {
    Config cfg = load_config(config_path);
    if (!std::filesystem::exists(cfg.model.path)) {
      std::fprintf(stderr,
                   "kvasird: no model at %s: get the default model with "
                   "`sudo /usr/share/kvasir/fetch-model` (Debian package) or `scripts/fetch-model` "
                   "(source tree), or set model.path in %s\n",
                   cfg.model.path.c_str(), config_path.c_str());
      return 1;
    }
    ModelConfig mc = check_config(cfg);
    if (check) {
      std::printf("%s: valid (%zu stages, %d layers, max_inflight %d)\n", config_path.c_str(),
                  cfg.plan.stages.size(), mc.n_layers, cfg.plan.inflight());
      return 0;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);

    auto model = ModelFile::open(cfg.model.path);
    std::unique_ptr<Tokenizer> tok;
    if (model->gguf()) tok = Tokenizer::from_gguf(*model->gguf());
    Supervisor sup(cfg, mc);
    sup.start();
    std::fprintf(stderr, "kvasird: %zu stages ready, %d KV blocks of %d tokens, segment %s\n",
                 cfg.plan.stages.size(), sup.kv_blocks(), cfg.kv.block_size,
                 sup.segment_name().c_str());

    BridgeConfig bc;
    bc.limits = SchedLimits{cfg.plan.max_rows, cfg.plan.max_tokens, cfg.scheduler.chunk_size,
                            cfg.scheduler.max_num_seqs};
    // The config validated the name already (daemon/config.cpp).
    bc.limits.policy = parse_policy(cfg.scheduler.policy).value_or(Policy::kChunked);
    std::fprintf(stderr, "kvasird: scheduler policy %s\n", policy_name(bc.limits.policy));
    bc.max_queue = cfg.scheduler.max_queue;
    bc.n_blocks = sup.kv_blocks();
    bc.block_size = cfg.kv.block_size;
    bc.vocab = mc.vocab;
    bc.context_length = mc.context_length;
    if (tok)
      for (int32_t id = 0; id < tok->vocab_size(); ++id)
        if (tok->is_eog(id)) bc.eos_ids.push_back(id);
    std::string stage_error;
    BridgeEngine engine(sup.segment(), bc, [&]() -> std::optional<std::string> {
      if (auto ex = sup.poll()) {
        stage_error = ex->error;
        g_stop.store(true);  // a lost stage ends the daemon
        return ex->error;
      }
      return std::nullopt;
    });

    int rc = 0;
#ifdef KVASIR_HAVE_API
    std::unique_ptr<ChatTemplate> chat;
    if (model->gguf()) {
      try {
        chat = std::make_unique<ChatTemplate>(ChatTemplate::from_gguf(*model->gguf()));
      } catch (const Error&) {  // no template: chat requests get 400
      }
    }
    ApiContext ctx;
    if (tok) ctx.codec = make_text_codec(*tok, chat.get());
    ctx.model_name = mc.name;
    ctx.max_model_len = mc.context_length;
    ctx.stop = &g_stop;
    ctx.stage_stats = [&] {
      nlohmann::json st = nlohmann::json::array();
      auto snaps = engine.stage_stats();
      for (size_t i = 0; i < snaps.size(); ++i) {
        const auto& s = cfg.plan.stages[i];
        st.push_back({{"index", i}, {"layers", fmt::format("{}-{}", s.first, s.last)},
                      {"device", s.device}, {"busy_s", snaps[i].busy_ns / 1e9},
                      {"starved_s", snaps[i].starved_ns / 1e9},
                      {"blocked_s", snaps[i].blocked_ns / 1e9}, {"batches", snaps[i].batches},
                      {"tokens", snaps[i].tokens}});
      }
      return nlohmann::json{{"inflight", cfg.plan.inflight()}, {"stages", st}};
    };
    rc = run_api(cfg, engine, ctx);
#else
    while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
#endif
    engine.shutdown();
    sup.stop();
    if (!stage_error.empty()) {
      std::fprintf(stderr, "kvasird: %s\n", stage_error.c_str());
      return 1;
    }
    return rc;
  } catch (const Error& e) {
    std::fprintf(stderr, "kvasird: %s\n", e.message().c_str());
    return 1;
  }
}
