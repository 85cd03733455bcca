// The process-wide table of weights kept repacked 16 rows a block
// (matmul.h keep_rows16), found by w.data: type and shape checked, counted
// so that two executors over one model each keep and drop.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

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
int g_per_type[4] = {};       // kept weights of each kTypes entry (under g_mu)
std::atomic<uint32_t> g_types{0};  // bit i: some weight of kTypes[i] kept
constexpr DType kTypes[4] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0};

int type_index(DType t) {
  for (int i = 0; i < 4; ++i)
    if (kTypes[i] == t) return i;
  return -1;
}

// A weight of type t added to (+1) or erased from (-1) the table; g_mu held.
void count_type(DType t, int delta) {
  const int i = type_index(t);
  if (i < 0) return;
  g_per_type[i] += delta;
  uint32_t mask = 0;
  for (int k = 0; k < 4; ++k) mask |= g_per_type[k] > 0 ? 1u << k : 0u;
  g_types.store(mask, std::memory_order_release);
}

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
  if (added) g_count.fetch_add(1, std::memory_order_relaxed), count_type(w.type, +1);
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
  count_type(w.type, -1);
  g_count.fetch_sub(1, std::memory_order_relaxed);
}

std::vector<DType> detail::rows16_kept_types() {
  const uint32_t mask = g_types.load(std::memory_order_acquire);
  std::vector<DType> out;
  for (int i = 0; i < 4; ++i)
    if (mask & (1u << i)) out.push_back(kTypes[i]);
  return out;
}

std::shared_ptr<const detail::Rows16Kept> detail::rows16_find(const TensorView& w) {
  if (g_count.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_table.find(w.data);
  if (it == g_table.end() || !same_weight(it->second.copy->view, w)) return nullptr;
  return it->second.copy;
}

}  // namespace kvasir::cpu
