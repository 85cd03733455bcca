// ipc/grammar_table.h — the segment's table of grammar specs: how a
// request's structured-output spec, variable-size bytes (grammar/'s wire
// form: a JSON schema, a regex, a tool-call tag...), reaches the tail stage.
//
// The table is `entries` slots of `capacity` bytes each, in the segment
// after the result slots (ipc/segment.h). The bridge writes a spec into an
// entry once, under a fresh id, and every descriptor row of a constrained
// request names it (SamplingParams::grammar_entry, grammar_id: ipc/sampling.h);
// rows of requests with the same spec share the entry. The tail reads an
// entry when it first meets a spec (and after a restart), checks it, and
// keeps the compiled grammar itself.
//
// Life of an entry: the bridge rewrites one only when no batch in the ring
// names it (every batch that did has come back, or its epoch died and the
// ring drained), and rows name an entry only in batches written after it:
// the ring's release/acquire order makes the bytes visible before any
// message that names them. So a reader never sees an entry change under it
// in a correct run; the checks below are for the run that is not (a stray
// write, a bug, a peer that does not follow the rule): version, id, length
// within the entry, and a checksum of the bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kvasir::ipc {

constexpr uint32_t kGrammarTableVersion = 1;

struct GrammarEntryHeader {
  std::atomic<uint64_t> id{0};  // 0 = empty; written last (release)
  uint32_t version = 0;         // kGrammarTableVersion
  uint32_t bytes = 0;           // the spec's length, <= the table's capacity
  uint64_t checksum = 0;        // FNV-1a 64 of the spec's bytes
};

// A view of the table in mapped memory. Cheap to copy.
class GrammarTable {
 public:
  GrammarTable() = default;
  // `base`: bytes_for(entries, capacity) bytes of the segment, zeroed when
  // the segment was created.
  GrammarTable(void* base, int32_t entries, uint32_t capacity)
      : base_(static_cast<char*>(base)), entries_(entries), capacity_(capacity) {}

  // The bytes of a table of `entries` entries of `capacity` bytes each (each
  // entry aligned to 64 bytes).
  static uint64_t bytes_for(int32_t entries, uint32_t capacity);
  static uint64_t entry_stride(uint32_t capacity);

  int32_t entries() const { return entries_; }
  uint32_t capacity() const { return capacity_; }

  // Writer (the bridge): entry `i` holds `spec` under `id` (> 0) from now on.
  // No batch in the ring may name entry i while this runs. Throws
  // kvasir::Error on an index out of range, id 0, or a spec over capacity.
  void write(int32_t i, uint64_t id, std::string_view spec);

  // Reader (the tail): copies entry `i` into *out if it holds `id`.
  // kBatchRefused naming what is wrong otherwise: index out of range, an
  // entry of another id or version, a length over the capacity, a checksum
  // that does not match (*out is then unspecified).
  Status read(int32_t i, uint64_t id, std::string* out) const;

 private:
  GrammarEntryHeader* header(int32_t i) const;
  char* data(int32_t i) const;

  char* base_ = nullptr;
  int32_t entries_ = 0;
  uint32_t capacity_ = 0;
};

// FNV-1a 64 of `bytes`: the table's checksum.
uint64_t grammar_checksum(std::string_view bytes);

}  // namespace kvasir::ipc
