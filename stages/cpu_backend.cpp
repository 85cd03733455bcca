// stages/cpu_backend.cpp — see cpu_backend.h.
#include "stages/cpu_backend.h"

#include "base/check.h"
#include "stages/slice.h"

namespace kvasir {
namespace {

class CpuBackend final : public StageBackend {
 public:
  CpuBackend(std::unique_ptr<ModelFile> model, const CpuStageConfig& cfg)
      : model_(std::move(model)), cfg_(cfg) {
    const KvSpec kv{0, cfg.block_size, cfg.kv_type};
    const uint64_t per = slice_kv_block_bytes(model_->config(), cfg.slice, kv);
    capacity_ = per ? int64_t(cfg.kv_memory / per) : 0;
    KV_CHECK(capacity_ >= 1, "kv.memory ({} bytes) holds no block of layers {}-{} ({} bytes each)",
             cfg.kv_memory, cfg.slice.first_layer, cfg.slice.last_layer, per);
  }

  int32_t vocab() const override { return model_->config().vocab; }
  int64_t capacity_blocks() const override { return capacity_; }

  bool preload(const PreloadConfig& pc) override { return preload_slice(*model_, cfg_.slice, pc); }

  void allocate_kv(int32_t n_blocks, int32_t n_blocks_swa) override {
    KV_CHECK(!exec_, "allocate_kv: the KV pool is already allocated");
    // Layer-blocks: each layer holds its group's count, all within what
    // capacity_ blocks of every layer would take.
    const int64_t n_sliding = sliding_layers(model_->config(), cfg_.slice);
    const int64_t n_layers = cfg_.slice.last_layer - cfg_.slice.first_layer + 1;
    const int64_t used = n_blocks_swa > 0
                             ? (n_layers - n_sliding) * n_blocks + n_sliding * n_blocks_swa
                             : n_layers * n_blocks;
    KV_CHECK(n_blocks >= 1 && n_blocks_swa >= 0 && used <= n_layers * capacity_,
             "{} KV blocks ({} sliding) asked, {} fit", n_blocks, n_blocks_swa, capacity_);
    const KvSpec kv{n_blocks, cfg_.block_size, cfg_.kv_type, n_blocks_swa};
    exec_ = std::make_unique<SliceExecutor>(*model_, cfg_.slice, kv, cfg_.threads, cfg_.max_tokens);
    exec_->set_peers(cfg_.peers.get());
    if (cfg_.width)
      exec_->set_pool_width(
          {[](const void* f) { return (*static_cast<const std::function<int()>*>(f))(); },
           &cfg_.width});
  }

  bool attach_boundaries() override { return true; }  // host boundaries: nothing to open

  void forward(const ForwardBatch& b, const float* in, float* out, float* logits) override {
    KV_CHECK(exec_ != nullptr, "forward before allocate_kv");
    exec_->forward(b, in, out, logits);
  }

  int32_t n_experts() const override { return model_->config().n_experts; }
  std::span<const uint64_t> routed() const override {
    return exec_ ? exec_->routed() : std::span<const uint64_t>{};
  }

 private:
  std::unique_ptr<ModelFile> model_;
  CpuStageConfig cfg_;
  int64_t capacity_ = 0;
  std::unique_ptr<SliceExecutor> exec_;
};

}  // namespace

std::unique_ptr<StageBackend> make_cpu_backend(std::unique_ptr<ModelFile> model,
                                               const CpuStageConfig& cfg) {
  return std::make_unique<CpuBackend>(std::move(model), cfg);
}

}  // namespace kvasir
