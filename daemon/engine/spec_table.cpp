// daemon/engine/spec_table.cpp — see spec_table.h.
#include "daemon/engine/spec_table.h"

#include "base/check.h"

namespace kvasir {

SpecTable::SpecTable(ipc::GrammarTable table)
    : table_(table), entries_(size_t(std::max(table.entries(), 0))) {}

// An entry no batch in the ring names: an empty one first, else the one
// named longest ago. -1 if there is none.
int32_t SpecTable::victim(uint64_t oldest) const {
  int32_t best = -1;
  for (int32_t i = 0; i < int32_t(entries_.size()); ++i) {
    const Entry& e = entries_[size_t(i)];
    if (e.id == 0) return i;
    if (e.last_batch >= oldest) continue;
    if (best < 0 || e.last_batch < entries_[size_t(best)].last_batch) best = i;
  }
  return best;
}

std::pair<uint32_t, uint64_t> SpecTable::place(const std::string& spec, uint64_t batch,
                                               uint64_t oldest) {
  if (auto it = by_spec_.find(spec); it != by_spec_.end()) {
    Entry& e = entries_[size_t(it->second)];
    e.last_batch = batch;
    return {uint32_t(it->second) + 1, e.id};
  }
  KV_CHECK_CODE(spec.size() <= table_.capacity(), ErrorCode::kInternal,
                "grammar table: a spec of {} bytes, entries hold {}", spec.size(),
                table_.capacity());
  const int32_t i = victim(std::min(oldest, batch));
  KV_CHECK_CODE(i >= 0, ErrorCode::kInternal,
                "grammar table: all {} entries are named by batches in the ring", entries_.size());
  Entry& e = entries_[size_t(i)];
  if (e.id != 0) by_spec_.erase(e.spec);
  e.spec = spec;
  e.id = next_id_++;
  e.last_batch = batch;
  table_.write(i, e.id, spec);
  by_spec_[spec] = i;
  ++writes_;
  return {uint32_t(i) + 1, e.id};
}

}  // namespace kvasir
