// The per-kernel level choice (simd.h): which SIMD level each matmul kernel
// (weight type × rows class) runs at.
//
// The widest level is not always the fastest: on the first AVX-512 machine
// the 512-bit quantised dots lost to the AVX2 ones (docs/kernels.md). In
// auto mode each kernel's candidate levels are timed once, on a synthetic
// weight with the columns of the first call that needs the kernel, and the
// fastest is kept for the life of the process. Timing: the calling thread's
// CPU time (a shared machine deschedules threads; that time is not counted),
// rounds interleaved across the candidates so that a slow period hits them
// all, the best round of each kept. Only levels of one numerics family
// (simd.h) are timed against each other — the widest family the CPU has —
// so the choice changes speed, never bits: a timed choice across families
// could fall either way between two processes and part their outputs.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <ctime>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "base/half.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd.h"

namespace kvasir::cpu {
namespace {

constexpr DType kComputable[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                 DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4,
                                 DType::F16,  DType::BF16, DType::F32};
constexpr unsigned kTypeSlots = 40;  // GGML numbers, MXFP4 (39) the highest computable

struct Slot {
  std::atomic<int> level{-1};  // -1: not chosen
  std::atomic<bool> amx{false};
  std::atomic<int> amx_packed_rows{0};
  KernelChoice choice;
};

std::mutex g_mu;
Slot g_slots[kTypeSlots][kRowsClasses];
std::atomic<uint64_t> g_generation{0};  // simd_choices_generation()

// The batch kernel of a type at a level (K-quant or MXFP4), as an address
// to compare; nullptr where none.
const void* batch_kernel_of(DType t, SimdLevel level) {
  if (t == DType::MXFP4) return reinterpret_cast<const void*>(detail::mxfp4_batch_kernel(level));
  return reinterpret_cast<const void*>(detail::kquant_batch_kernel(t, level));
}

// The lowest level the CPU has that runs the same kernels as `level` for
// that rows class (a batch: the tiles and the K-quant or MXFP4 batch
// kernel, which may differ where the tiles do not: their vpdpbusd copies).
SimdLevel path_of(DType t, SimdLevel level, RowsClass rows) {
  const detail::DotFn fn = detail::dot_kernel(t, level);
  const bool batch = rows == RowsClass::kBatch;
  const void* kb = batch ? batch_kernel_of(t, level) : nullptr;
  for (int l = 0; l < int(level); ++l)
    if (simd_level_available(SimdLevel(l)) && detail::dot_kernel(t, SimdLevel(l)) == fn &&
        (!batch || batch_kernel_of(t, SimdLevel(l)) == kb))
      return SimdLevel(l);
  return level;
}

// Levels up to cap that the CPU has and that run a kernel of their own.
std::vector<SimdLevel> candidates(DType t, SimdLevel cap, RowsClass rows) {
  std::vector<SimdLevel> c;
  for (int l = int(SimdLevel::kAvx2); l <= int(cap); ++l) {
    const auto level = SimdLevel(l);
    if (simd_level_available(level) && path_of(t, level, rows) == level) c.push_back(level);
  }
  if (c.empty()) c.push_back(SimdLevel::kScalar);
  return c;
}

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Deterministic bytes (a 64-bit LCG).
struct Lcg {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(s >> 33);
  }
};

// A weight of the type with random quants and small, sane scales (no
// subnormal products; the integer work does not depend on the values).
std::vector<uint8_t> probe_weight(DType t, int64_t rows, int64_t cols) {
  const auto& info = dtype_info(t);
  std::vector<uint8_t> bytes(*dtype_row_bytes(t, cols) * size_t(rows));
  Lcg rng;
  for (auto& b : bytes) b = uint8_t(rng.next());
  const size_t bb = size_t(info.bytes);
  auto put = [&](size_t at, uint16_t h) { std::memcpy(&bytes[at], &h, 2); };
  if (info.block == 1) {
    for (size_t o = 0; o < bytes.size(); o += bb) {
      if (t == DType::F32) {
        const float f = 0.01f;
        std::memcpy(&bytes[o], &f, 4);
      } else {
        put(o, t == DType::F16 ? f32_to_fp16(0.01f) : f32_to_bf16(0.01f));
      }
    }
  } else if (t == DType::MXFP4) {
    for (size_t o = 0; o < bytes.size(); o += bb) bytes[o] = 120;  // E8M0: 2^-7
  } else {
    const uint16_t h = f32_to_fp16(info.block == 256 ? 0.001f : 0.01f);
    for (size_t o = 0; o < bytes.size(); o += bb) {
      put(o + (t == DType::Q6_K ? 208 : 0), h);
      if (t == DType::Q4_1 || t == DType::Q4_K || t == DType::Q5_K) put(o + 2, h);
    }
  }
  return bytes;
}

// AMX-INT8 (amx.h), batch kernels: never run on AMX hardware by its
// authors, so first a self-check — the tiles' result on the probe against
// the chosen level's (the same integer block sums: only f32 order differs;
// the bound catches a wrong layout or instruction, not rounding) — and only
// then timed against that level, the same rounds. A failed check turns AMX
// off for the process and says why (simd_report).
void try_amx(KernelChoice& c, const TensorView& w, const std::vector<float>& x,
             std::vector<float>& y) {
  if (!detail::amx_supports(c.type) || !detail::amx_usable()) return;
  std::vector<float> ya(y.size());
  detail::matmul_at(w, x.data(), c.probe_n, y.data(), nullptr, c.level);
  try {
    detail::amx_matmul(w, x.data(), c.probe_n, ya.data(), nullptr, false);
  } catch (const std::exception& e) {
    detail::amx_disable(fmt::format("self-check threw: {}", e.what()));
    return;
  }
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    max_ref = std::max(max_ref, double(std::fabs(y[i])));
    max_diff = std::max(max_diff, double(std::fabs(ya[i] - y[i])));
  }
  if (!(max_diff <= 1e-4 * max_ref + 1e-6)) {
    detail::amx_disable(fmt::format(
        "self-check on {} {}x{}: max |amx - {}| = {:.3g} (max |y| {:.3g})", dtype_name(c.type),
        c.probe_rows, c.probe_cols, simd_level_name(c.level), max_diff, max_ref));
    return;
  }
  double best_amx = 1e30, best_level = 1e30;
  for (int r = 0; r < c.rounds; ++r) {
    double t0 = thread_seconds();
    detail::amx_matmul(w, x.data(), c.probe_n, ya.data(), nullptr, false);
    best_amx = std::min(best_amx, thread_seconds() - t0);
    t0 = thread_seconds();
    detail::matmul_at(w, x.data(), c.probe_n, y.data(), nullptr, c.level);
    best_level = std::min(best_level, thread_seconds() - t0);
  }
  c.amx_us = best_amx * 1e6;
  c.amx = best_amx < best_level * (1.0 - kFamilyMargin);  // another f32 order: as a family
  // Packed once (a weight its owner keeps): the probe's 16 rows are one
  // tile, which costs the same for fewer rows while `level` costs in
  // proportion, so the tiles win from 16 x packed / level rows.
  if (!detail::amx_keep_packed(w, uint64_t(1) << 30)) return;  // 8 strips of the probe
  const auto kept = detail::amx_find_packed(w);
  double best_packed = 1e30;
  for (int r = 0; r < c.rounds; ++r) {
    const double t0 = thread_seconds();
    detail::amx_matmul(w, x.data(), c.probe_n, ya.data(), nullptr, false, kept.get());
    best_packed = std::min(best_packed, thread_seconds() - t0);
  }
  detail::amx_drop_packed(w);
  c.amx_packed_us = best_packed * 1e6;
  const double from = double(c.probe_n) * best_packed / (best_level * (1.0 - kFamilyMargin));
  if (from <= double(c.probe_n))
    c.amx_packed_rows = int(std::max<double>(std::ceil(from), double(detail::kMaxNX)));
}

