// The process-wide table of weights kept repacked 16 rows a block
// (matmul.h keep_rows16), found by w.data: type and shape checked, counted
// so that two executors over one model each keep and drop.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rows16.h"

namespace kvasir::cpu {
namespace {

struct Kept {
  std::shared_ptr<const detail::Rows16Kept> copy;
  int refs = 0;  // keep_rows16 calls not yet dropped
};
std::mutex g_mu;
std::unordered_map<const void*, Kept> g_table;  // by w.data
std::atomic<int> g_count{0};  // g_table.size(): a lookup with nothing kept takes no lock

bool same_weight(const Rows16View& v, const TensorView& w) {
  return v.type == w.type && v.rows == w.rows() && v.cols == w.cols();
}

}  // namespace

bool rows16_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("KVASIR_ROWS16");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

bool keep_rows16(const TensorView& w) {
  if (!rows16_enabled() || w.data == nullptr || !rows16_supports(w.type, w.rows(), w.cols()))
    return false;
  const auto rb = dtype_row_bytes(w.type, w.cols());
  KV_CHECK(rb.has_value() && w.nbytes >= *rb * uint64_t(w.rows()),
           "rows16: tensor holds {} bytes, shape [{} x {}] {} needs more", w.nbytes, w.rows(),
           w.cols(), dtype_name(w.type));
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_table.find(w.data); it != g_table.end()) {
      if (!same_weight(it->second.copy->view, w)) return false;
      it->second.refs++;
      return true;
    }
  }
  auto k = std::make_shared<detail::Rows16Kept>();
  k->bytes = repack16(w.type, w.data, w.rows(), w.cols());  // outside the lock
  k->view = {w.type, w.rows(), w.cols(), k->bytes.data()};
  std::lock_guard<std::mutex> lock(g_mu);
  auto [it, added] = g_table.emplace(w.data, Kept{std::move(k), 0});
  if (added) g_count.fetch_add(1, std::memory_order_relaxed);
  if (!same_weight(it->second.copy->view, w)) return false;  // another shape won the race
  it->second.refs++;
  return true;
}

void drop_rows16(const TensorView& w) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_table.find(w.data);
  if (it == g_table.end() || !same_weight(it->second.copy->view, w) || --it->second.refs > 0)
    return;
  g_table.erase(it);  // a matmul still running holds its own reference
  g_count.fetch_sub(1, std::memory_order_relaxed);
}

std::shared_ptr<const detail::Rows16Kept> detail::rows16_find(const TensorView& w) {
  if (g_count.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_table.find(w.data);
  if (it == g_table.end() || !same_weight(it->second.copy->view, w)) return nullptr;
  return it->second.copy;
}

}  // namespace kvasir::cpu
