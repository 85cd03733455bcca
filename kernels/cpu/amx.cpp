// AMX-INT8 matmul for quantised weights (amx.h). Written without AMX
// hardware, since run on it (amx.h): the driver below is shared by the real
// tiles and an emulation of them in C++, which the tests check against the
// scalar matmul on every machine.
//
// The tile instructions are written as inline assembly, not with GCC's
// <amxtileintrin.h>: up to GCC 12 its _tile_loadconfig declares the 64-byte
// configuration as an 8-byte memory operand ("m" (*(const void **)config)),
// so stores that fill the rest of a configuration on the stack may be
// dropped by the optimiser, and ldtilecfg then faults (#GP) on garbage — the
// crash of pip-built llama.cpp on AMX machines (docs/kernels.md). Here the
// operand is the whole struct, the configuration is a constant, and every
// tile load/store clobbers memory.
#include "kernels/cpu/amx.h"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "base/half.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/simd.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KV_AMX_X86 1
#endif

namespace kvasir::cpu {
namespace detail {
namespace {

constexpr int kTile = 16;  // weight rows and activation rows per tile
constexpr int kK = 32;     // bytes of K per tile product: one block

// ---- layouts ----------------------------------------------------------------

// One block of a 16-row weight strip: A (16 rows × 32 bytes of quants), and
// per row the block's scale d_w and offset factor m_w (0 for Q8_0).
struct alignas(64) WBlock {
  uint8_t a[kTile][kK];
  float d[kTile];
  float m[kTile];
};

// One block of a 16-row activation tile: B in the tiles' layout (row kr,
// bytes 4m..4m+3 = activation row m's values 4kr..4kr+3), and per row d_x
// and s_x (zero for padding rows).
struct alignas(64) ABlock {
  int8_t b[kK / 4][4 * kTile];
  float d[kTile];
  float s[kTile];
};

bool a_is_signed(DType t) {
  return t == DType::Q8_0;
}

// Weight rows r0.. (up to 16; the rest zero) of w as nb WBlocks.
void pack_weights(const TensorView& w, uint64_t row_bytes, int64_t r0, WBlock* out) {
  const int64_t cols = w.cols(), nb = cols / kK, rows = w.rows();
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t b = 0; b < nb; ++b) std::memset(static_cast<void*>(&out[b]), 0, sizeof(WBlock));
  for (int r = 0; r < kTile && r0 + r < rows; ++r) {
    const uint8_t* row = base + uint64_t(r0 + r) * row_bytes;
    switch (w.type) {
      case DType::Q8_0:
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = row + b * 34;
          std::memcpy(out[b].a[r], blk + 2, kK);
          out[b].d[r] = fp16_to_f32(load_u16(blk));
        }
        break;
      case DType::Q4_0:
      case DType::Q4_1: {
        const bool q41 = w.type == DType::Q4_1;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = row + b * (q41 ? 20 : 18);
          const uint8_t* qs = blk + (q41 ? 4 : 2);
          for (int i = 0; i < kK / 2; ++i) {
            out[b].a[r][i] = qs[i] & 0x0f;
            out[b].a[r][i + kK / 2] = qs[i] >> 4;
          }
          const float d = fp16_to_f32(load_u16(blk));
          out[b].d[r] = d;
          out[b].m[r] = q41 ? fp16_to_f32(load_u16(blk + 2)) : -8.f * d;
        }
        break;
      }
      default:
        KV_FAIL("amx: no path for {}", dtype_name(w.type));
    }
  }
}

// Activation rows m0.. (up to 16; the rest zero) of the quantised x.
void pack_activations(const BlockQ8x* xq, int64_t nb, int64_t n, int64_t m0, ABlock* out) {
  for (int64_t b = 0; b < nb; ++b) {
    ABlock& o = out[b];
    std::memset(static_cast<void*>(&o), 0, sizeof(ABlock));
    for (int m = 0; m < kTile && m0 + m < n; ++m) {
      const BlockQ8x& xb = xq[(m0 + m) * nb + b];
      for (int kr = 0; kr < kK / 4; ++kr) std::memcpy(&o.b[kr][4 * m], xb.q + 4 * kr, 4);
      o.d[m] = xb.d;
      o.s[m] = xb.s;
    }
  }
}

