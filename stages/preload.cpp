#include "stages/preload.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace kvasir {

namespace {

// Reads one byte per page; the sum keeps the compiler from dropping the reads.
uint64_t touch(const TensorView& t) {
  if (!t.data || t.nbytes == 0) return 0;
  static const size_t page = size_t(sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096);
  const auto* p = static_cast<const volatile unsigned char*>(t.data);
  // Ask for read-ahead of the whole range first (page-aligned start; advisory,
  // so a failure changes nothing).
  auto addr = reinterpret_cast<uintptr_t>(t.data);
  uintptr_t start = addr & ~uintptr_t(page - 1);
  madvise(reinterpret_cast<void*>(start), size_t(addr - start) + t.nbytes, MADV_WILLNEED);
  uint64_t sum = 0;
  for (uint64_t off = 0; off < t.nbytes; off += page) sum += p[off];
  sum += p[t.nbytes - 1];
  return sum;
}

}  // namespace

bool preload_slice(const ModelFile& model, const SliceSpec& slice, const PreloadConfig& cfg) {
  // Collect first, so the total is known before any page is read.
  std::vector<const TensorView*> extra;  // embeddings / output head
  if (slice.head) extra.push_back(&model.get(kTokenEmbdTensor));
  if (slice.tail) {
    extra.push_back(&model.get(kOutputNormTensor));
    const TensorView* out = model.find(kOutputTensor);
    if (!out) out = &model.get(kTokenEmbdTensor);  // tied embeddings
    if (std::find(extra.begin(), extra.end(), out) == extra.end()) extra.push_back(out);
  }
  // An expert group's process pages in only the experts it holds.
  const size_t efirst = slice.experts_first < 0 ? 0 : size_t(slice.experts_first);
  const size_t elast = slice.experts_first < 0 ? SIZE_MAX : size_t(slice.experts_last);
  std::vector<std::vector<const TensorView*>> layers;
  for (int il = slice.first_layer; il <= slice.last_layer; ++il) {
    std::vector<const TensorView*> ts;
    const LayerTensorNames names = layer_tensor_names(il);
    for (const std::string& n : names.all()) {
      const TensorView* t = slice.experts_only ? nullptr : model.find(n);
      if (t) ts.push_back(t);
    }
    for (const std::string& n : names.expert_stacks())
      if (const std::vector<TensorView>* experts = model.find_experts(n))
        for (size_t e = efirst; e < experts->size() && e <= elast; ++e)
          ts.push_back(&(*experts)[e]);
    layers.push_back(std::move(ts));
  }
  PreloadProgress pr;
  for (auto* t : extra) pr.bytes_total += t->nbytes;
  for (auto& ts : layers)
    for (auto* t : ts) pr.bytes_total += t->nbytes;
  auto report = [&] { return !cfg.progress || cfg.progress(pr); };
  if (!report()) return false;

  volatile uint64_t sink = 0;
  for (auto* t : extra) {
    sink = sink + touch(*t);
    pr.bytes_done += t->nbytes;
  }
  for (auto& ts : layers) {
    for (auto* t : ts) {
      sink = sink + touch(*t);
      pr.bytes_done += t->nbytes;
    }
    if (cfg.delay_ms_per_layer > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(cfg.delay_ms_per_layer));
    pr.layers_done++;
    if (!report()) return false;
  }
  return true;
}

}  // namespace kvasir
