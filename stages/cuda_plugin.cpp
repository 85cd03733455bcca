#include "stages/cuda_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/check.h"
#include "base/log.h"
#include "ipc/cuda_boundary.h"
#include "ipc/sampling.h"
#include "stages/sampler.h"

namespace kvasir {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPluginFile = "libkvasir_cuda.so";

std::string exe_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

std::string text(const char* buf, size_t cap) {
  return std::string(buf, strnlen(buf, cap));
}

// A plugin status (a kvasir::ErrorCode value, plugin_abi.h) as the code of
// the Error the stage throws; kInternal for a failure that says "ok".
ErrorCode code_of(int rc) {
  const ErrorCode c = error_code_from_int(rc);
  return c == ErrorCode::kOk ? ErrorCode::kInternal : c;
}

}  // namespace

std::vector<std::string> CudaPlugin::search_paths() {
  std::vector<std::string> out;
  // An explicit path is the only one tried: what the operator (or a test) named.
  if (const char* env = std::getenv("KVASIR_CUDA_PLUGIN"); env && *env) return {env};
  std::string dir = exe_dir();
  if (!dir.empty()) {
    out.push_back((fs::path(dir) / kPluginFile).string());
    out.push_back(
        (fs::path(dir) / ".." / "lib" / "kvasir" / kPluginFile).lexically_normal().string());
  }
  return out;
}

