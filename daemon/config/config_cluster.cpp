// daemon/config/config_cluster.cpp — the multi-host rules of a plan
// (config.h, validate_cluster; docs/multi-host.md). The stages that name a
// host form runs of consecutive stages, each on one worker (one session,
// one relay pair: the ring leaves the leader at the run's first stage and
// comes back after its last, or ends there); the head stays on the leader,
// each run names a host of its own, each expert group keeps all its
// processes on one host. The stages beside a cut may be cpu or cuda:N: a
// cut is a host-memory link on both hosts whatever their devices
// (ipc/link_kind.h). What the relays do not carry is refused here, before
// any process starts, rather than served wrong.
#include <string>

#include "base/check.h"
#include "daemon/config/config.h"

namespace kvasir {
namespace {

std::string entry_name(const StageCfg& s, size_t i) {
  return fmt::format("stages[{}]", s.entry >= 0 ? size_t(s.entry) : i);
}

// "ADDR:PORT" with a port in 1..65535 and an address that is not empty.
void check_host(const std::string& host, const std::string& f) {
  const size_t colon = host.rfind(':');
  const std::string port = colon == std::string::npos ? "" : host.substr(colon + 1);
  bool ok = colon != std::string::npos && colon > 0 && !port.empty() && port.size() <= 5 &&
            port.find_first_not_of("0123456789") == std::string::npos;
  ok = ok && std::stoi(port) >= 1 && std::stoi(port) <= 65535;
  KV_CHECK(ok, "{}.host: \"{}\" is not \"ADDR:PORT\" (the address `kvasird --worker --listen` has)",
           f, host);
}

// Every process of a group on its leader's host: a member talks to its
// leader through the segment, which does not cross hosts.
void check_group_hosts(const StageCfg& lead, size_t i) {
  for (const StageCfg& m : lead.members)
    KV_CHECK(m.host == lead.host,
             "{}.host: \"{}\", but its group's leader {} has host = \"{}\"; a group's "
             "processes share one segment, so every entry of the group names the same host",
             entry_name(m, i), m.host, entry_name(lead, i), lead.host);
}

}  // namespace

std::vector<RemoteRun> PlanCfg::remote_runs() const {
  std::vector<RemoteRun> runs;
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string& h = stages[i].host;
    if (h.empty()) continue;
    if (!runs.empty() && runs.back().end == int32_t(i) && runs.back().host == h)
      runs.back().end = int32_t(i) + 1;
    else
      runs.push_back({int32_t(i), int32_t(i) + 1, h});
  }
  return runs;
}

void validate_cluster(const Config& cfg) {
  const auto& st = cfg.plan.stages;
  const std::vector<RemoteRun> runs = cfg.plan.remote_runs();
  for (size_t i = 0; i < st.size(); ++i) check_group_hosts(st[i], i);
  if (runs.empty()) return;
  auto name = [&](int32_t i) { return entry_name(st[size_t(i)], size_t(i)); };
  KV_CHECK(runs[0].first > 0,
           "{}.host: the head stage runs on the leader (the bridge feeds it through its own "
           "segment); name a host on later stages only",
           name(runs[0].first));
  for (size_t k = 0; k < runs.size(); ++k) {
    const RemoteRun& run = runs[k];
    check_host(run.host, name(run.first));
    for (size_t j = 0; j < k; ++j)
      KV_CHECK(runs[j].host != run.host,
               "{}.host: \"{}\" already runs {}..{}, and a stage between them does not; a "
               "worker serves one run of consecutive stages (one session), so each run names a "
               "host of its own",
               name(run.first), run.host, name(runs[j].first), name(runs[j].end - 1));
  }
  KV_CHECK(!cfg.cluster.key.empty(),
           "cluster.key: required when a stage names a host ({}.host = \"{}\"): the file "
           "(0600, the same on every host) both ends prove they hold",
           name(runs[0].first), runs[0].host);
}

}  // namespace kvasir
