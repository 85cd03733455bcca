// cli/bench_compare.cpp — `kvasir bench --compare-policies`.
//
// The policy is fixed when kvasird starts (scheduler.policy), and a running
// daemon cannot be switched; so the CLI starts one daemon per policy itself,
// from the user's config with two changes: scheduler.policy, and a private
// socket in a temporary folder (server.http removed), so nothing collides
// with a daemon already serving. One daemon at a time: each gets the whole
// machine, as a production daemon would.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "cli/bench.h"

namespace kvasir::cli {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// "section.key=value": one setting of a run's config (a run is "POLICY" or
// "POLICY:section.key=value[:section.key=value...]"). The value is an
// integer, a decimal or else a string.
void apply_override(toml::table& t, const std::string& spec) {
  const size_t dot = spec.find('.'), eq = spec.find('=');
  if (dot == std::string::npos || eq == std::string::npos || dot > eq || eq + 1 >= spec.size())
    throw std::runtime_error("'" + spec + "' is not section.key=value");
  const std::string section = spec.substr(0, dot), key = spec.substr(dot + 1, eq - dot - 1),
                    value = spec.substr(eq + 1);
  if (!t[section].is_table()) t.insert_or_assign(section, toml::table{});
  toml::table& sec = *t[section].as_table();
  char* end = nullptr;
  const long long i = std::strtoll(value.c_str(), &end, 10);
  if (end && *end == 0) {
    sec.insert_or_assign(key, int64_t(i));
    return;
  }
  const double d = std::strtod(value.c_str(), &end);
  if (end && *end == 0)
    sec.insert_or_assign(key, d);
  else
    sec.insert_or_assign(key, value);
}

// The user's config with the policy and socket replaced (and a run's own
// settings). Relative paths are resolved against the original file's
// folder, as kvasird would have.
std::string derived_config(const std::string& path, const std::string& run,
                           const std::string& socket) {
  std::string policy = run;
  std::vector<std::string> overrides;
  for (size_t colon = policy.find(':'); colon != std::string::npos; colon = policy.find(':')) {
    const size_t next = policy.find(':', colon + 1);
    overrides.push_back(
        policy.substr(colon + 1, next == std::string::npos ? next : next - colon - 1));
    policy.erase(colon, next == std::string::npos ? std::string::npos : next - colon);
  }
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(path + ": " + std::string(e.description()));
  }
  fs::path base = fs::absolute(fs::path(path)).parent_path();
  if (auto* model = t["model"].as_table()) {
    if (auto p = (*model)["path"].value<std::string>(); p && fs::path(*p).is_relative())
      model->insert_or_assign("path", (base / *p).lexically_normal().string());
  }
  if (!t["scheduler"].is_table()) t.insert_or_assign("scheduler", toml::table{});
  t["scheduler"].as_table()->insert_or_assign("policy", policy);
  // `static` refuses prefix caching (a padded batcher computes every prompt).
  if (policy == "static")
    if (auto* kv = t["kv"].as_table()) kv->insert_or_assign("prefix_caching", false);
  if (!t["server"].is_table()) t.insert_or_assign("server", toml::table{});
  toml::table& server = *t["server"].as_table();
  server.insert_or_assign("socket", socket);
  server.erase("http");
  for (const std::string& o : overrides) apply_override(t, o);
  std::ostringstream os;
  os << t << "\n";
  return os.str();
}

class Daemon {
 public:
  Daemon(const std::string& kvasird, const std::string& config, const std::string& log) {
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // If the CLI dies (Ctrl-C), the daemon must not outlive it.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
      execl(kvasird.c_str(), kvasird.c_str(), "--config", config.c_str(), (char*)nullptr);
      std::perror("exec kvasird");
      _exit(127);
    }
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon() { stop(); }

  bool exited() {
    if (pid_ <= 0) return true;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    return false;
  }

  // SIGTERM, then SIGKILL if it has not stopped after 60 s (it drains first).
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 600 && !exited(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
};

std::string tail_of(const std::string& path) {
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
}

void wait_ready(Daemon& d, const Endpoint& ep, double timeout_s, const std::string& log) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (d.exited())
      throw std::runtime_error("kvasird exited during start; its log:\n" + tail_of(log));
    try {
      if (http_call(ep, "GET", "/health").status == 200) return;
    } catch (const std::runtime_error&) {
      // not listening yet
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("kvasird was not ready in time; its log:\n" + tail_of(log));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// The daemon's stages as it ran them (`layers = "auto"` is resolved at load)
// and each one's busy seconds since it started: one fresh daemon per run, so
// the run's own work plus the warm-up. Empty when the daemon does not say.
json daemon_stages(const Endpoint& ep) {
  json out = json::array();
  try {
    HttpResult r = http_call(ep, "GET", "/kvasir/v1/stats");
    json j = json::parse(r.body, nullptr, false);
    if (r.status != 200 || !j.is_object() || !j.contains("stages") || !j["stages"].is_array())
      return out;
    for (const auto& st : j["stages"])
      out.push_back(
          {{"layers", st.value("layers", std::string())}, {"busy_s", st.value("busy_s", 0.0)}});
  } catch (const std::exception&) {
    return json::array();  // a daemon that went away, or a field of another type
  }
  return out;
}

}  // namespace

int compare_policies(const CompareOptions& c, const BenchOptions& o,
                     const std::vector<BenchRequest>& workload) {
  if (c.config.empty()) throw std::runtime_error("--compare-policies needs --config FILE");
  if (access(c.kvasird.c_str(), X_OK) != 0)
    throw std::runtime_error("cannot run kvasird at '" + c.kvasird + "' (give --kvasird PATH)");
  // The daemons' configs and logs go under $TMPDIR (default /tmp).
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      (tmp && *tmp ? std::string(tmp) : std::string("/tmp")) + "/kvasir-bench.XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed in " + tmpl);
  fs::path dir(tmpl);
  std::vector<std::pair<std::string, json>> runs;
  int rc = 0;
  int n_run = 0;
  for (const auto& policy : c.policies) {
    std::string safe = std::to_string(n_run++);
    for (char ch : policy) safe += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
    safe.resize(std::min<size_t>(safe.size(), 60));
    fs::path cfg = dir / (safe + ".toml"), log = dir / (safe + ".log");
    Endpoint ep;
    ep.socket = (dir / (safe + ".sock")).string();
    {
      std::ofstream out(cfg);
      out << derived_config(c.config, policy, ep.socket);
    }
    if (!o.json) std::cerr << "kvasir bench: policy " << policy << ": starting kvasird\n";
    try {
      Daemon d(c.kvasird, cfg.string(), log.string());
      wait_ready(d, ep, c.ready_timeout_s, log.string());
      json s = run_bench(ep, o, workload);
      s["policy"] = policy;
      s["stages"] = daemon_stages(ep);
      runs.emplace_back(policy, std::move(s));
    } catch (const std::exception& e) {
      std::cerr << "kvasir bench: policy " << policy << ": " << e.what() << "\n";
      runs.emplace_back(policy, json{{"policy", policy}, {"error", e.what()}});
      rc = 1;
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (o.json) {
    json all = json::object();
    for (const auto& [name, s] : runs) all[name] = s;
    std::cout << json{{"policies", all}}.dump(2) << "\n";
  } else {
    std::cout << render_compare(runs);
  }
  return rc;
}

}  // namespace kvasir::cli
