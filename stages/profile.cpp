// stages/profile.cpp — what each layer of a model costs on this machine's
// CPU (stages/stage.h, measure_layer_costs): the costs `kvasird --check`
// and layers = "auto" split the layers by (base/layer_split.h).
#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "base/check.h"
#include "stages/forward.h"
#include "stages/stage.h"

namespace kvasir {
namespace {

// One micro-batch as continuous batching with chunked prefill forms it
// under load: `rows` decode sequences of one token each at position
// `context`, every one sampled, and (when `prefill` > 0) a prompt piece of
// `prefill` tokens from the same position, not sampled — a sequence whose
// prompt is still being computed. Each row's KV in its own blocks.
struct ProfileBatch {
  ProfileBatch(int rows, int prefill, int context, int block_size) {
    const int per_row = (context + block_size) / block_size;
    const int per_piece = (context + prefill + block_size - 1) / block_size;
    tables.resize(size_t(rows) * size_t(per_row) + size_t(prefill > 0 ? per_piece : 0));
    for (size_t i = 0; i < tables.size(); ++i) tables[i] = int32_t(i);
    tokens.assign(size_t(rows) + size_t(prefill), 1);
    for (int r = 0; r < rows; ++r)
      frows.push_back(
          ForwardRow{context, 1, tables.data() + size_t(r) * size_t(per_row), per_row, true});
    if (prefill > 0)
      frows.push_back(ForwardRow{context, prefill, tables.data() + size_t(rows) * size_t(per_row),
                                 per_piece, false});
    batch.rows = frows.data();
    batch.n_rows = int32_t(frows.size());
    batch.tokens = tokens.data();
    batch.n_tokens = int64_t(tokens.size());
    n_blocks = int32_t(tables.size());
  }
  std::vector<int32_t> tables, tokens;
  std::vector<ForwardRow> frows;
  ForwardBatch batch;
  int32_t n_blocks = 0;
};

// The time (ms) of one forward of the slice, after a warm-up forward (the
// first pages the slice's weights in and warms the caches).
double time_slice(const ModelFile& model, const SliceSpec& slice, const ProfileBatch& d,
                  int threads) {
  const ModelConfig& mc = model.config();
  SliceExecutor ex(model, slice, KvSpec{d.n_blocks, 16, DType::F16}, threads, d.batch.n_tokens);
  std::vector<float> in(size_t(d.batch.n_tokens) * size_t(mc.hidden), 0.01f), out(in.size()),
      logits(slice.tail ? size_t(d.batch.n_rows) * size_t(mc.vocab) : 0);  // [rows, vocab]
  double t = 0;
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ex.forward(d.batch, slice.head ? nullptr : in.data(), slice.tail ? nullptr : out.data(),
               slice.tail ? logits.data() : nullptr);
    t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return t;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + int64_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

LayerCosts measure_layer_costs(const std::string& model_path, int threads, int rows, int prefill,
                               int context, int repeats) {
  KV_CHECK(rows >= 1 && prefill >= 0 && prefill <= (1 << 16) && context >= 0 &&
               context <= (1 << 20) && repeats >= 1,
           "measure_layer_costs: bad shape (rows {}, prefill {}, context {}, repeats {})", rows,
           prefill, context, repeats);
  auto model = ModelFile::open(model_path);
  const int L = model->config().n_layers;
  const int64_t span = int64_t(context) + std::max(prefill, 1);
  KV_CHECK(model->config().context_length <= 0 || span <= model->config().context_length,
           "measure_layer_costs: positions up to {} exceed the model's context of {}", span,
           model->config().context_length);
  const ProfileBatch d(rows, prefill, context, 16);
  LayerCosts c;
  c.rows = rows;
  c.prefill = prefill;
  c.context = context;
  // In rounds, every slice once per round, each figure the median over the
  // rounds: a burst of other work on the machine then slows one round of
  // every layer alike, not all the runs of a few (runs of each layer back
  // to back let one burst land on a few layers and move the proposed split
  // by several layers from one measurement to the next). The
  // ends' extras — what the head's embedding and the tail's final norm,
  // output head and logits add to their layer — are the medians of the
  // differences within a round.
  std::vector<std::vector<double>> layer(static_cast<size_t>(L));
  std::vector<double> head, tail;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> now(static_cast<size_t>(L));
    for (int l = 0; l < L; ++l) {
      now[size_t(l)] = time_slice(*model, SliceSpec{l, l, false, false}, d, threads);
      layer[size_t(l)].push_back(now[size_t(l)]);
    }
    head.push_back(time_slice(*model, SliceSpec{0, 0, true, false}, d, threads) - now.front());
    tail.push_back(time_slice(*model, SliceSpec{L - 1, L - 1, false, true}, d, threads) -
                   now.back());
  }
  for (int l = 0; l < L; ++l) c.layer_ms.push_back(median(layer[size_t(l)]));
  c.head_ms = std::max(0.0, median(head));
  c.tail_ms = std::max(0.0, median(tail));
  return c;
}

}  // namespace kvasir