KernelChoice measure(DType t, RowsClass rc, int64_t cols, const std::vector<SimdLevel>& cands) {
  KernelChoice c;
  c.type = t;
  c.rows = rc;
  c.reason = ChoiceReason::kMeasured;
  const int64_t block = dtype_info(t).block == 256 ? 256 : 32;
  c.probe_cols = std::max<int64_t>((cols + block - 1) / block * block, 512);
  c.probe_n = rc == RowsClass::kDecode ? 1 : 16;
  c.probe_rows = rc == RowsClass::kDecode ? 256 : 128;
  c.rounds = rc == RowsClass::kDecode ? 15 : 11;
  const auto bytes = probe_weight(t, c.probe_rows, c.probe_cols);
  TensorView w;
  w.type = t;
  w.n_dims = 2;
  w.ne[0] = c.probe_cols;
  w.ne[1] = c.probe_rows;
  w.data = bytes.data();
  w.nbytes = bytes.size();
  std::vector<float> x(size_t(c.probe_n * c.probe_cols)), y(size_t(c.probe_n * c.probe_rows));
  Lcg rng;
  for (auto& v : x) v = float(int(rng.next() % 2001) - 1000) * 1e-3f;
  for (SimdLevel l : cands) detail::matmul_at(w, x.data(), c.probe_n, y.data(), nullptr, l);
  std::vector<double> best(cands.size(), 1e30);
  for (int r = 0; r < c.rounds; ++r)
    for (size_t i = 0; i < cands.size(); ++i) {
      const double t0 = thread_seconds();
      detail::matmul_at(w, x.data(), c.probe_n, y.data(), nullptr, cands[i]);
      best[i] = std::min(best[i], thread_seconds() - t0);
    }
  // The candidates are of one family (bit-identical results): the
  // fastest, a wider level only if it wins by kWinMargin.
  size_t chosen = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    c.us[int(cands[i])] = best[i] * 1e6;
    if (best[i] < best[chosen] * (1.0 - kWinMargin)) chosen = i;
  }
  c.level = cands[chosen];
  if (rc == RowsClass::kBatch) try_amx(c, w, x, y);
  return c;
}

