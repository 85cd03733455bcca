#include "tests/support/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/half.h"

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
      default:
        KV_FAIL("dequantize: type {} not supported", info.name);
    }
  }
  return out;
}

}  // namespace kvasir::test
