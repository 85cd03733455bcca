// The stage's pieces around the executors: the CPU backend behind
// StageBackend (stages/cpu_backend.h), and the tail's sampling of a batch
// into its result slot (stages/tail_sampler.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/check.h"
#include "stages/cpu_backend.h"
#include "stages/tail_sampler.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

// --- CpuBackend -------------------------------------------------------------

struct TinyModel {
  test::TempDir dir;
  test::TinySpec spec;
  std::string path;
  TinyModel() : path(dir.file("tiny.gguf")) { test::write_tiny_gguf(path, spec); }
};

CpuStageConfig whole_model(const ModelConfig& c, uint64_t kv_memory) {
  CpuStageConfig cfg;
  cfg.slice = SliceSpec{0, c.n_layers - 1, true, true};
  cfg.block_size = 4;
  cfg.kv_type = DType::F32;
  cfg.kv_memory = kv_memory;
  cfg.threads = 2;
  cfg.max_tokens = 16;
  return cfg;
}

TEST(CpuBackend, CapacityIsKvMemoryOverBytesPerBlock) {
  TinyModel t;
  auto model = ModelFile::open(t.path);
  const ModelConfig c = model->config();
  const CpuStageConfig cfg = whole_model(c, 1 << 20);
  const uint64_t per = kv_block_bytes(c, c.n_layers, cfg.block_size, 4);
  auto b = make_cpu_backend(std::move(model), cfg);
  EXPECT_EQ(b->capacity_blocks(), int64_t((1 << 20) / per));
  EXPECT_EQ(b->vocab(), c.vocab);
  EXPECT_TRUE(b->attach_boundaries());
}

TEST(CpuBackend, RefusesAKvMemoryThatHoldsNoBlock) {
  TinyModel t;
  auto model = ModelFile::open(t.path);
  const CpuStageConfig cfg = whole_model(model->config(), 100);
  test::expect_error([&] { make_cpu_backend(std::move(model), cfg); },
                     {"kv.memory (100 bytes) holds no block of layers 0-1"});
}

