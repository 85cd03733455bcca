#include "daemon/supervisor/kv_split.h"

#include <algorithm>
#include <climits>

namespace kvasir {

bool has_sliding_group(const Config& cfg, const ModelConfig& m) {
  if (m.sliding_window <= 0 || cfg.scheduler.policy == "static") return false;
  for (const StageCfg& s : cfg.plan.stages)
    if (s.device != "cpu") return false;
  bool slides = false, global = false;
  for (int32_t il = 0; il < m.n_layers; ++il) (m.layer_slides(il) ? slides : global) = true;
  return slides && global;
}

int64_t sliding_want(const Config& cfg, const ModelConfig& m) {
  if (!has_sliding_group(cfg, m)) return 0;
  const int64_t bs = cfg.kv.block_size;
  const int64_t per_seq = (int64_t(m.sliding_window) - 1 + cfg.plan.max_tokens + bs - 1) / bs + 1;
  return int64_t(cfg.scheduler.max_num_seqs) * per_seq;
}

KvSplit split_kv(const std::vector<StageKv>& stages, int64_t sliding_want) {
  int64_t least = INT32_MAX;
  for (const StageKv& s : stages) least = std::min(least, s.capacity);
  if (sliding_want <= 0) return KvSplit{int32_t(least), 0};
  // An equal split is what one pool gave: every stage holds it.
  const int64_t sliding = std::clamp<int64_t>(sliding_want, 1, least);
  int64_t full = INT32_MAX;
  for (const StageKv& s : stages) {
    if (s.full_layers == 0) continue;
    const int64_t layer_blocks = s.capacity * (s.full_layers + s.sliding_layers);
    full = std::min(full, (layer_blocks - s.sliding_layers * sliding) / s.full_layers);
  }
  if (full == INT32_MAX) full = least;  // no stage holds a full layer: any count fits
  return KvSplit{int32_t(full), int32_t(sliding)};
}

}  // namespace kvasir
