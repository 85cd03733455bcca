// kernels/cpu/amx.h — AMX-INT8 (Sapphire Rapids and later) for the batch
// (prefill) matmuls of quantised weights. Internal to kernels/cpu.
//
// The real tiles are bit-exact against their emulation (docs/kernels.md),
// so its tile arithmetic is checked through an emulation of
// the tile instructions in C++ (the same driver, the same data layouts;
// test_amx, every machine); the real-tile test skips where the CPU lacks
// amx-int8. Where
// AMX is present the dispatch (dispatch.cpp) first compares the tiles'
// result with the AVX-512 kernels' on its probe and uses AMX only if they
// agree and AMX is faster; KVASIR_AMX=0 turns it off.
//
// Method (amx.cpp): y = x · Wᵀ per block of 32 as C[16 weight rows][16
// activation rows] int32 = A · B, A = the block's 16 × 32 weight bytes
// (Q8_0: s8, TDPBSSD; Q4_0/Q4_1: the unsigned quants as u8, TDPBUSD),
// B = the 16 activation rows' 32 int8 in the tiles' 4-byte-interleaved
// layout (8 rows × 64 bytes, built once per call); then C is scaled per
// (weight row, activation row) by d_w·d_x and the offsets m_w·s_x added, in
// f32 (AVX-512). The K-quants stay on the AVX-512 kernels: their
// activations are blocks of 256 (matmul_kquant.cpp), not these tiles' 32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/tensor.h"
#include "kernels/cpu/thread_pool.h"

namespace kvasir::cpu {

// One line for simd_report(): whether the CPU has amx-tile/amx-int8, whether
// the kernel granted the tile state, whether it is in use.
std::string amx_status();

namespace detail {

// The CPU has amx-tile, amx-int8, the OS enables the tile state in XCR0 and
// the AVX-512 level (the scaling) is available.
bool amx_cpu_has();

// amx_cpu_has(), KVASIR_AMX is not 0, not disabled by a failed self-check,
// and arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) succeeded (asked
// once per process, on the first call). On refusal: false, the reason in
// amx_status().
bool amx_usable();

// Turns AMX off for the process (the dispatch's self-check failed).
void amx_disable(const std::string& why);

// Weight types with an AMX path.
bool amx_supports(DType type);

// Activation rows per AMX tile; the dispatch uses AMX only from this many.
constexpr int64_t kAmxRows = 16;
// (A weight kept packed runs on them from kernel_amx_packed_rows, measured.)

// Packs w's weights for the tiles once and uses that copy in every later
// amx_matmul of w (found by w.data; type and shape must match) until
// amx_drop_packed(w) (counted: each keep needs its drop). The caller promises w's bytes neither
// change nor are unmapped before then. False (nothing kept) where w's type has no AMX path or the
// copies kept would exceed budget_bytes in all (a 16-row strip of 32-column blocks takes 640 bytes
// a block: 1.18x a Q8_0 weight, 2.2x a Q4_1 one). Thread-safe.
bool amx_keep_packed(const TensorView& w, uint64_t budget_bytes);
void amx_drop_packed(const TensorView& w);
// w's kept copy, or null; it stays valid while held, even past a drop. One
// atomic load and no lock while nothing is kept.
struct AmxPacked;
std::shared_ptr<const AmxPacked> amx_find_packed(const TensorView& w);
bool amx_has_packed(const TensorView& w);

// y[n, w.rows()] = x[n, w.cols()] · Wᵀ through the tiles (x quantised to the
// 8-bit blocks as matmul does). emulate: the tile instructions run as C++ and
// the scaling as scalar code — any CPU; otherwise real AMX (requires
// amx_usable()). packed: w's kept copy (amx_find_packed), or null to pack
// each strip on the way. Checks as matmul does.
void amx_matmul(const TensorView& w, const float* x, int64_t n, float* y, ThreadPool* pool,
                bool emulate, const AmxPacked* packed = nullptr);

}  // namespace detail
}  // namespace kvasir::cpu