TEST(CpuBackend, ForwardsAsTheSliceExecutorOnceKvIsAllocated) {
  TinyModel t;
  auto model = ModelFile::open(t.path);
  const ModelConfig c = model->config();
  const CpuStageConfig cfg = whole_model(c, 1 << 20);
  auto b = make_cpu_backend(ModelFile::open(t.path), cfg);
  const std::vector<int32_t> ids = {5, 17, 3, 200, 42, 9};
  std::vector<int32_t> table = {1, 0};
  ForwardRow row{0, int32_t(ids.size()), table.data(), 2, true};
  const ForwardBatch batch{&row, 1, ids.data(), int64_t(ids.size())};
  std::vector<float> got(size_t(c.vocab)), want(size_t(c.vocab));
  test::expect_error([&] { b->forward(batch, nullptr, nullptr, got.data()); },
                     {"forward before allocate_kv"});
  test::expect_error([&] { b->allocate_kv(int32_t(b->capacity_blocks() + 1)); }, {"fit"});
  ASSERT_TRUE(b->preload(PreloadConfig{}));
  b->allocate_kv(2);
  b->forward(batch, nullptr, nullptr, got.data());
  SliceExecutor ex(*model, cfg.slice, KvSpec{2, cfg.block_size, cfg.kv_type}, 2, cfg.max_tokens);
  ex.forward(batch, nullptr, nullptr, want.data());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

// --- TailSampler ------------------------------------------------------------

struct TailBatch {
  static constexpr int32_t kVocab = 6;
  ipc::Batch batch;
  std::vector<float> logits;       // [sampled rows, vocab]
  std::vector<int32_t> dev_token;  // [rows]
  std::vector<float> dev_logprob;  // [rows]
  std::vector<int32_t> token, n_top;
  std::vector<float> logprob;
  std::vector<ipc::TopLogprob> top;
  ipc::ResultHeader hdr;

  void add_row(uint64_t seq, int32_t pos0, std::vector<int32_t> tokens, bool sample,
               const SamplingParams& sp = {}) {
    ipc::DescRow r;
    r.seq_id = seq;
    r.pos0 = pos0;
    r.n_tokens = int32_t(tokens.size());
    r.n_prompt = pos0 + r.n_tokens;
    r.sample = sample;
    batch.rows.push_back(r);
    batch.sampling.push_back(sp);
    batch.tokens.insert(batch.tokens.end(), tokens.begin(), tokens.end());
    dev_token.push_back(-1);
    dev_logprob.push_back(0.f);
  }
  ipc::ResultView result() {
    const size_t n = batch.rows.size();
    token.assign(n, 99);
    n_top.assign(n, 99);
    logprob.assign(n, 0.f);
    top.assign(n * kMaxLogprobs, {});
    return ipc::ResultView{&hdr, token.data(), logprob.data(), n_top.data(), top.data()};
  }
  TailSampler::Logits view() {
    return TailSampler::Logits{logits.data(), kVocab, dev_token.data(), dev_logprob.data()};
  }
};

SamplingParams greedy() {
  SamplingParams sp;
  sp.temperature = 0.f;
  return sp;
}

TEST(TailSampler, HostDeviceAndUnsampledRows) {
  TailBatch t;
  SamplingParams lp = greedy();
  lp.logprobs = 2;
  t.add_row(1, 0, {1, 2, 3}, true, lp);  // host: argmax 4, two logprobs
  t.add_row(2, 0, {4}, false);           // not sampled
  t.add_row(3, 5, {0}, true, greedy());  // sampled on the device
  t.logits = {0, 1, 2, 3, 9, 5,          // row 0
              7, 7, 7, 7, 7, 7};         // row 2's: unused
  t.dev_token[2] = 3;
  t.dev_logprob[2] = -0.25f;
  TailSampler s;
  const ipc::ResultView out = t.result();
  s.sample(t.batch, 1, 3, t.view(), out);
  EXPECT_EQ(t.token[0], 4);
  EXPECT_EQ(t.n_top[0], 2);
  EXPECT_EQ(t.top[0].token, 4);
  EXPECT_EQ(t.top[1].token, 5);
  EXPECT_EQ(t.token[1], -1);
  EXPECT_EQ(t.n_top[1], 0);
  EXPECT_EQ(t.token[2], 3);
  EXPECT_EQ(t.logprob[2], -0.25f);
  EXPECT_EQ(t.n_top[2], 0);
}

TEST(TailSampler, AllMaskedRowFailsTheBatch) {
  TailBatch t;
  t.add_row(1, 0, {1}, true, greedy());
  t.logits.assign(TailBatch::kVocab, -std::numeric_limits<float>::infinity());
  TailSampler s;
  const ipc::ResultView out = t.result();
  test::expect_error([&] { s.sample(t.batch, 1, 1, t.view(), out); },
                     {"every logit is NaN or -inf"});
}

TEST(TailSampler, ALostPenaltyHistoryFailsThatRowAlone) {
  TailBatch t;
  SamplingParams pen = greedy();
  pen.repetition_penalty = 1.5f;
  t.add_row(7, 10, {2}, true, pen);  // positions 0..9 never seen: no history
  t.add_row(8, 0, {2}, true, pen);   // a fresh sequence: its history starts here
  t.logits = {0, 1, 9, 3, 4, 5, 0, 1, 9, 3, 4, 5};
  TailSampler s;
  const ipc::ResultView out = t.result();
  s.sample(t.batch, 1, 2, t.view(), out);
  EXPECT_EQ(t.token[0], -1);
  EXPECT_EQ(t.token[1], 2);  // 9 / 1.5 = 6 still the largest
}

}  // namespace
}  // namespace kvasir
