// base/fp8.cpp — see fp8.h. Written from the format's definition, for
// readability rather than speed: the exponent comes from frexp, the
// rounding from nearbyint (ties to even in the default rounding mode), and
// every scaling is by a power of two, hence exact.
#include "base/fp8.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace kvasir::fp8 {

float e4m3_to_f32(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 0xF && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = e == 0 ? std::ldexp(float(m), -9)           // (m / 8) · 2^-6
                           : std::ldexp(float(8 + m), e - 10);  // (1 + m / 8) · 2^(e - 7)
  return (code & 0x80) ? -mag : mag;
}

uint8_t f32_to_e4m3(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  if (std::isnan(x)) return 0x7F;  // one NaN, whatever its sign (as CUDA's conversions)
  const float a = std::fabs(x);
  if (a > kE4M3Max) return uint8_t(sign | 0x7E);  // saturate (infinity too)
  if (a < 0x1p-6f) {
    // Subnormal range, quantum 2^-9; q == 8 is the smallest normal, whose
    // code is 0x08 as well.
    const int q = int(std::nearbyint(a * 512.f));
    return uint8_t(sign | q);
  }
  int exp2 = 0;
  std::frexp(a, &exp2);  // a = f · 2^exp2, f in [0.5, 1): leading bit at 2^(exp2 - 1)
  int e = exp2 - 1 + 7;
  int m = int(std::nearbyint((std::ldexp(a, -(exp2 - 1)) - 1.f) * 8.f));
  if (m == 8) {  // rounded up to the next power of two
    m = 0;
    ++e;
  }
  // a <= 448 keeps e <= 15 and, at e == 15, m <= 6 (448 = 1.75 · 2^8).
  return uint8_t(sign | (e << 3) | m);
}

float quantize_row_e4m3(const float* x, int64_t n, uint8_t* q) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const bool usable = amax > 0.f && std::isfinite(amax);
  const float inv = usable ? kE4M3Max / amax : 1.f;
  for (int64_t i = 0; i < n; ++i) q[i] = f32_to_e4m3(x[i] * inv);
  return usable ? amax / kE4M3Max : 1.f;
}

}  // namespace kvasir::fp8
