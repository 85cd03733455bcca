// cli/main.cpp — `kvasir`, a thin client of the daemon's HTTP API (docs/cli.md).
//
//   kvasir status [--wait SECONDS]
//   kvasir generate [--max-tokens N] [--temperature T] [--top-p P] [--seed S]
//                   [--stop STR]... [--chat] [--json] PROMPT|-
//   kvasir chat [--max-tokens N] [--temperature T] [--system TEXT]
//   kvasir tokenize [--json] TEXT|-      kvasir detokenize IDS...
//   kvasir top [--once [--json]]
//   kvasir diagnose [--interval SECONDS] [--json]
//   kvasir bench [--requests N] [--concurrency C | --rate R] [--max-tokens N]
//                [--shared-prefix-len L [--prefix-groups G]] [--conversations C --turns T] [--n N]
//                [--prompt-len L1,L2,...] [--trace FILE] [--seed S] [--json]
//                [--ttft-target MS] [--itl-target MS] [--progress auto|always|never]
//                [--compare-policies --config FILE [--kvasird PATH] [--policies P,...]]
// Every command takes --socket PATH (default $KVASIR_SOCKET, then
// /run/kvasir/kvasir.sock) or --url http://HOST:PORT ($KVASIR_API_KEY for TCP).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "base/sse.h"
#include "cli/bench.h"
#include "cli/diagnose.h"
#include "cli/http_client.h"
#include "cli/stage_procs.h"
#include "cli/top.h"

using nlohmann::json;
using namespace kvasir::cli;