KernelChoice forced_choice(DType t, RowsClass rc) {
  KernelChoice c;
  c.type = t;
  c.rows = rc;
  c.level = simd_level();
  c.reason = ChoiceReason::kForced;
  return c;
}

}  // namespace

SimdLevel detail::kernel_level(DType type, RowsClass rows, int64_t cols) {
  if (simd_level_forced() || unsigned(type) >= kTypeSlots) return simd_level();
  Slot& slot = g_slots[unsigned(type)][int(rows)];
  const int l = slot.level.load(std::memory_order_acquire);
  if (l >= 0) return SimdLevel(l);
  return simd_kernel_choice(type, rows, cols).level;
}

void detail::forget_kernel_choices() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& per_type : g_slots)
    for (auto& slot : per_type) {
      slot.level.store(-1, std::memory_order_release);
      slot.amx.store(false, std::memory_order_release);
      slot.amx_packed_rows.store(0, std::memory_order_release);
    }
  g_generation.fetch_add(1, std::memory_order_release);
}

KernelChoice simd_kernel_choice(DType type, RowsClass rows, int64_t cols) {
  if (simd_level_forced()) return forced_choice(type, rows);
  KernelChoice pending;
  pending.type = type;
  pending.rows = rows;
  pending.level = simd_level();
  if (unsigned(type) >= kTypeSlots || detail::dot_kernel(type, SimdLevel::kScalar) == nullptr)
    return pending;
  Slot& slot = g_slots[unsigned(type)][int(rows)];
  std::lock_guard<std::mutex> lock(g_mu);
  if (slot.level.load(std::memory_order_relaxed) >= 0) return slot.choice;
  // One numerics family: the widest the CPU has, or the one the type's
  // other rows class already runs (adopted from a predecessor,
  // simd_adopt_choices). A token's logits must not depend on whether its
  // position was computed alone (a decode) or with others (a prompt chunk,
  // a recompute after preemption, a speculative row verifying drafts), nor
  // on which process computed it, or greedy outputs part at near-ties.
  auto cands = candidates(type, simd_level(), rows);
  int family = simd_family(cands.back());
  for (int r = 0; r < kRowsClasses; ++r) {
    const int other = g_slots[unsigned(type)][r].level.load(std::memory_order_relaxed);
    if (r != int(rows) && other >= 0) family = simd_family(SimdLevel(other));
  }
  std::vector<SimdLevel> same;
  for (SimdLevel l : cands)
    if (simd_family(l) == family) same.push_back(l);
  if (!same.empty()) cands = std::move(same);
  const bool amx_candidate =
      rows == RowsClass::kBatch && detail::amx_supports(type) && detail::amx_cpu_has();
  if (cands.size() == 1 && !amx_candidate) {
    slot.choice = KernelChoice{};
    slot.choice.type = type;
    slot.choice.rows = rows;
    slot.choice.level = cands[0];
    slot.choice.reason = ChoiceReason::kOnlyPath;
  } else if (cols > 0) {
    slot.choice = measure(type, rows, cols, cands);
  } else {
    return pending;
  }
  slot.amx.store(slot.choice.amx, std::memory_order_release);
  slot.amx_packed_rows.store(slot.choice.amx_packed_rows, std::memory_order_release);
  slot.level.store(int(slot.choice.level), std::memory_order_release);
  g_generation.fetch_add(1, std::memory_order_release);
  return slot.choice;
}

