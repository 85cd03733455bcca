// daemon/supervisor/kv_split.h — how many KV blocks each group's pool gets
// (docs/config.md, the kv keys; docs/scheduler.md, "Sliding-window groups").
//
// Every stage reports the blocks of all its layers its KV memory holds
// (capacity_blocks). With one group the daemon takes the smallest. With a
// sliding-window group the memory is split: the sliding pool gets what
// `max_num_seqs` sequences' windows can ever hold (no more is of use: a
// sequence never holds more of it, sliding_group.h), at most what an equal
// split gives, and the full pool all the rest, on the stage where it is
// least.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/config/config.h"
#include "model/config.h"

namespace kvasir {

struct StageKv {
  int64_t capacity = 0;  // blocks of all its layers it holds
  int32_t full_layers = 0, sliding_layers = 0;
};

struct KvSplit {
  int32_t full = 0;
  int32_t sliding = 0;  // 0: no sliding group
};

// Whether this config and model get a sliding group: a model with both
// sliding and global layers, on CPU stages only (a GPU stage holds one
// group) and not under `static` (whose padding is defined on whole
// prompts).
bool has_sliding_group(const Config& cfg, const ModelConfig& m);

// The sliding pool that serves every sequence at once: max_num_seqs times
// the most one sequence holds (SlidingGroup::max_held: its window and its
// widest row, plan.max_tokens). 0 without a sliding group.
int64_t sliding_want(const Config& cfg, const ModelConfig& m);

// sliding_want: the sliding pool that serves every sequence at once (0:
// no sliding group: the smallest capacity for the one pool).
KvSplit split_kv(const std::vector<StageKv>& stages, int64_t sliding_want);

}  // namespace kvasir
