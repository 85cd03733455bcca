// daemon/config/config_cluster.cpp — the multi-host rules of a plan
// (config.h, validate_cluster; docs/multi-host.md). The relay cuts the ring
// once, at the first remote stage r: stages 0..r-1 run here, r..S-1 on one
// worker, each expert group with all its processes on one side of the cut
// (the worker spawns and watches the members of its positions). The stages
// beside the cut may be cpu or cuda:N: the cut is a host-memory link on
// both hosts whatever their devices (ipc/link_kind.h). What the relay does
// not carry is refused here, before any process starts, rather than served
// wrong.
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

void validate_cluster(const Config& cfg) {
  const auto& st = cfg.plan.stages;
  const int32_t r = cfg.plan.first_remote();
  for (size_t i = 0; i < st.size(); ++i) check_group_hosts(st[i], i);
  if (r < 0) return;
  const std::string fr = entry_name(st[size_t(r)], size_t(r));
  KV_CHECK(r > 0,
           "{}.host: the head stage runs on the leader (the bridge feeds it through its own "
           "segment); name a host on later stages only",
           fr);
  for (size_t i = size_t(r); i < st.size(); ++i) {
    const std::string f = entry_name(st[i], i);
    KV_CHECK(!st[i].host.empty(),
             "{}: a stage on the leader after a remote one ({}.host = \"{}\"); the relay cuts "
             "the ring once, so the remote stages must be the last ones",
             f, fr, st[size_t(r)].host);
    check_host(st[i].host, f);
    KV_CHECK(st[i].host == st[size_t(r)].host,
             "{}.host: \"{}\", but {}.host is \"{}\"; the remote stages all run on one worker "
             "for now (one cut, one relay)",
             f, st[i].host, fr, st[size_t(r)].host);
  }
  KV_CHECK(!cfg.cluster.key.empty(),
           "cluster.key: required when a stage names a host ({}.host = \"{}\"): the file "
           "(0600, the same on every host) both ends prove they hold",
           fr, st[size_t(r)].host);
}

}  // namespace kvasir