bool detail::kernel_amx(DType type) {
  if (simd_level_forced() || unsigned(type) >= kTypeSlots) return false;
  return g_slots[unsigned(type)][int(RowsClass::kBatch)].amx.load(std::memory_order_acquire);
}

int detail::kernel_amx_packed_rows(DType type) {
  if (simd_level_forced() || unsigned(type) >= kTypeSlots) return 0;
  return g_slots[unsigned(type)][int(RowsClass::kBatch)].amx_packed_rows.load(
      std::memory_order_acquire);
}

std::vector<KernelChoice> simd_kernel_choices() {
  std::vector<KernelChoice> out;
  const bool forced = simd_level_forced();
  for (DType t : kComputable)
    for (int r = 0; r < kRowsClasses; ++r) {
      if (forced) {
        out.push_back(forced_choice(t, RowsClass(r)));
        continue;
      }
      Slot& slot = g_slots[unsigned(t)][r];
      std::lock_guard<std::mutex> lock(g_mu);
      if (slot.level.load(std::memory_order_relaxed) >= 0) out.push_back(slot.choice);
    }
  return out;
}

namespace {

// One summary entry, "q4_1/batch:avx512_vnni[+amx][+pN]", as a choice;
// false if it names no kernel this build has.
bool parse_entry(std::string_view e, KernelChoice& c) {
  const size_t slash = e.find('/'), colon = e.find(':');
  if (slash == std::string_view::npos || colon == std::string_view::npos || colon < slash)
    return false;
  const std::string_view type = e.substr(0, slash), rows = e.substr(slash + 1, colon - slash - 1);
  std::string_view level = e.substr(colon + 1);
  if (const size_t p = level.rfind("+p"); p != std::string_view::npos) {
    int from = 0;
    for (char ch : level.substr(p + 2)) {
      if (ch < '0' || ch > '9' || from > 64) return false;
      from = from * 10 + (ch - '0');
    }
    if (from < detail::kMaxNX || from > detail::kAmxRows) return false;
    c.amx_packed_rows = from;
    level = level.substr(0, p);
  }
  c.amx = level.size() > 4 && level.substr(level.size() - 4) == "+amx";
  if (c.amx) level.remove_suffix(4);
  bool found = false;
  for (DType t : kComputable)
    if (simd_type_name(t) == type) c.type = t, found = true;
  if (!found) return false;
  if (rows == rows_class_name(RowsClass::kDecode))
    c.rows = RowsClass::kDecode;
  else if (rows == rows_class_name(RowsClass::kBatch))
    c.rows = RowsClass::kBatch;
  else
    return false;
  for (int l = 0; l < kSimdLevels; ++l)
    if (level == simd_level_name(SimdLevel(l))) {
      c.level = SimdLevel(l);
      return true;
    }
  return false;
}

}  // namespace

