// kvasir-linkshaper: bridges network interfaces at layer 2 through a
// shaped link (delay, jitter, bandwidth cap, loss) — the wire between the
// "hosts" of scripts/netns-hosts, where the kernel has no netem.
// docs/netns-hosts.md describes the model and its limits.
//
// Exit codes: 0 stopped by a signal, 1 a socket failed while running,
// 2 bad options, 3 the interfaces could not be opened.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "shaper.h"

namespace ks = kvasir::linkshaper;

namespace {

// "IFNAME:delay=2,jitter=0.5,rate=1e8,drop=0.01,limit=500" over `base`.
std::string parse_egress(const std::string& spec, std::map<std::string, ks::LinkParams>& out,
                         const ks::LinkParams& base) {
  auto colon = spec.find(':');
  if (colon == std::string::npos || colon == 0) return "--egress wants IFNAME:key=value,...";
  std::string name = spec.substr(0, colon);
  ks::LinkParams p = out.count(name) ? out[name] : base;
  std::stringstream items(spec.substr(colon + 1));
  for (std::string kv; std::getline(items, kv, ',');) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) return "--egress: '" + kv + "' is not key=value";
    std::string key = kv.substr(0, eq);
    double v = 0;
    try {
      v = std::stod(kv.substr(eq + 1));
    } catch (...) {
      return "--egress: '" + kv + "' has no number";
    }
    if (key == "delay")
      p.delay_ms = v;
    else if (key == "jitter")
      p.jitter_ms = v;
    else if (key == "rate")
      p.rate_bps = v;
    else if (key == "drop")
      p.drop = v;
    else if (key == "limit")
      p.limit = static_cast<size_t>(v);
    else
      return "--egress: unknown key '" + key + "' (delay, jitter, rate, drop, limit)";
  }
  out[name] = p;
  return {};
}

std::string check(const std::string& where, const ks::LinkParams& p) {
  if (p.delay_ms < 0 || p.jitter_ms < 0 || p.rate_bps < 0)
    return where + ": delay, jitter and rate must be >= 0";
  if (p.drop < 0 || p.drop > 1) return where + ": drop must be in [0, 1]";
  if (p.limit < 1) return where + ": limit must be >= 1";
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvasir-linkshaper: a shaped layer-2 link between network interfaces"};
  std::vector<std::string> ifnames, egress;
  ks::LinkParams base;
  ks::ShaperConfig cfg;
  app.add_option("--port", ifnames, "an interface to bridge (two or more)")->required();
  app.add_option("--delay", base.delay_ms, "one-way delay in ms (every port)");
  app.add_option("--jitter", base.jitter_ms, "uniform jitter +/- ms, never reordering");
  app.add_option("--rate", base.rate_bps, "bandwidth cap in bits/s per direction (0: none)");
  app.add_option("--drop", base.drop, "loss probability per frame");
  app.add_option("--limit", base.limit, "frames held per direction; a full line tail-drops");
  app.add_option("--egress", egress,
                 "IFNAME:delay=MS,jitter=MS,rate=BPS,drop=P,limit=N for frames leaving IFNAME");
  app.add_option("--mtu", cfg.mtu, "the interfaces' MTU (sizes the frame slots)");
  app.add_option("--seed", cfg.seed, "seed of the loss and jitter RNGs");
  app.add_option("--stats", cfg.stats_path, "counters file (JSON), else stdout");
  app.add_option("--ready", cfg.ready_path, "file written with our pid once forwarding");
  app.add_option("--spin-us", cfg.spin_us, "busy-wait this long before a departure");
  CLI11_PARSE(app, argc, argv);

  std::map<std::string, ks::LinkParams> per_port;
  std::string err = check("options", base);
  for (const auto& e : egress)
    if (err.empty()) err = parse_egress(e, per_port, base);
  if (err.empty() && ifnames.size() < 2) err = "--port: two or more interfaces";
  for (const auto& [name, p] : per_port) {
    if (!err.empty()) break;
    if (std::find(ifnames.begin(), ifnames.end(), name) == ifnames.end())
      err = "--egress names " + name + ", which is not a --port";
    else
      err = check("--egress " + name, p);
  }
  if (!err.empty()) {
    std::fprintf(stderr, "kvasir-linkshaper: %s\n", err.c_str());
    return 2;
  }
  for (const auto& name : ifnames)
    cfg.ports.push_back({name, per_port.count(name) ? per_port[name] : base});
  ks::Shaper shaper(cfg);
  if (auto e = shaper.open(); !e.empty()) {
    std::fprintf(stderr, "kvasir-linkshaper: %s\n", e.c_str());
    return 3;
  }
  return shaper.run();
}