// ---- the tiles, emulated ----------------------------------------------------

// C[r][m] = Σ_k A[r][k] · B[k / 4][4m + k % 4], A signed or unsigned bytes, B
// signed: what TDPBSSD / TDPBUSD compute into a zeroed tile.
void tile_product_emulated(const WBlock& a, const ABlock& b, bool a_signed,
                           int32_t c[kTile][kTile]) {
  for (int r = 0; r < kTile; ++r)
    for (int m = 0; m < kTile; ++m) {
      int32_t sum = 0;
      for (int k = 0; k < kK; ++k) {
        const int32_t av = a_signed ? int32_t(int8_t(a.a[r][k])) : int32_t(a.a[r][k]);
        sum += av * int32_t(b.b[k / 4][4 * m + k % 4]);
      }
      c[r][m] = sum;
    }
}

// acc[r][m] += C[r][m]·(d_w[r]·d_x[m]) + m_w[r]·s_x[m], as two fused
// multiply-adds in this order (the AVX-512 version does the same).
void scale_add_scalar(const int32_t c[kTile][kTile], const WBlock& a, const ABlock& b,
                      float acc[kTile][kTile]) {
  for (int r = 0; r < kTile; ++r)
    for (int m = 0; m < kTile; ++m) {
      const float v = std::fma(float(c[r][m]), a.d[r] * b.d[m], acc[r][m]);
      acc[r][m] = std::fma(a.m[r], b.s[m], v);
    }
}

// ---- the tiles, real --------------------------------------------------------
#ifdef KV_AMX_X86

// ldtilecfg's 64-byte operand (Intel SDM vol. 2, LDTILECFG).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);
static_assert(offsetof(TileConfig, colsb) == 16 && offsetof(TileConfig, rows) == 48);

// tmm0 = A (16 × 32 bytes), tmm1 = B (8 × 64 bytes), tmm2 = C (16 × 64).
constexpr TileConfig kConfig = {1, 0, {}, {kK, 4 * kTile, 4 * kTile}, {kTile, kK / 4, kTile}};

inline void tiles_configure() {
  asm volatile("ldtilecfg %0" : : "m"(kConfig) : "memory");
}

inline void tiles_release() {
  asm volatile("tilerelease" ::: "memory");
}

inline void tile_product_amx(const WBlock& a, const ABlock& b, bool a_signed,
                             int32_t c[kTile][kTile]) {
  const int64_t sa = kK, sb = 4 * kTile, sc = 4 * kTile;
  // AT&T order: tdpb?sd src2 (B), src1 (A), dst (C).
  if (a_signed)
    asm volatile(
        "tilezero %%tmm2\n\t"
        "tileloadd (%[a],%[sa],1), %%tmm0\n\t"
        "tileloadd (%[b],%[sb],1), %%tmm1\n\t"
        "tdpbssd %%tmm1, %%tmm0, %%tmm2\n\t"
        "tilestored %%tmm2, (%[c],%[sc],1)"
        :
        : [a] "r"(a.a), [b] "r"(b.b), [c] "r"(c), [sa] "r"(sa), [sb] "r"(sb), [sc] "r"(sc)
        : "memory");
  else
    asm volatile(
        "tilezero %%tmm2\n\t"
        "tileloadd (%[a],%[sa],1), %%tmm0\n\t"
        "tileloadd (%[b],%[sb],1), %%tmm1\n\t"
        "tdpbusd %%tmm1, %%tmm0, %%tmm2\n\t"
        "tilestored %%tmm2, (%[c],%[sc],1)"
        :
        : [a] "r"(a.a), [b] "r"(b.b), [c] "r"(c), [sa] "r"(sa), [sb] "r"(sb), [sc] "r"(sc)
        : "memory");
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl"))) void scale_add_avx512(
    const int32_t c[kTile][kTile], const WBlock& a, const ABlock& b, float acc[kTile][kTile]) {
  const __m512 dx = _mm512_load_ps(b.d), sx = _mm512_load_ps(b.s);
  for (int r = 0; r < kTile; ++r) {
    const __m512 cv = _mm512_cvtepi32_ps(_mm512_loadu_si512(c[r]));
    __m512 v =
        _mm512_fmadd_ps(cv, _mm512_mul_ps(_mm512_set1_ps(a.d[r]), dx), _mm512_loadu_ps(acc[r]));
    v = _mm512_fmadd_ps(_mm512_set1_ps(a.m[r]), sx, v);
    _mm512_storeu_ps(acc[r], v);
  }
}
#pragma GCC diagnostic pop

