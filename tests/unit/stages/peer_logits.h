// tests/unit/stages/peer_logits.h — what the tests against llama.cpp's
// committed outputs share: the file fingerprint their references name, and
// the logits of every position of a sequence in one forward over the whole
// model (block size 4, F32 KV, 2 threads).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "model/model_file.h"
#include "stages/forward.h"

namespace kvasir::test {

// FNV-1a 64 of a file's bytes, as the reference scripts print it.
inline std::string fnv1a64(const std::vector<uint8_t>& data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : data) h = (h ^ b) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Logits at every position of ids: [ids.size(), vocab].
inline std::vector<float> logits_of(const ModelFile& m, const std::vector<int32_t>& ids) {
  const ModelConfig& c = m.config();
  KvSpec kv;
  kv.block_size = 4;
  kv.type = DType::F32;
  kv.n_blocks = int32_t(ids.size() / 4 + 2);
  std::vector<int32_t> table(size_t(kv.n_blocks));
  for (int32_t i = 0; i < kv.n_blocks; ++i) table[size_t(i)] = i;
  SliceExecutor ex(m, SliceSpec{0, c.n_layers - 1, true, true}, kv, 2, int64_t(ids.size()));
  std::vector<float> out(ids.size() * size_t(c.vocab));
  ForwardRow row{0, int32_t(ids.size()), table.data(), kv.n_blocks, false};
  ex.forward(ForwardBatch{&row, 1, ids.data(), int64_t(ids.size()), true}, nullptr, nullptr,
             out.data());
  return out;
}

}  // namespace kvasir::test
