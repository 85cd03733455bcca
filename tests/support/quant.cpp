#include "tests/support/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "kernels/cpu/kquant.h"  // header-only block decoders

namespace kvasir::test {
namespace {

void put16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void q8_0(const float* x, uint8_t* out) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.f, id = d ? 1.f / d : 0.f;
  put16(out, f32_to_fp16(d));
  for (int i = 0; i < 32; ++i) out[2 + i] = uint8_t(int8_t(std::lround(x[i] * id)));
}

void q4_0(const float* x, uint8_t* out) {
  float amax = 0, max = 0;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  const float d = max / -8.f, id = d ? 1.f / d : 0.f;
  put16(out, f32_to_fp16(d));
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(15, int(x[j] * id + 8.5f)), b = std::min(15, int(x[j + 16] * id + 8.5f));
    out[2 + j] = uint8_t(a | (b << 4));
  }
}

void q4_1(const float* x, uint8_t* out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < 32; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const float d = (hi - lo) / 15.f, id = d ? 1.f / d : 0.f;
  put16(out, f32_to_fp16(d));
  put16(out + 2, f32_to_fp16(lo));
  for (int j = 0; j < 16; ++j) {
    const int a = std::min(15, int((x[j] - lo) * id + 0.5f));
    const int b = std::min(15, int((x[j + 16] - lo) * id + 0.5f));
    out[4 + j] = uint8_t(a | (b << 4));
  }
}

// K-quants: a plain min/max quantiser (not ggml's iterative search, which
// only lowers the error): per sub-block scale and min, 6-bit scales relative
// to the super-block's largest, quants rounded against the stored f16 values.
void pack_scale_min(uint8_t* q12, int j, int sc, int m) {
  if (j < 4) {
    q12[j] = uint8_t((q12[j] & 0xc0) | sc);
    q12[j + 4] = uint8_t((q12[j + 4] & 0xc0) | m);
  } else {
    q12[j + 4] = uint8_t((sc & 0xf) | ((m & 0xf) << 4));
    q12[j - 4] = uint8_t(q12[j - 4] | ((sc >> 4) << 6));
    q12[j] = uint8_t(q12[j] | ((m >> 4) << 6));
  }
}

void q45_k(const float* x, bool q5, uint8_t* out) {
  const int nmax = q5 ? 31 : 15;
  float scale[8], mn[8], max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    float lo = 0, hi = x[32 * s];
    for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * s + l]), hi = std::max(hi, x[32 * s + l]);
    scale[s] = (hi - lo) / float(nmax);
    mn[s] = -lo;
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, mn[s]);
  }
  const float d = fp16_to_f32(f32_to_fp16(max_scale / 63.f));
  const float dmin = fp16_to_f32(f32_to_fp16(max_min / 63.f));
  put16(out, f32_to_fp16(d));
  put16(out + 2, f32_to_fp16(dmin));
  uint8_t* q12 = out + 4;
  std::memset(q12, 0, 12);
  uint8_t* qh = out + 16;
  uint8_t* qs = out + (q5 ? 48 : 16);
  if (q5) std::memset(qh, 0, 32);
  for (int s = 0; s < 8; ++s) {
    const int sc = d > 0 ? std::clamp(int(std::lround(scale[s] / d)), 0, 63) : 0;
    const int m = dmin > 0 ? std::clamp(int(std::lround(mn[s] / dmin)), 0, 63) : 0;
    pack_scale_min(q12, s, sc, m);
    const float ds = d * float(sc), dm = dmin * float(m);
    for (int l = 0; l < 32; ++l) {
      const int q = ds > 0 ? std::clamp(int(std::lround((x[32 * s + l] + dm) / ds)), 0, nmax) : 0;
      uint8_t& byte = qs[32 * (s / 2) + l];
      byte = uint8_t(s % 2 ? (byte & 0x0f) | ((q & 0xf) << 4) : (byte & 0xf0) | (q & 0xf));
      if (q5 && (q & 16)) qh[l] = uint8_t(qh[l] | (1 << s));
    }
  }
}

void q6_k(const float* x, uint8_t* out) {
  float scale[16], max_scale = 0;
  for (int s = 0; s < 16; ++s) {
    float amax = 0;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
    scale[s] = amax / 31.f;
    max_scale = std::max(max_scale, scale[s]);
  }
  const float d = fp16_to_f32(f32_to_fp16(max_scale / 127.f));
  put16(out + 208, f32_to_fp16(d));
  std::memset(out, 0, 192);
  for (int s = 0; s < 16; ++s) {
    const int sc = d > 0 ? std::clamp(int(std::lround(scale[s] / d)), 0, 127) : 0;
    out[192 + s] = uint8_t(int8_t(sc));
    const float ds = d * float(sc);
    for (int l = 0; l < 16; ++l) {
      const int i = 16 * s + l;  // weight index: half h, quarter t, position p
      const int q = ds > 0 ? std::clamp(int(std::lround(x[i] / ds)), -32, 31) + 32 : 32;
      const int h = i / 128, t = (i % 128) / 32, p = i % 32;
      uint8_t& lo = out[64 * h + p + 32 * (t & 1)];
      lo = uint8_t(t < 2 ? (lo & 0xf0) | (q & 0xf) : (lo & 0x0f) | ((q & 0xf) << 4));
      out[128 + 32 * h + p] = uint8_t(out[128 + 32 * h + p] | ((q >> 4) << (2 * t)));
    }
  }
}