#endif  // KV_AMX_X86

// ---- the driver -------------------------------------------------------------

// Strips [s0, s1) of y. packed: every strip's WBlocks (nb per strip, from
// keep_packed), or null to pack each strip here.
}  // namespace

// One weight in the tiles' layout (amx_keep_packed).
struct AmxPacked {
  DType type;
  int64_t rows, cols;
  std::vector<WBlock> blocks;  // [strips][nb]
};

namespace {

template <bool Emulate>
void strip_range(const TensorView& w, uint64_t row_bytes, const WBlock* packed, const ABlock* act,
                 int64_t n, int64_t nb, float* y, int64_t s0, int64_t s1) {
  thread_local std::vector<WBlock> wbuf;  // grow-only
  if (!packed && wbuf.size() < size_t(nb)) wbuf.resize(size_t(nb));
  const int64_t rows = w.rows(), nt = (n + kTile - 1) / kTile;
  const bool a_signed = a_is_signed(w.type);
  alignas(64) int32_t c[kTile][kTile];
  alignas(64) float acc[kTile][kTile];
#ifdef KV_AMX_X86
  if constexpr (!Emulate) tiles_configure();
#endif
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t r0 = s * kTile;
    const WBlock* wb = packed ? packed + s * nb : wbuf.data();
    if (!packed) pack_weights(w, row_bytes, r0, wbuf.data());
    for (int64_t t = 0; t < nt; ++t) {
      std::memset(acc, 0, sizeof(acc));
      const ABlock* ab = act + t * nb;
      for (int64_t b = 0; b < nb; ++b) {
        if constexpr (Emulate) {
          tile_product_emulated(wb[b], ab[b], a_signed, c);
          scale_add_scalar(c, wb[b], ab[b], acc);
        } else {
#ifdef KV_AMX_X86
          tile_product_amx(wb[b], ab[b], a_signed, c);
          scale_add_avx512(c, wb[b], ab[b], acc);
#endif
        }
      }
      const int64_t m0 = t * kTile;
      for (int m = 0; m < kTile && m0 + m < n; ++m)
        for (int r = 0; r < kTile && r0 + r < rows; ++r) y[(m0 + m) * rows + r0 + r] = acc[r][m];
    }
  }
#ifdef KV_AMX_X86
  if constexpr (!Emulate) tiles_release();
#endif
}

// ---- weights kept packed ----------------------------------------------------

// Packing a strip costs about what its tile products do (the output head's
// pack_weights takes as long as its strip_range and scaling together:
// docs/kernels.md, "Weights kept packed"), and a weight is the same on every
// call: a tensor its owner promises to keep (keep_packed) is packed once.
struct Kept {
  std::shared_ptr<const AmxPacked> packed;
  int refs = 0;  // amx_keep_packed calls not yet dropped
};
std::mutex g_pack_mu;
std::unordered_map<const void*, Kept> g_packed;  // by w.data
uint64_t g_packed_bytes = 0;
std::atomic<int> g_kept{0};  // g_packed.size(): a lookup with nothing kept takes no lock

bool same_weight(const AmxPacked& p, const TensorView& w) {
  return p.type == w.type && p.rows == w.rows() && p.cols == w.cols();
}

// ---- availability -----------------------------------------------------------

std::mutex g_mu;
int g_state = -1;  // -1 not asked yet, 0 unusable, 1 usable
std::string g_status;

