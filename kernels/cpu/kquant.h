// kernels/cpu/kquant.h — the K-quant block formats (ggml's Q4_K, Q5_K, Q6_K)
// and their plain dequantisers. Internal to kernels/cpu (matmul and
// dequantize_row); the byte layouts are ggml's, read with memcpy (blocks in
// a file need not be aligned).
//
// A super-block holds 256 weights. Q4_K/Q5_K: 8 sub-blocks of 32, each with a
// 6-bit scale sc and 6-bit min m packed in 12 bytes; w = d·sc·q − dmin·m.
// Q6_K: 16 sub-blocks of 16 with int8 scales; w = d·sc·(q − 32).
//   Q4_K { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }              144 bytes
//   Q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }   176 bytes
//   Q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }             210 bytes
// Q4_K/Q5_K low bits: each 32 bytes of qs hold sub-block 2k in the low
// nibbles and 2k+1 in the high ones; Q5_K's bit 4 of weight l of sub-block
// s is bit s of qh[l]. Q6_K: see dequant_q6_k.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/half.h"

namespace kvasir::cpu::kq {

constexpr int kSuper = 256;
constexpr int64_t kQ4KBytes = 144, kQ5KBytes = 176, kQ6KBytes = 210;

inline float half_at(const uint8_t* p) {
  return fp16_to_f32(uint16_t(p[0] | (p[1] << 8)));
}

// Scale and min of sub-block j (0..7) from the 12 packed bytes (ggml's
// get_scale_min_k4): j < 4 in the low 6 bits of bytes j / j+4; j ≥ 4 split
// between the nibbles of byte j+4 and the top 2 bits of bytes j-4 / j.
inline void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The 8 scales and 8 mins of a Q4_K/Q5_K super-block (6 bits each, packed in
// the 12 bytes at q) as bytes: sc[s] = out[s], m[s] = out[8 + s]. The same
// values as scale_min_k4, by 32-bit masks and shifts (ggml's layout).
inline void unpack_scales_k4(const uint8_t* q, uint8_t out[16]) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[3];
  std::memcpy(u, q, 12);
  const uint32_t v[4] = {u[0] & kLow6, (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4), u[1] & kLow6,
                         ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4)};
  std::memcpy(out, v, 16);
}

// Unsigned quants (0..15 or 0..31) of sub-block s (0..7) of a Q4_K/Q5_K block.
inline void quants_q45(const uint8_t* blk, bool q5, int s, uint8_t out[32]) {
  const uint8_t* qs = blk + (q5 ? 48 : 16) + 32 * (s / 2);
  const uint8_t* qh = blk + 16;
  for (int l = 0; l < 32; ++l) {
    uint8_t v = (s & 1) ? (qs[l] >> 4) : (qs[l] & 0xf);
    if (q5 && ((qh[l] >> s) & 1)) v += 16;
    out[l] = v;
  }
}

// Signed quants q − 32 (−32..31) of the 32 weights 32c..32c+31 (c in 0..7) of a
// Q6_K block. Weight l + 32·t of the 128-weight half h (c = 4h + t) has its
// low 4 bits in ql[64h + l + 32·(t & 1)] (low nibble for t < 2, high for t ≥ 2)
// and its top 2 bits at bit 2t of qh[32h + l].
inline void quants_q6(const uint8_t* blk, int c, int8_t out[32]) {
  const int h = c / 4, t = c % 4;
  const uint8_t* ql = blk + 64 * h + 32 * (t & 1);
  const uint8_t* qh = blk + 128 + 32 * h;
  for (int l = 0; l < 32; ++l) {
    const int lo = t < 2 ? (ql[l] & 0xf) : (ql[l] >> 4);
    const int hi = (qh[l] >> (2 * t)) & 3;
    out[l] = int8_t((lo | (hi << 4)) - 32);
  }
}

// Scale of weights 32c..32c+15 (half 0) or 32c+16..32c+31 (half 1).
inline int8_t scale_q6(const uint8_t* blk, int c, int half) {
  return int8_t(blk[192 + 2 * c + half]);
}

// 256 weights of one block, as ggml's dequantize_row_q*_K computes them
// (d·sc first, then ·q, then − dmin·m: the same f32 roundings).
inline void dequant_q45_k(const uint8_t* blk, bool q5, float* y) {
  const float d = half_at(blk), dmin = half_at(blk + 2);
  uint8_t q[32];
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    scale_min_k4(s, blk + 4, sc, m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    quants_q45(blk, q5, s, q);
    for (int l = 0; l < 32; ++l) y[32 * s + l] = d1 * float(q[l]) - m1;
  }
}

inline void dequant_q6_k(const uint8_t* blk, float* y) {
  const float d = half_at(blk + 208);
  int8_t q[32];
  for (int c = 0; c < 8; ++c) {
    quants_q6(blk, c, q);
    for (int l = 0; l < 32; ++l) y[32 * c + l] = d * float(scale_q6(blk, c, l / 16)) * float(q[l]);
  }
}

}  // namespace kvasir::cpu::kq
