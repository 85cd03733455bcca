// ipc/grammar_table.cpp — see grammar_table.h.
#include "ipc/grammar_table.h"

#include <cstring>

#include "base/check.h"

namespace kvasir::ipc {

uint64_t grammar_checksum(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t GrammarTable::entry_stride(uint32_t capacity) {
  return (sizeof(GrammarEntryHeader) + uint64_t(capacity) + 63) & ~uint64_t(63);
}

uint64_t GrammarTable::bytes_for(int32_t entries, uint32_t capacity) {
  return entries > 0 ? uint64_t(entries) * entry_stride(capacity) : 0;
}

GrammarEntryHeader* GrammarTable::header(int32_t i) const {
  return reinterpret_cast<GrammarEntryHeader*>(base_ + uint64_t(i) * entry_stride(capacity_));
}

char* GrammarTable::data(int32_t i) const {
  return reinterpret_cast<char*>(header(i)) + sizeof(GrammarEntryHeader);
}

void GrammarTable::write(int32_t i, uint64_t id, std::string_view spec) {
  KV_CHECK(i >= 0 && i < entries_, "grammar table: entry {} out of range [0, {})", i, entries_);
  KV_CHECK(id != 0, "grammar table: id 0 marks an empty entry");
  KV_CHECK(spec.size() <= capacity_, "grammar table: a spec of {} bytes, entries hold {}",
           spec.size(), capacity_);
  GrammarEntryHeader* h = header(i);
  h->id.store(0, std::memory_order_relaxed);
  std::memcpy(data(i), spec.data(), spec.size());
  h->version = kGrammarTableVersion;
  h->bytes = uint32_t(spec.size());
  h->checksum = grammar_checksum(spec);
  h->id.store(id, std::memory_order_release);
}

Status GrammarTable::read(int32_t i, uint64_t id, std::string* out) const {
  auto refused = [&](const std::string& why) {
    return error_status(ErrorCode::kBatchRefused, "grammar table entry {} (id {}): {}", i, id, why);
  };
  if (i < 0 || i >= entries_) return refused(fmt::format("out of range [0, {})", entries_));
  const GrammarEntryHeader* h = header(i);
  const uint64_t have = h->id.load(std::memory_order_acquire);
  if (have != id || id == 0) return refused(fmt::format("holds id {}", have));
  if (h->version != kGrammarTableVersion)
    return refused(fmt::format("version {} (expected {})", h->version, kGrammarTableVersion));
  const uint32_t n = h->bytes;
  if (n > capacity_) return refused(fmt::format("{} bytes, over the capacity {}", n, capacity_));
  out->assign(data(i), n);
  if (grammar_checksum(*out) != h->checksum) return refused("checksum mismatch");
  // Written again while we copied (a writer breaking the rule): not this spec.
  if (h->id.load(std::memory_order_acquire) != id) return refused("rewritten while read");
  return {};
}

}  // namespace kvasir::ipc