#ifdef KV_AMX_X86
bool cpu_and_os_have_amx(std::string& missing) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    missing = "amx-tile, amx-int8";
    return false;
  }
  const bool tile = (d >> 24) & 1u, int8 = (d >> 25) & 1u;
  if (!tile || !int8) {
    missing = !tile && !int8 ? "amx-tile, amx-int8" : !tile ? "amx-tile" : "amx-int8";
    return false;
  }
  // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS manages tile state.
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) {
    missing = "OS xsave support";
    return false;
  }
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if (((lo >> 17) & 3u) != 3u) {
    missing = "tile state in XCR0 (the OS does not enable AMX)";
    return false;
  }
  return true;
}
#endif

}  // namespace

bool amx_cpu_has() {
#ifdef KV_AMX_X86
  static const bool has = [] {
    std::string missing;
    return cpu_and_os_have_amx(missing) && simd_level_available(SimdLevel::kAvx512);
  }();
  return has;
#else
  return false;
#endif
}

bool amx_usable() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state >= 0) return g_state == 1;
  g_state = 0;
#ifdef KV_AMX_X86
  std::string missing;
  if (!cpu_and_os_have_amx(missing)) {
    g_status = fmt::format("absent (this CPU lacks {})", missing);
    return false;
  }
  if (!simd_level_available(SimdLevel::kAvx512)) {
    g_status = "present, unused (needs the avx512 level for its scaling)";
    return false;
  }
  if (const char* env = std::getenv("KVASIR_AMX"); env && std::strcmp(env, "0") == 0) {
    g_status = "present, off (KVASIR_AMX=0)";
    return false;
  }
  constexpr long kReqXcompPerm = 0x1023, kGetXcompPerm = 0x1022, kXtiledata = 18;
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) != 0) {
    g_status = fmt::format("present, the kernel refused the tile state (arch_prctl: {})",
                           std::strerror(errno));
    return false;
  }
  unsigned long perm = 0;
  if (syscall(SYS_arch_prctl, kGetXcompPerm, &perm) != 0 || !((perm >> kXtiledata) & 1ul)) {
    g_status = "present, the tile state is not permitted after the request";
    return false;
  }
  g_state = 1;
  g_status = "present, tile state granted (self-checked against AVX-512 before first use)";
  return true;
#else
  g_status = "absent (not x86-64 Linux)";
  return false;
#endif
}

void amx_disable(const std::string& why) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_state = 0;
  g_status = "present, disabled: " + why;
}

bool amx_supports(DType type) {
  // Not the K-quants: their activations are quantised per 256 (BlockQ8K)
  // and their sub-block scales applied in int32, which the per-32 tiles
  // here do not reproduce; the AVX-512 K-quant batch kernel runs them.
  return type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_1;
}

void amx_matmul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool,
                bool emulate, const AmxPacked* packed) {
  KV_CHECK(amx_supports(w.type), "amx: no path for {}", dtype_name(w.type));
  KV_CHECK(emulate || amx_usable(), "amx: not usable here: {}", amx_status());
  const auto rb = dtype_row_bytes(w.type, w.cols());
  KV_CHECK(rb.has_value() && w.cols() > 0, "amx: bad shape [{} x {}]", w.rows(), w.cols());
  const uint64_t row_bytes = *rb;
  KV_CHECK(w.nbytes >= row_bytes * uint64_t(w.rows()), "amx: tensor smaller than its shape");
  KV_CHECK(n >= 0 && (n == 0 || (x != nullptr && y != nullptr)), "amx: bad activations");
  const int64_t rows = w.rows(), cols = w.cols(), nb = cols / kK;
  if (n == 0 || rows == 0) return;

  thread_local std::vector<BlockQ8x> xq;  // grow-only
  thread_local std::vector<ABlock> act;
  if (xq.size() < size_t(n * nb)) xq.resize(size_t(n * nb));
  const SimdLevel ql =
      simd_level_available(SimdLevel::kAvx2) ? SimdLevel::kAvx2 : SimdLevel::kScalar;
  for (int64_t i = 0; i < n; ++i) quantize_row_q8x(x + i * cols, cols, xq.data() + i * nb, ql);
  const int64_t nt = (n + kTile - 1) / kTile;
  if (act.size() < size_t(nt * nb)) act.resize(size_t(nt * nb));
  for (int64_t t = 0; t < nt; ++t)
    pack_activations(xq.data(), nb, n, t * kTile, act.data() + t * nb);

  const int64_t strips = (rows + kTile - 1) / kTile;
  const ABlock* ap = act.data();
  KV_CHECK(!packed || same_weight(*packed, w), "amx: packed copy of another weight");
  const WBlock* pw = packed ? packed->blocks.data() : nullptr;
  auto body = [&](int64_t s0, int64_t s1, int) {
    if (emulate)
      strip_range<true>(w, row_bytes, pw, ap, n, nb, y, s0, s1);
    else
      strip_range<false>(w, row_bytes, pw, ap, n, nb, y, s0, s1);
  };
  if (pool && pool->size() > 1 && strips > 1)
    pool->parallel_for(strips, body);
  else
    body(0, strips, 0);
}