int simd_adopt_choices(std::string_view summary) {
  if (simd_level_forced()) return 0;
  int adopted = 0;
  while (!summary.empty()) {
    const size_t sp = summary.find(' ');
    const std::string_view e = summary.substr(0, sp);
    summary = sp == std::string_view::npos ? std::string_view() : summary.substr(sp + 1);
    KernelChoice c;
    if (!parse_entry(e, c) || int(c.level) > int(simd_level()) || !simd_level_available(c.level) ||
        path_of(c.type, c.level, c.rows) != c.level)
      continue;
    if ((c.amx || c.amx_packed_rows > 0) &&
        !(c.rows == RowsClass::kBatch && detail::amx_usable() && detail::amx_supports(c.type)))
      continue;
    Slot& slot = g_slots[unsigned(c.type)][int(c.rows)];
    std::lock_guard<std::mutex> lock(g_mu);
    if (slot.level.load(std::memory_order_relaxed) >= 0) continue;
    c.reason = ChoiceReason::kInherited;
    slot.choice = c;
    slot.amx.store(c.amx, std::memory_order_release);
    slot.amx_packed_rows.store(c.amx_packed_rows, std::memory_order_release);
    slot.level.store(int(c.level), std::memory_order_release);
    g_generation.fetch_add(1, std::memory_order_release);
    adopted++;
  }
  return adopted;
}

uint64_t simd_choices_generation() { return g_generation.load(std::memory_order_acquire); }

const char* rows_class_name(RowsClass rows) {
  return rows == RowsClass::kDecode ? "decode" : "batch";
}

const char* choice_reason_name(ChoiceReason reason) {
  switch (reason) {
    case ChoiceReason::kForced:
      return "forced";
    case ChoiceReason::kOnlyPath:
      return "only path";
    case ChoiceReason::kMeasured:
      return "measured";
    case ChoiceReason::kPending:
      return "not chosen yet";
    case ChoiceReason::kInherited:
      return "inherited";
  }
  return "?";
}

std::string KernelChoice::describe() const {
  std::string s =
      fmt::format("{} {}: {}", dtype_name(type), rows_class_name(rows), simd_level_name(level));
  const SimdLevel path = reason == ChoiceReason::kPending ? level : path_of(type, level, rows);
  if (path != level) s += fmt::format(" (runs the {} kernel)", simd_level_name(path));
  s += fmt::format(" [{}", choice_reason_name(reason));
  if (reason == ChoiceReason::kMeasured) {
    s += fmt::format(" on {}x{}, n={}, best of {}:", probe_rows, probe_cols, probe_n, rounds);
    for (int l = 0; l < kSimdLevels; ++l)
      if (us[l] >= 0) s += fmt::format(" {} {:.1f} us", simd_level_name(SimdLevel(l)), us[l]);
    if (amx_us >= 0) s += fmt::format(" amx-int8 {:.1f} us", amx_us);
    if (amx_packed_us >= 0) s += fmt::format(" amx-int8 packed {:.1f} us", amx_packed_us);
  }
  s += "]";
  if (amx) s += fmt::format(" + amx-int8 tiles from {} rows", detail::kAmxRows);
  if (amx_packed_rows > 0)
    s += fmt::format(" + amx-int8 tiles from {} rows for weights kept packed", amx_packed_rows);
  return s;
}

std::string simd_report() {
  std::string s = fmt::format("cpu: {}\nsimd levels:", cpu_model_name());
  std::string lacks;
  for (int l = 0; l < kSimdLevels; ++l) {
    const auto level = SimdLevel(l);
    if (simd_level_available(level)) {
      s += fmt::format(" {}", simd_level_name(level));
      if (level == SimdLevel::kAvxVnni) s += detail::cpu_has_vex_vnni() ? "(vex)" : "(evex)";
    } else {
      lacks += fmt::format("{}{} ({})", lacks.empty() ? "" : ", ", simd_level_name(level),
                           simd_level_flags(level));
    }
  }
  if (!lacks.empty()) s += fmt::format("; lacks {}", lacks);
  s += fmt::format("\namx-int8: {}\n", amx_status());
  if (simd_level_forced())
    s += fmt::format("mode: forced to {} (KVASIR_SIMD or a test); nothing measured\n",
                     simd_level_name(simd_level()));
  else
    s += fmt::format("mode: auto (a level per kernel, measured on first use; up to {})\n",
                     simd_level_name(simd_level()));
  for (const auto& c : simd_kernel_choices()) s += "  " + c.describe() + "\n";
  return s;
}

}  // namespace kvasir::cpu
