// tests/unit/stages/two_slices.h — the forward-parity tests' "slices compose"
// check, for any model: ids through a head slice [0, split] and a tail
// slice [split + 1, L - 1] in pieces of 5 tokens (the same pieces as the
// whole-model run it is compared with: a piece's row count picks its matmul
// kernels), over a 2-block table in reverse physical order. Returns the
// largest |logit difference| from `whole` ([ids.size(), vocab]).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/model_file.h"
#include "stages/forward.h"

namespace kvasir::test {

inline double two_slices_max_error(const ModelFile& model, const std::vector<int32_t>& ids,
                                   int32_t split, const std::vector<float>& whole) {
  const ModelConfig& c = model.config();
  KvSpec kv;
  kv.n_blocks = 2;
  std::vector<int32_t> table = {1, 0};
  SliceExecutor head(model, SliceSpec{0, split, true, false}, kv, 1, 16);
  SliceExecutor tail(model, SliceSpec{split + 1, c.n_layers - 1, false, true}, kv, 2, 16);
  std::vector<float> hidden(ids.size() * size_t(c.hidden)), logits(ids.size() * size_t(c.vocab));
  for (size_t pos = 0; pos < ids.size(); pos += 5) {
    const int32_t n = int32_t(std::min<size_t>(ids.size() - pos, 5));
    ForwardRow row{int32_t(pos), n, table.data(), 2, false};
    ForwardBatch b{&row, 1, ids.data() + pos, n, true};
    head.forward(b, nullptr, hidden.data(), nullptr);
    tail.forward(b, hidden.data(), nullptr, logits.data() + pos * size_t(c.vocab));
  }
  double max_err = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    max_err = std::max(max_err, double(std::abs(logits[i] - whole[i])));
  return max_err;
}

}  // namespace kvasir::test