bool amx_keep_packed(const TensorView& w, uint64_t budget_bytes) {
  if (!amx_supports(w.type) || w.data == nullptr || w.rows() <= 0) return false;
  if (w.cols() % kK != 0) return false;
  const auto rb = dtype_row_bytes(w.type, w.cols());
  KV_CHECK(rb.has_value() && w.cols() > 0 && w.nbytes >= *rb * uint64_t(w.rows()),
           "amx: bad weight [{} x {}] {}", w.rows(), w.cols(), dtype_name(w.type));
  const int64_t nb = w.cols() / kK, strips = (w.rows() + kTile - 1) / kTile;
  const uint64_t bytes = uint64_t(strips) * uint64_t(nb) * sizeof(WBlock);
  {
    std::lock_guard<std::mutex> lock(g_pack_mu);
    if (auto it = g_packed.find(w.data); it != g_packed.end()) {
      if (!same_weight(*it->second.packed, w)) return false;
      it->second.refs++;
      return true;
    }
    if (g_packed_bytes + bytes > budget_bytes) return false;
    g_packed_bytes += bytes;  // reserved while packing, outside the lock
  }
  auto p = std::make_shared<AmxPacked>();
  p->type = w.type, p->rows = w.rows(), p->cols = w.cols();
  p->blocks.resize(size_t(strips * nb));
  for (int64_t s = 0; s < strips; ++s) pack_weights(w, *rb, s * kTile, p->blocks.data() + s * nb);
  std::lock_guard<std::mutex> lock(g_pack_mu);
  auto [it, added] = g_packed.emplace(w.data, Kept{std::move(p), 0});
  if (added)
    g_kept.fetch_add(1, std::memory_order_relaxed);
  else
    g_packed_bytes -= bytes;  // another thread packed it meanwhile
  it->second.refs++;
  return true;
}

void amx_drop_packed(const TensorView& w) {
  std::lock_guard<std::mutex> lock(g_pack_mu);
  auto it = g_packed.find(w.data);
  if (it == g_packed.end() || --it->second.refs > 0) return;
  g_packed_bytes -= uint64_t(it->second.packed->blocks.size()) * sizeof(WBlock);
  g_packed.erase(it);  // a matmul still running holds its own reference
  g_kept.fetch_sub(1, std::memory_order_relaxed);
}

std::shared_ptr<const AmxPacked> amx_find_packed(const TensorView& w) {
  if (g_kept.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_pack_mu);
  auto it = g_packed.find(w.data);
  if (it == g_packed.end() || !same_weight(*it->second.packed, w)) return nullptr;
  return it->second.packed;
}

bool amx_has_packed(const TensorView& w) {
  return amx_find_packed(w) != nullptr;
}

}  // namespace detail

std::string amx_status() {
  detail::amx_usable();
  std::lock_guard<std::mutex> lock(detail::g_mu);
  return detail::g_status;
}

}  // namespace kvasir::cpu
