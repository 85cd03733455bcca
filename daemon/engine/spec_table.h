// daemon/engine/spec_table.h — the bridge's side of the segment's grammar
// table (ipc/grammar_table.h): which entry holds which structured-output
// spec, and when an entry may be written again.
//
// The specs are opaque bytes here (grammar/'s wire form; the engine never
// looks inside). Rows of requests with the same spec share one entry, so
// sixteen requests under one JSON schema cost one write. An entry is
// rewritten only when no batch in the ring names it: every batch that did
// has an id below the oldest batch still outstanding. Batches come back in
// id order (the ring is FIFO through every stage) and a lost stage's epoch
// frees them all, so "named by a batch below the oldest outstanding" is
// "named by no batch in the ring". With entries >= max_inflight x max_rows
// there is always one to take: at most that many rows are in the ring
// together, the batch being written included.
//
// Engine thread only.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ipc/grammar_table.h"

namespace kvasir {

class SpecTable {
 public:
  explicit SpecTable(ipc::GrammarTable table);

  bool enabled() const { return table_.entries() > 0; }
  uint32_t capacity() const { return table_.capacity(); }

  // Where batch `batch` finds `spec`: {1 + entry index, entry id} for
  // SamplingParams. Writes the entry if no entry holds the spec. `oldest`:
  // the smallest batch id still in the ring (`batch` itself when none is).
  // Throws kvasir::Error (kInternal) if every entry is named by a batch in
  // the ring (the table is smaller than the rule above needs) or the spec is
  // over capacity (check_request refuses those first).
  std::pair<uint32_t, uint64_t> place(const std::string& spec, uint64_t batch, uint64_t oldest);

  uint64_t writes() const { return writes_; }

 private:
  struct Entry {
    std::string spec;
    uint64_t id = 0;          // 0: empty
    uint64_t last_batch = 0;  // the newest batch that names it
  };
  int32_t victim(uint64_t oldest) const;

  ipc::GrammarTable table_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, int32_t> by_spec_;
  uint64_t next_id_ = 1;
  uint64_t writes_ = 0;
};

}  // namespace kvasir