std::unique_ptr<CudaPlugin> CudaPlugin::load(int device) {
  KV_CHECK(device >= 0, "plan asks for a CUDA device with a bad ordinal {}", device);
  const std::string want = fmt::format("cuda:{}", device);
  std::string tried, found;
  std::error_code ec;
  for (const auto& p : search_paths()) {
    if (fs::is_regular_file(p, ec)) {
      found = p;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + p;
  }
  KV_CHECK(!found.empty(),
           "plan asks for {} but this build has no CUDA plugin ({} not found in: {}); build "
           "where nvcc is installed (KVASIR_CUDA=AUTO/ON), or set KVASIR_CUDA_PLUGIN",
           want, kPluginFile, tried.empty() ? "(no path)" : tried);
  dlerror();
  void* h = dlopen(found.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    KV_FAIL(
        "plan asks for {} but the CUDA plugin {} cannot be loaded: {} (are the CUDA runtime "
        "and cuBLAS libraries installed?)",
        want, found, e ? e : "unknown error");
  }
  auto entry = reinterpret_cast<KvasirCudaPluginEntry>(dlsym(h, KVASIR_CUDA_PLUGIN_ENTRY));
  KV_CHECK(entry, "plan asks for {} but {} has no {} entry point", want, found,
           KVASIR_CUDA_PLUGIN_ENTRY);
  const KvasirCudaPluginV1* api = entry();
  KV_CHECK(api && api->abi_version == KVASIR_CUDA_ABI_VERSION &&
               api->struct_size >= sizeof(KvasirCudaPluginV1),
           "plan asks for {} but {} speaks plugin ABI {} (this binary: {})", want, found,
           api ? api->abi_version : 0u, KVASIR_CUDA_ABI_VERSION);
  const std::string build = api->build ? api->build : "";
  KV_CHECK(build == KVASIR_CUDA_BUILD_TAG,
           "plan asks for {} but {} comes from another build (\"{}\", this binary: \"{}\")", want,
           found, build, KVASIR_CUDA_BUILD_TAG);
  KV_CHECK(api->probe && api->open && api->allocate_kv && api->attach_boundaries && api->forward &&
               api->close,
           "plan asks for {} but {} has an incomplete function table", want, found);
  char err[512] = {};
  const int rc = api->probe(device, err, sizeof err);
  if (rc == int(ErrorCode::kDevice))
    KV_FAIL_CODE(ErrorCode::kDevice,
                 "plan asks for {} but this machine has no usable NVIDIA driver ({})", want,
                 text(err, sizeof err));
  if (rc == int(ErrorCode::kNotFound))
    KV_FAIL_CODE(ErrorCode::kNotFound, "plan asks for {} but {}", want, text(err, sizeof err));
  KV_CHECK_CODE(rc == KVASIR_CUDA_OK, code_of(rc),
                "plan asks for {} but the device check failed: {}", want, text(err, sizeof err));
  std::unique_ptr<CudaPlugin> p(new CudaPlugin);
  p->handle_ = h;
  p->api_ = api;
  p->path_ = found;
  return p;
}

namespace {

// The plugin's stage behind StageBackend: every call goes through the C ABI
// and a non-ok status comes back as a kvasir::Error with its code.
class CudaBackend final : public StageBackend {
 public:
  CudaBackend(ipc::Segment& seg, int stage, int32_t vocab);

  int32_t vocab() const override { return vocab_; }
  int64_t capacity_blocks() const override { return capacity_; }
  bool preload(const PreloadConfig&) override { return true; }  // uploaded when opened
  void allocate_kv(int32_t n_blocks, int32_t n_blocks_swa) override;
  bool attach_boundaries() override;
  void forward(const ForwardBatch& b, const float* in, float* out, float* logits) override;

 private:
  // The plugin's stage, closed when the backend goes (also when the
  // constructor throws after opening it).
  struct Handle {
    const KvasirCudaPluginV1* api = nullptr;
    KvasirCudaStage* st = nullptr;
    ~Handle() {
      if (st) api->close(st);
    }
  };
  const KvasirCudaPluginV1& api() const { return plugin_->api(); }
  const char* device() const { return seg_.params().stages[stage_].device; }
  KvasirCudaStageConfig stage_config() const;
  void fill_sampling(const ForwardBatch& b, KvasirCudaBatch& cb);

  ipc::Segment& seg_;
  const int stage_;
  const int32_t vocab_;
  std::unique_ptr<CudaPlugin> plugin_;
  std::string log_process_;  // KvasirCudaStageConfig::log_process points here
  Handle stage_handle_;
  int64_t capacity_ = 0;
  std::vector<KvasirCudaRow> rows_;       // [max_rows]
  std::vector<KvasirCudaSample> sample_;  // [max_rows]
};

CudaBackend::CudaBackend(ipc::Segment& seg, int stage, int32_t vocab)
    : seg_(seg), stage_(stage), vocab_(vocab) {
  const ipc::SegmentParams& p = seg.params();
  plugin_ = CudaPlugin::load(cuda_ordinal(device()));
  // The process name daemon/main.cpp gives a stage: the plugin's log lines
  // then read like the stage's own.
  log_process_ = fmt::format("kvasird stage {}", stage);
  const KvasirCudaStageConfig cfg = stage_config();
  char err[512] = {};
  stage_handle_.api = &api();
  const int rc = api().open(&cfg, &stage_handle_.st, &capacity_, err, sizeof err);
  KV_CHECK_CODE(rc == KVASIR_CUDA_OK && stage_handle_.st, code_of(rc), "{}: {}", device(),
                text(err, sizeof err));
  KV_CHECK(capacity_ >= 1, "{}: kv.gpu_memory_utilization {} of the free memory holds no KV block",
           device(), p.kv_gpu_util);
  rows_.resize(size_t(p.dims.max_rows));
  sample_.resize(size_t(p.dims.max_rows));
}

KvasirCudaStageConfig CudaBackend::stage_config() const {
  const ipc::SegmentParams& p = seg_.params();
  const ipc::StagePlan& plan = p.stages[stage_];
  KvasirCudaStageConfig cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.device = cuda_ordinal(plan.device);
  cfg.model_path = p.model_path;
  cfg.first_layer = plan.first;
  cfg.last_layer = plan.last;
  cfg.head = stage_ == 0;
  cfg.tail = stage_ == p.n_stages - 1;
  cfg.block_size = p.block_size;
  cfg.max_rows = p.dims.max_rows;
  cfg.max_tokens = p.dims.max_tokens;
  cfg.max_table = p.dims.max_table;
  cfg.inflight = p.dims.inflight;
  cfg.gpu_memory_utilization = p.kv_gpu_util;
  cfg.cuda_graphs = p.cuda_graphs;
  cfg.weight_quant = p.cuda_quantize ? KVASIR_CUDA_QUANT_FP8 : KVASIR_CUDA_QUANT_NONE;
  cfg.log_level = int32_t(log::level());
  cfg.log_process = log_process_.c_str();
  return cfg;
}

void CudaBackend::allocate_kv(int32_t n_blocks, int32_t n_blocks_swa) {
  // The daemon gives GPU stages one group only: it forms a sliding group
  // for all-CPU plans (and the GPU executor refuses sliding-window models).
  KV_CHECK(n_blocks_swa == 0, "a GPU stage holds no sliding-window block group");
  char err[512] = {};
  const int rc = api().allocate_kv(stage_handle_.st, n_blocks, err, sizeof err);
  KV_CHECK_CODE(rc == KVASIR_CUDA_OK, code_of(rc), "{}: {}", device(), text(err, sizeof err));
}

// Device boundaries where a link is CUDA IPC (both ends GPU stages on one
// host: the hidden state never touches host memory); host boundaries
// elsewhere, a link across hosts included (ipc/link_kind.h).
bool CudaBackend::attach_boundaries() {
  const ipc::CudaLinks links = ipc::cuda_links(seg_.params(), stage_);
  const uint32_t* stop = reinterpret_cast<const uint32_t*>(&seg_.header().shutdown);
  char err[512] = {};
  const int rc = api().attach_boundaries(stage_handle_.st, &seg_.cuda_table(), links.import_link,
                                         links.export_link, stop, err, sizeof err);
  if (rc != KVASIR_CUDA_OK && seg_.stopping()) return false;
  KV_CHECK_CODE(rc == KVASIR_CUDA_OK, code_of(rc), "{}: boundaries: {}", device(),
                text(err, sizeof err));
  return true;
}

// Every token's logits ([n_tokens, vocab]) to the selection a CPU tail
// returns: each want_logits row's last 1 + n_draft, in row order. A
// destination never lies past its source, so in order each move is safe.
void pack_selected_logits(const ForwardBatch& b, float* logits, int32_t vocab) {
  int64_t t = 0, k = 0;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    t += b.rows[r].n_tokens;
    if (!b.rows[r].want_logits) continue;
    const int64_t n = 1 + b.rows[r].n_draft;
    if (k != t - n)
      std::memmove(logits + k * vocab, logits + (t - n) * vocab,
                   size_t(n) * size_t(vocab) * sizeof(float));
    k += n;
  }
}

void CudaBackend::forward(const ForwardBatch& b, const float* in, float* out, float* logits) {
  KV_CHECK(b.n_rows >= 0 && b.n_rows <= int32_t(rows_.size()), "batch: {} rows", b.n_rows);
  for (int32_t r = 0; r < b.n_rows; ++r)
    rows_[size_t(r)] = KvasirCudaRow{b.rows[r].pos0, b.rows[r].n_tokens, b.rows[r].block_table,
                                     b.rows[r].n_table, b.rows[r].want_logits ? 1 : 0};
  KvasirCudaBatch cb{};
  cb.batch_id = b.batch_id;
  cb.slot = b.slot;
  cb.rows = rows_.data();
  cb.n_rows = b.n_rows;
  cb.tokens = b.tokens;
  cb.n_tokens = b.n_tokens;
  cb.all_logits = b.all_logits ? 1 : 0;
  cb.hidden_in = in;
  cb.hidden_out = out;
  cb.logits = logits;
  cb.copy_src = b.copy_src;
  cb.copy_dst = b.copy_dst;
  cb.n_copies = b.n_copies;
  // Drafting rows (speculative decoding) need the logits of their last
  // 1 + n_draft tokens, which the plugin's tail cannot select: the batch
  // takes every token's (the agent's buffer holds n_tokens rows then), the
  // host samples all its rows, and the rows the agent expects are packed
  // to the front below.
  const bool drafts = !b.all_logits && std::any_of(b.rows, b.rows + b.n_rows, [](const ForwardRow& r) {
    return r.want_logits && r.n_draft > 0;
  });
  if (drafts) cb.all_logits = 1;
  if (!drafts && stage_ == seg_.params().n_stages - 1 && b.sampling && b.sampled_token &&
      b.sampled_logprob)
    fill_sampling(b, cb);
  char err[512] = {};
  const int rc = api().forward(stage_handle_.st, &cb, err, sizeof err);
  KV_CHECK_CODE(rc == KVASIR_CUDA_OK, code_of(rc), "{}", text(err, sizeof err));
  if (drafts && logits) pack_selected_logits(b, logits, vocab_);
}

// Only ids leave the GPU for rows its sampler covers; penalties (which need
// the sequence's history), top-N logprobs and logit biases are done by the
// agent's sampler on the host, from that row's logits (needs_host_sampler).
// A structured output's mask goes with its row: applied on the device for a
// device row, by the host sampler otherwise.
void CudaBackend::fill_sampling(const ForwardBatch& b, KvasirCudaBatch& cb) {
  for (int32_t r = 0; r < b.n_rows; ++r) {
    const SamplingParams& sp = b.sampling[r];
    const bool dev = b.rows[r].want_logits && !needs_host_sampler(sp) && validate_sampling(sp).ok();
    sample_[size_t(r)] = KvasirCudaSample{dev ? 1 : 0,
                                          sp.temperature,
                                          sp.top_p,
                                          sp.min_p,
                                          sp.top_k,
                                          sp.seed,
                                          uint64_t(b.rows[r].pos0) + uint64_t(b.rows[r].n_tokens),
                                          b.token_masks ? b.token_masks[r] : nullptr};
  }
  cb.mask_words = b.mask_words;
  cb.sample = sample_.data();
  cb.token_out = b.sampled_token;
  cb.logprob_out = b.sampled_logprob;
}

}  // namespace

std::unique_ptr<StageBackend> make_cuda_backend(ipc::Segment& seg, int stage, int32_t vocab) {
  return std::make_unique<CudaBackend>(seg, stage, vocab);
}

}  // namespace kvasir
