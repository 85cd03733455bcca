// daemon/config/config_groups.cpp — expert groups in the plan
// (docs/expert-groups.md): [[stages]] entries → ring positions, and the
// rules of a group that need no model (form_groups, config.h).
#include <fmt/format.h>

#include "base/check.h"
#include "daemon/config/config.h"

namespace kvasir {
namespace {

std::string name(const StageCfg& s, size_t i) {
  return fmt::format("stages[{}]", s.entry >= 0 ? size_t(s.entry) : i);
}

// The rules of one group, entries [b, e) of `entries` (all with `experts`
// and the same layers).
void check_group(const std::vector<StageCfg>& entries, size_t b, size_t e) {
  const std::string lead = name(entries[b], b);
  KV_CHECK(e - b >= 2,
           "{}.experts: a group needs at least two consecutive entries with the same layers "
           "({}-{}) and an experts range each; this one is alone",
           lead, entries[b].first, entries[b].last);
  KV_CHECK(e - b <= size_t(kMaxGroupProcesses),
           "{}.experts: a group of {} processes; at most {} (leader and members)", lead, e - b,
           kMaxGroupProcesses);
  // Ascending first, so that a range out of place is named as such rather
  // than as the gap it leaves.
  for (size_t i = b + 1; i < e; ++i)
    KV_CHECK(entries[i].experts_first > entries[i - 1].experts_first,
             "{}.experts: {}-{} comes before {}'s {}-{}; a group's ranges ascend",
             name(entries[i], i), entries[i].experts_first, entries[i].experts_last,
             name(entries[i - 1], i - 1), entries[i - 1].experts_first,
             entries[i - 1].experts_last);
  for (size_t i = b; i < e; ++i) {
    const StageCfg& s = entries[i];
    const std::string f = name(s, i);
    KV_CHECK(s.first >= 0, "{}.experts: needs written layers; \"auto\" cannot form a group", f);
    KV_CHECK(!s.is_gpu(),
             "{}.device: {} in an expert group; group processes are cpu only (the GPU MoE "
             "path has not run on a GPU yet)",
             f, s.device);
    if (i == b) {
      KV_CHECK(s.experts_first == 0,
               "{}.experts: {}-{}; a group's first range starts at expert 0 (experts 0-{} "
               "are held by no entry)",
               f, s.experts_first, s.experts_last, s.experts_first - 1);
      continue;
    }
    const StageCfg& p = entries[i - 1];
    KV_CHECK(s.experts_first > p.experts_last, "{}.experts: {}-{} overlaps {}'s {}-{}", f,
             s.experts_first, s.experts_last, name(p, i - 1), p.experts_first, p.experts_last);
    KV_CHECK(s.experts_first == p.experts_last + 1,
             "{}.experts: starts at {} but {} ends at {}; experts {}-{} are held by no entry", f,
             s.experts_first, name(p, i - 1), p.experts_last, p.experts_last + 1,
             s.experts_first - 1);
  }
}

}  // namespace

std::vector<StageCfg> form_groups(std::vector<StageCfg> entries) {
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].entry < 0) entries[i].entry = int32_t(i);
  std::vector<StageCfg> positions;
  for (size_t b = 0; b < entries.size();) {
    size_t e = b + 1;
    if (entries[b].is_group()) {
      while (e < entries.size() && entries[e].is_group() && entries[e].first == entries[b].first &&
             entries[e].last == entries[b].last)
        ++e;
      check_group(entries, b, e);
    }
    StageCfg lead = std::move(entries[b]);
    for (size_t i = b + 1; i < e; ++i) lead.members.push_back(std::move(entries[i]));
    positions.push_back(std::move(lead));
    b = e;
  }
  PlanCfg p;
  p.stages = positions;
  KV_CHECK(p.processes() <= kMaxPlanProcesses,
           "stages: the plan has {} processes (positions and group members); at most {}",
           p.processes(), kMaxPlanProcesses);
  return positions;
}

}  // namespace kvasir