// MXFP4 as gguf-py's quants.MXFP4 writes it: the E8M0 exponent from the
// block's largest magnitude (floor(log2(amax)) - 2 + 127, 0 for a zero
// block), each weight the nearest doubled e2m1 value times 2^(e - 128)
// (ties: the lower code).
constexpr int8_t kFp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float e8m0_half(uint8_t e) {
  return std::ldexp(1.f, int(e) - 128);
}

void mxfp4(const float* x, uint8_t* out) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const int e = amax > 0 ? std::clamp(int(std::floor(std::log2(amax))) - 2 + 127, 0, 255) : 0;
  out[0] = uint8_t(e);
  const float d = e8m0_half(uint8_t(e));
  std::memset(out + 1, 0, 16);
  for (int i = 0; i < 32; ++i) {
    int best = 0;
    for (int c = 1; c < 16; ++c)
      if (std::fabs(d * float(kFp4[c]) - x[i]) < std::fabs(d * float(kFp4[best]) - x[i])) best = c;
    out[1 + i % 16] = uint8_t(out[1 + i % 16] | (i < 16 ? best : best << 4));
  }
}

}  // namespace

std::vector<uint8_t> quantize(DType t, const float* x, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  KV_CHECK(n % info.block == 0, "quantize: {} values are not a multiple of {}", n, info.block);
  std::vector<uint8_t> out(size_t(n / info.block * info.bytes));
  uint8_t* o = out.data();
  for (int64_t b = 0; b < n / info.block; ++b, o += info.bytes) {
    const float* xb = x + b * info.block;
    switch (t) {
      case DType::F32:
        std::memcpy(o, xb, 4);
        break;
      case DType::F16:
        put16(o, f32_to_fp16(*xb));
        break;
      case DType::BF16:
        put16(o, f32_to_bf16(*xb));
        break;
      case DType::Q8_0:
        q8_0(xb, o);
        break;
      case DType::Q4_0:
        q4_0(xb, o);
        break;
      case DType::Q4_1:
        q4_1(xb, o);
        break;
      case DType::Q4_K:
      case DType::Q5_K:
        q45_k(xb, t == DType::Q5_K, o);
        break;
      case DType::Q6_K:
        q6_k(xb, o);
        break;
      case DType::MXFP4:
        mxfp4(xb, o);
        break;
      default:
        KV_FAIL("quantize: type {} not supported", info.name);
    }
  }
  return out;
}

std::vector<float> dequantize(const TensorView& v) {
  const DTypeInfo& info = dtype_info(v.type);
  const int64_t n = v.ne[0] * v.ne[1] * v.ne[2] * v.ne[3];
  std::vector<float> out(static_cast<size_t>(n));
  const auto* p = static_cast<const uint8_t*>(v.data);
  for (int64_t b = 0; b < n / info.block; ++b, p += info.bytes) {
    float* y = out.data() + b * info.block;
    switch (v.type) {
      case DType::F32:
        std::memcpy(y, p, 4);
        break;
      case DType::F16:
        *y = fp16_to_f32(get16(p));
        break;
      case DType::BF16:
        *y = bf16_to_f32(get16(p));
        break;
      case DType::Q8_0: {
        const float d = fp16_to_f32(get16(p));
        for (int i = 0; i < 32; ++i) y[i] = d * float(int8_t(p[2 + i]));
        break;
      }
      case DType::Q4_0: {
        const float d = fp16_to_f32(get16(p));
        for (int j = 0; j < 16; ++j) {
          y[j] = d * float((p[2 + j] & 15) - 8);
          y[j + 16] = d * float((p[2 + j] >> 4) - 8);
        }
        break;
      }
      case DType::Q4_1: {
        const float d = fp16_to_f32(get16(p)), m = fp16_to_f32(get16(p + 2));
        for (int j = 0; j < 16; ++j) {
          y[j] = d * float(p[4 + j] & 15) + m;
          y[j + 16] = d * float(p[4 + j] >> 4) + m;
        }
        break;
      }
      case DType::Q4_K:
      case DType::Q5_K:
        cpu::kq::dequant_q45_k(p, v.type == DType::Q5_K, y);
        break;
      case DType::Q6_K:
        cpu::kq::dequant_q6_k(p, y);
        break;
      case DType::MXFP4:
        for (int j = 0; j < 16; ++j) {
          y[j] = e8m0_half(p[0]) * float(kFp4[p[1 + j] & 15]);
          y[j + 16] = e8m0_half(p[0]) * float(kFp4[p[1 + j] >> 4]);
        }
        break;
      default:
        KV_FAIL("dequantize: type {} not supported", info.name);
    }
  }
  return out;
}

}  // namespace kvasir::test
