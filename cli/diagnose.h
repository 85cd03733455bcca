// cli/diagnose.h — `kvasir diagnose` and `kvasir top`'s one-line diagnosis:
// which of the three things a default may get wrong is the bottleneck right
// now, the figures that show it, the one setting to change, and what the
// change should do (docs/cli.md, "kvasir diagnose").
//
//   KV capacity           sequences preempted, or requests waiting for blocks
//                         → kv.memory
//   batching              the ring does not keep its stages busy: fewer
//                         micro-batches in flight than stages, or one stage
//                         setting the step (an unbalanced layer split), or
//                         micro-batches too small
//                         → plan.max_inflight, the layer split ([[stages]] layers)
//   prefill interference  decodes that ride with prefill see steps many times
//                         their decode-only step (ITL spikes when chunks run)
//                         → scheduler.itl_target_ms (or plan.max_tokens
//                           under the whole-prefill policies)
//
// and, none of those three, a host matter: stages descheduled (waiting on
// a run queue behind other work for >= 10% of the interval) → stages.cpus
// (their own CPUs), or the host's priorities.
//
// Pure: it reads a TopView (two /kvasir/v1/stats snapshots, cli/top.h).
// Tested in tests/unit/cli/test_cli.cpp and, on real daemons misconfigured
// each way, in tests/integration/test_diagnose.sh.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/top.h"

namespace kvasir::cli {

struct Diagnosis {
  // kv_capacity, batching, prefill_interference, descheduled, none (no
  // bottleneck among them: the ring is the limit), idle, loading.
  std::string cause;
  // kv.memory, plan.max_inflight, plan.max_tokens, scheduler.itl_target_ms,
  // stages.layers, stages.cpus, or "" (nothing to turn).
  std::string knob;
  std::string summary;               // one line: cause, the telling figure, the knob
  std::vector<std::string> figures;  // the evidence
  std::string change;                // the change proposed and what it should do
};

Diagnosis diagnose_view(const TopView& v);
nlohmann::json diagnosis_json(const Diagnosis& d);
std::string render_diagnosis(const Diagnosis& d);

}  // namespace kvasir::cli