namespace {

struct Common {
  std::string socket, url;
};

void add_common(CLI::App* c, Common& o) {
  c->add_option("--socket", o.socket,
                "daemon socket (default: $KVASIR_SOCKET, /run/kvasir/kvasir.sock)");
  c->add_option("--url", o.url, "talk to http://HOST:PORT instead of the Unix socket");
}

struct Failure {
  std::string message;
};

json get_json(const Endpoint& ep, const std::string& path) {
  HttpResult r = http_call(ep, "GET", path);
  if (r.status != 200) throw Failure{path + ": " + error_message(r.body)};
  return json::parse(r.body);
}

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// ---- status ----
// /health's "loading" object as one line: phase, then per stage its state,
// MiB paged in of the slice, layers done.
std::string loading_text(const json& health) {
  auto it = health.find("loading");
  if (it == health.end() || !it->is_object()) return "";
  const json& l = *it;
  std::string out = l.value("phase", std::string("loading"));
  if (auto st = l.find("stages"); st != l.end() && st->is_array())
    for (const auto& s : *st) {
      if (!s.is_object()) continue;
      char buf[160];
      // An expert group's member: "stage P.K".
      const int member = s.value("member", 0);
      const std::string name =
          member > 0 ? std::to_string(s.value("position", 0)) + "." + std::to_string(member)
                     : std::to_string(s.value("index", 0));
      if (auto h = s.find("host"); h != s.end() && h->is_string()) {  // a worker's stage
        std::snprintf(buf, sizeof buf, "; stage %s (%s): %s on %.64s", name.c_str(),
                      s.value("layers", std::string("?")).c_str(),
                      s.value("status", std::string("?")).c_str(), h->get<std::string>().c_str());
        out += buf;
        continue;
      }
      std::snprintf(
          buf, sizeof buf, "; stage %s (%s): %s %.1f/%.1f MiB, %d/%d layers", name.c_str(),
          s.value("layers", std::string("?")).c_str(), s.value("status", std::string("?")).c_str(),
          s.value("bytes_loaded", 0.0) / 1048576.0, s.value("bytes_total", 0.0) / 1048576.0,
          s.value("layers_loaded", 0), s.value("layers_total", 0));
      out += buf;
    }
  return out;
}

// A stage's "simd" (what runs its kernels) for one line of the terminal:
// printable ASCII only, at most 512 bytes; "not reported yet" when empty.
std::string simd_text(const json& stage) {
  auto it = stage.find("simd");
  std::string t = it != stage.end() && it->is_string() ? it->get<std::string>() : std::string();
  if (t.size() > 512) t.resize(512);
  for (char& c : t)
    if (c < 0x20 || c > 0x7e) c = '?';
  return t.empty() ? "not reported yet" : t;
}

int cmd_status(const Endpoint& ep, double wait_s, bool as_json) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  HttpResult h;
  std::string last_error, last_progress;
  for (;;) {
    try {
      h = http_call(ep, "GET", "/health");
      if (h.status == 200) break;
      // 503 while loading: {"status":"loading","loading":{...progress...}};
      // 503 "stopping" while a stop drains.
      json j = json::parse(h.body, nullptr, false);
      if (!j.is_discarded() && j.value("status", std::string()) == "unhealthy") {
        std::cerr << "kvasir: kvasird at " << ep.describe()
                  << " is unhealthy: " << j.value("error", std::string("?")) << "\n";
        return 3;  // the restart limit was hit: waiting will not help
      }
      std::string progress = !j.is_discarded() ? loading_text(j) : std::string();
      std::string state =
          !j.is_discarded() && j.value("status", "") == "stopping" ? "is stopping" : "is loading";
      last_error = "kvasird at " + ep.describe() + " " + state +
                   (progress.empty() ? std::string() : ": " + progress);
      if (!progress.empty() && progress != last_progress && wait_s > 0)
        std::cerr << "kvasir: loading: " << progress << "\n";
      last_progress = progress;
    } catch (const std::runtime_error& e) {
      last_error = e.what();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::cerr << "kvasir: " << last_error << "\n";
      return h.status == 503 ? 3 : 2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  json stats = get_json(ep, "/kvasir/v1/stats");
  if (as_json) {
    std::cout << stats.dump(2) << "\n";
    return 0;
  }
  json hj = json::parse(h.body, nullptr, false);
  const bool degraded = !hj.is_discarded() && hj.value("status", std::string()) == "degraded";
  std::cout << "kvasird at " << ep.describe()
            << (degraded ? ": degraded (recovering a lost stage; requests wait)\n" : ": ready\n");
  std::cout << "model: " << stats.value("model", "?") << "\n";
  if (stats.contains("plan")) std::cout << "plan: " << stats["plan"].dump() << "\n";
  if (stats.contains("stages") && stats["stages"].is_array()) {
    size_t i = 0;
    for (const auto& s : stats["stages"]) {
      if (!s.is_object()) continue;
      // An expert group's member (docs/expert-groups.md): "stage P.K".
      const int member = s.value("member", 0);
      const std::string name =
          member > 0 ? std::to_string(s.value("position", 0)) + "." + std::to_string(member)
                     : std::to_string(i);
      ++i;
      std::cout << "  stage " << name << (member > 0 ? " (group member)" : "") << ": layers "
                << s.value("layers", std::string("?")) << " on "
                << s.value("device", std::string("?")) << "; simd: " << simd_text(s) << "\n";
    }
  }
  if (stats.contains("engine")) {
    const json& e = stats["engine"];
    std::cout << "requests: " << e.value("running", 0) << " running, " << e.value("waiting", 0)
              << " waiting; KV blocks: " << e.value("blocks_free", 0) << " free of "
              << e.value("blocks_total", 0) << "\n";
  }
  return 0;
}

// ---- generate / chat ----
struct GenOpts {
  int max_tokens = 256;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> seed;
  std::vector<std::string> stop;
  bool chat = false, json_out = false;
};

json request_body(const GenOpts& o) {
  json b = {{"max_tokens", o.max_tokens}};
  if (o.temperature) b["temperature"] = *o.temperature;
  if (o.top_p) b["top_p"] = *o.top_p;
  if (o.seed) b["seed"] = *o.seed;
  if (!o.stop.empty()) b["stop"] = o.stop;
  return b;
}

// Streams one request; prints text as it arrives. Returns the whole text.
std::string stream_text(const Endpoint& ep, const std::string& path, json body, bool chat) {
  body["stream"] = true;
  kvasir::SseParser sse;
  std::string text, error;
  HttpResult r = http_stream(ep, "POST", path, body.dump(), [&](std::string_view bytes) {
    for (const auto& ev : sse.feed(bytes)) {
      const std::string& d = ev.data;
      if (d == "[DONE]") continue;
      json j = json::parse(d, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        error = j["error"].value("message", std::string("error"));
        continue;
      }
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const json& c = j["choices"][0];
      std::string piece;
      if (chat && c.contains("delta") && c["delta"].contains("content") &&
          c["delta"]["content"].is_string())
        piece = c["delta"]["content"].get<std::string>();
      else if (!chat && c.contains("text") && c["text"].is_string())
        piece = c["text"].get<std::string>();
      if (!piece.empty()) {
        std::cout << piece << std::flush;
        text += piece;
      }
    }
  });
  if (r.status != 200) throw Failure{error_message(r.body)};
  if (!error.empty()) throw Failure{error};
  return text;
}

int cmd_generate(const Endpoint& ep, const GenOpts& o, std::string prompt) {
  if (prompt == "-") prompt = read_stdin();
  json body = request_body(o);
  std::string path = o.chat ? "/v1/chat/completions" : "/v1/completions";
  if (o.chat)
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
  else
    body["prompt"] = prompt;
  if (o.json_out) {
    HttpResult r = http_call(ep, "POST", path, body.dump());
    if (r.status != 200) throw Failure{error_message(r.body)};
    std::cout << json::parse(r.body).dump(2) << "\n";
    return 0;
  }
  std::string text = stream_text(ep, path, body, o.chat);
  if (isatty(STDOUT_FILENO) && (text.empty() || text.back() != '\n')) std::cout << "\n";
  return 0;
}

int cmd_chat(const Endpoint& ep, const GenOpts& o, const std::string& system) {
  json messages = json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  bool tty = isatty(STDIN_FILENO);
  std::string line;
  for (;;) {
    if (tty) std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    json body = request_body(o);
    body["messages"] = messages;
    std::string reply = stream_text(ep, "/v1/chat/completions", body, true);
    std::cout << "\n";
    messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
  if (tty) std::cout << "\n";
  return 0;
}

// ---- tokenize / detokenize / top ----
int cmd_tokenize(const Endpoint& ep, std::string text, bool as_json) {
  if (text == "-") text = read_stdin();
  HttpResult r = http_call(ep, "POST", "/tokenize", json{{"prompt", text}}.dump());
  if (r.status != 200) throw Failure{error_message(r.body)};
  json j = json::parse(r.body);
  if (as_json) {
    std::cout << j.dump() << "\n";
  } else {
    const char* sep = "";
    for (const auto& id : j["tokens"]) std::cout << std::exchange(sep, " ") << id.get<int64_t>();
    std::cout << "\n";
  }
  return 0;
}

int cmd_detokenize(const Endpoint& ep, const std::vector<int64_t>& ids) {
  HttpResult r = http_call(ep, "POST", "/detokenize", json{{"tokens", ids}}.dump());
  if (r.status != 200) throw Failure{error_message(r.body)};
  std::cout << json::parse(r.body)["prompt"].get<std::string>() << "\n";
  return 0;
}

// The stats, and on the daemon's host each stage's run-queue wait as the
// kernel counts it (cli/stage_procs.h): the stages are looked up on every
// snapshot, since a restarted stage is a new process.
json stats_with_sched(const Endpoint& ep) {
  json s = get_json(ep, "/kvasir/v1/stats");
  if (!ep.tcp) add_sched_figures(s, stage_pids(socket_peer_pid(ep.socket)));
  return s;
}

int cmd_top(const Endpoint& ep, bool once, bool as_json) {
  if (!once) return run_top([&] { return stats_with_sched(ep); });
  json s = stats_with_sched(ep);
  if (as_json) {
    s["diagnosis"] = diagnose(make_view(s, nullptr, 1.0));
    std::cout << s.dump(2) << "\n";
  } else {
    std::cout << render(make_view(s, nullptr, 1.0));
  }
  return 0;
}

// Two snapshots `interval_s` apart: the diagnosis of what the daemon did
// in between (docs/cli.md). Exit 0 whatever it finds.
int cmd_diagnose(const Endpoint& ep, double interval_s, bool as_json) {
  json a = stats_with_sched(ep);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  json b = stats_with_sched(ep);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const TopView v = make_view(b, &a, std::max(dt, 1e-3));
  const Diagnosis d = diagnose_view(v);
  if (as_json) {
    json out = diagnosis_json(d);
    out["interval_s"] = dt;
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << render_diagnosis(d);
  }
  return 0;
}

// ---- bench ----
struct BenchCli {
  BenchOptions o;
  CompareOptions c;
  bool compare = false;
};

// kvasird beside this binary (installed: both in bin/), or in the build tree.
std::string default_kvasird() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "kvasird";
  for (auto p : {self.parent_path() / "kvasird", self.parent_path() / ".." / "daemon" / "kvasird"})
    if (std::filesystem::exists(p, ec)) return p.lexically_normal().string();
  return "kvasird";
}

int cmd_bench(const Endpoint& ep, BenchCli& b) {
  std::vector<BenchRequest> trace;
  if (!b.o.trace.empty()) {
    std::ifstream in(b.o.trace);
    if (!in) throw Failure{"cannot read the trace " + b.o.trace};
    try {
      trace = parse_trace(in, b.o.max_tokens);
    } catch (const std::runtime_error& e) {
      throw Failure{b.o.trace + ": " + e.what()};
    }
  }
  std::vector<BenchRequest> w = make_workload(b.o, b.o.trace.empty() ? nullptr : &trace);
  if (b.compare) {
    if (b.c.kvasird.empty()) b.c.kvasird = default_kvasird();
    return compare_policies(b.c, b.o, w);
  }
  nlohmann::json s = run_bench(ep, b.o, w);
  std::cout << (b.o.json ? s.dump(2) + "\n" : render_summary(s));
  return s.value("failed", 0) > 0 ? 1 : 0;
}

// ---- the command line ----

// Every subcommand's options, and which subcommand was given.
struct Commands {
  Common common;
  CLI::App *status = nullptr, *gen = nullptr, *chat = nullptr, *tok = nullptr, *detok = nullptr,
           *top = nullptr, *diag = nullptr, *bench = nullptr;
  double wait_s = 0;
  bool status_json = false;
  GenOpts g;
  std::string prompt, system, text;
  bool tok_json = false;
  std::vector<int64_t> ids;
  bool top_once = false, top_json = false;
  double diag_interval_s = 3;
  bool diag_json = false;
  BenchCli bc;
  CLI::Option* concurrency = nullptr;
};

void add_status(CLI::App& app, Commands& c) {
  c.status = app.add_subcommand("status", "is the daemon up, which model, which plan");
  c.status->add_option("--wait", c.wait_s, "block up to SECONDS until the daemon is ready");
  c.status->add_flag("--json", c.status_json, "print the stats JSON");
  add_common(c.status, c.common);
}

void add_generate_and_chat(CLI::App& app, Commands& c) {
  GenOpts& g = c.g;
  auto* gen = c.gen =
      app.add_subcommand("generate", "stream a continuation (or a chat reply) to stdout");
  gen->add_option("--max-tokens", g.max_tokens, "tokens to generate at most")
      ->check(CLI::PositiveNumber);
  gen->add_option("--temperature", g.temperature, "0 = greedy");
  gen->add_option("--top-p", g.top_p, "nucleus sampling mass (0, 1]");
  gen->add_option("--seed", g.seed, "seed for reproducible sampling");
  gen->add_option("--stop", g.stop, "stop string (repeatable)");
  gen->add_flag("--chat", g.chat, "apply the model's chat template");
  gen->add_flag("--json", g.json_out, "print the whole JSON response instead of streaming text");
  gen->add_option("prompt", c.prompt, "the prompt, or - to read stdin")->required();
  add_common(gen, c.common);

  auto* chat = c.chat = app.add_subcommand("chat", "interactive conversation (Ctrl-D ends)");
  chat->add_option("--max-tokens", g.max_tokens, "tokens per reply at most");
  chat->add_option("--temperature", g.temperature, "0 = greedy");
  chat->add_option("--seed", g.seed, "seed");
  chat->add_option("--system", c.system, "system prompt");
  add_common(chat, c.common);
}

void add_tokenize_and_top(CLI::App& app, Commands& c) {
  c.tok = app.add_subcommand("tokenize", "text → token ids");
  c.tok->add_flag("--json", c.tok_json, "print the JSON response");
  c.tok->add_option("text", c.text, "the text, or - to read stdin")->required();
  add_common(c.tok, c.common);

  c.detok = app.add_subcommand("detokenize", "token ids → text");
  c.detok->add_option("ids", c.ids, "token ids")->required();
  add_common(c.detok, c.common);

  c.top = app.add_subcommand("top",
                             "live view of stages, ring, KV, latency and the bottleneck (q quits)");
  c.top->add_flag("--once", c.top_once, "print one snapshot and exit");
  c.top->add_flag("--json", c.top_json, "as JSON");
  add_common(c.top, c.common);

  c.diag = app.add_subcommand("diagnose",
                              "which default is the bottleneck now (KV capacity, batching, prefill "
                              "interference), the figures, the setting to change");
  c.diag->add_option("--interval", c.diag_interval_s, "seconds between the two stats samples")
      ->check(CLI::Range(0.1, 600.0));
  c.diag->add_flag("--json", c.diag_json, "as JSON");
  add_common(c.diag, c.common);
}

// The prefix caching workloads (docs/cli.md).
void add_sharing(CLI::App* bench, BenchOptions& o) {
  bench
      ->add_option("--shared-prefix-len", o.shared_prefix_len,
                   "each prompt starts with one of --prefix-groups shared prompts of this many "
                   "tokens; --prompt-len is then each one's own part")
      ->check(CLI::Range(1, kMaxBenchTokens));
  bench->add_option("--prefix-groups", o.prefix_groups, "distinct shared prefixes (default 1)")
      ->check(CLI::Range(1, kMaxBenchRequests));
  bench
      ->add_option("--conversations", o.conversations,
                   "multi-turn chats (with --turns): each turn resends the conversation")
      ->check(CLI::Range(1, kMaxBenchWorkers));
  bench->add_option("--turns", o.turns, "turns per chat; --prompt-len is the user's part")
      ->check(CLI::Range(1, 10000));
  bench->add_option("--n", o.n, "choices per request (the API's n)")->check(CLI::Range(1, 16));
}

void add_bench(CLI::App& app, Commands& c) {
  BenchOptions& o = c.bc.o;
  auto* bench = c.bench =
      app.add_subcommand("bench", "load generator: throughput, TTFT/ITL, KV waste");
  bench->add_option("--requests", o.requests, "requests to send (default 100, or the trace's)")
      ->check(CLI::Range(1, kMaxBenchRequests));
  c.concurrency =
      bench
          ->add_option("--concurrency", o.concurrency,
                       "requests outstanding at most (default 1 without --rate/--trace)")
          ->check(CLI::Range(1, kMaxBenchWorkers));
  bench->add_option("--rate", o.rate, "Poisson arrivals per second (open loop)")
      ->check(CLI::Range(1e-6, 1e6));
  bench->add_option("--max-tokens", o.max_tokens, "tokens generated per request, exactly")
      ->check(CLI::Range(1, kMaxBenchTokens));
  bench->add_option("--prompt-len", o.prompt_lens, "synthetic prompt lengths, cycled")
      ->delimiter(',')
      ->check(CLI::Range(1, kMaxBenchTokens));
  bench->add_option("--trace", o.trace,
                    "JSON lines: {\"t\":S, \"prompt_len\":N|\"prompt\":T, "
                    "\"max_tokens\":N, \"n\":N, \"prefix_group\":G, \"prefix_len\":L, "
                    "\"conversation\":C}");
  add_sharing(bench, o);
  bench->add_option("--seed", o.seed, "seed of arrivals and prompts");
  bench->add_option("--ttft-target", o.ttft_target_ms, "goodput: TTFT target (ms)")
      ->check(CLI::PositiveNumber);
  bench->add_option("--itl-target", o.itl_target_ms, "goodput: mean ITL target (ms)")
      ->check(CLI::PositiveNumber);
  bench->add_flag("--json", o.json, "print one JSON object");
  bench->add_option("--progress", o.progress, "progress bar on stderr")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  bench->add_flag("--compare-policies", c.bc.compare,
                  "start kvasird once per policy (from --config) and compare them");
  bench->add_option("--config", c.bc.c.config, "with --compare-policies: the config to start from");
  bench->add_option("--kvasird", c.bc.c.kvasird, "with --compare-policies: the daemon binary");
  bench
      ->add_option("--policies", c.bc.c.policies,
                   "with --compare-policies: which (default all); POLICY:section.key=value[:...] "
                   "also changes settings for that run")
      ->delimiter(',')
      ->check([](const std::string& v) {
        const std::string p = v.substr(0, v.find(':'));
        for (const char* n : {"naive", "static", "continuous", "continuous+chunked"})
          if (p == n) return std::string();
        return "not a policy: " + p;
      });
  add_common(bench, c.common);
}

// Runs the subcommand given; its exit status (1: the daemon said no, 2: no
// daemon to talk to or another failure).
int run_command(Commands& c) {
  try {
    Endpoint ep = resolve_endpoint(c.common.socket, c.common.url);
    if (*c.status) return cmd_status(ep, c.wait_s, c.status_json);
    if (*c.gen) return cmd_generate(ep, c.g, c.prompt);
    if (*c.chat) return cmd_chat(ep, c.g, c.system);
    if (*c.tok) return cmd_tokenize(ep, c.text, c.tok_json);
    if (*c.detok) return cmd_detokenize(ep, c.ids);
    if (*c.top) return cmd_top(ep, c.top_once, c.top_json);
    if (*c.diag) return cmd_diagnose(ep, c.diag_interval_s, c.diag_json);
    if (*c.bench) return cmd_bench(ep, c.bc);
  } catch (const Failure& f) {
    std::cout << std::flush;
    std::cerr << "kvasir: error: " << f.message << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cout << std::flush;
    std::cerr << "kvasir: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvasir — client of the kvasird LLM server"};
  app.require_subcommand(1);
  Commands c;
  add_status(app, c);
  add_generate_and_chat(app, c);
  add_tokenize_and_top(app, c);
  add_bench(app, c);
  CLI11_PARSE(app, argc, argv);
  // Closed loop by default: one request at a time unless arrivals are timed.
  if (c.concurrency->count() == 0 && c.bc.o.rate <= 0 && c.bc.o.trace.empty())
    c.bc.o.concurrency = 1;
  return run_command(c);
}
