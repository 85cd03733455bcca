#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "base/half.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/simd_math.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace kvasir::cpu {
namespace {

void rmsnorm_row_scalar(const float* x, const float* w, float eps, int64_t dim, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < dim; ++i) ss += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
  for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * inv * w[i];
}

#ifdef KV_HAVE_X86
using detail::hsum256;

KV_AVX2 void rmsnorm_row_avx2(const float* x, const float* w, float eps, int64_t dim, float* out) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  double ss = hsum256(_mm256_add_ps(a0, a1));
  for (; i < dim; ++i) ss += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
  const __m256 vi = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= dim; i += 8)
    _mm256_storeu_ps(
        out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi), _mm256_loadu_ps(w + i)));
  for (; i < dim; ++i) out[i] = x[i] * inv * w[i];
}

using detail::exp256;

KV_AVX2 void swiglu_avx2(const float* g, const float* u, int64_t count, float* out) {
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 neg = _mm256_set1_ps(-0.f);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = exp256(_mm256_xor_ps(gv, neg));
    const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
  }
  for (; i < count; ++i) out[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

KV_AVX2 void add_avx2(float* x, const float* y, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < count; ++i) x[i] += y[i];
}
#endif  // KV_HAVE_X86

bool use_avx2() {
#ifdef KV_HAVE_X86
  return simd_level() >= SimdLevel::kAvx2;
#else
  return false;
#endif
}

}  // namespace

void rmsnorm(const float* x, const float* weight, float eps, int64_t n, int64_t dim, float* out) {
  KV_CHECK(n >= 0 && dim > 0, "rmsnorm: bad shape [{} x {}]", n, dim);
  const bool avx2 = use_avx2();
  for (int64_t r = 0; r < n; ++r) {
#ifdef KV_HAVE_X86
    if (avx2) {
      rmsnorm_row_avx2(x + r * dim, weight, eps, dim, out + r * dim);
      continue;
    }
#endif
    (void)avx2;
    rmsnorm_row_scalar(x + r * dim, weight, eps, dim, out + r * dim);
  }
}

void swiglu(const float* gate, const float* up, int64_t count, float* out) {
  KV_CHECK(count >= 0, "swiglu: negative count {}", count);
#ifdef KV_HAVE_X86
  if (use_avx2()) return swiglu_avx2(gate, up, count, out);
#endif
  for (int64_t i = 0; i < count; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

void swiglu_oai(const float* gate, const float* up, int64_t count, float alpha, float limit,
                float* out) {
  KV_CHECK(count >= 0, "swiglu_oai: negative count {}", count);
  for (int64_t i = 0; i < count; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.f + std::exp(alpha * -g)) * (u + 1.f);
  }
}

namespace {

// GELU (tanh form) of an f16 value, its result rounded to f16: what ggml's
// table holds for that input (ggml_vec_gelu_f32 with GGML_GELU_FP16).
float gelu_f16(uint16_t h) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const float g = fp16_to_f32(h);
  return fp16_to_f32(
      f32_to_fp16(0.5f * g * (1.f + std::tanh(kSqrt2OverPi * g * (1.f + 0.044715f * g * g)))));
}

// Every f16 input's result, [65536] by the input's bits: the gate is rounded
// to f16 before GELU, so the table gives exactly the bits the formula
// gives, without a tanhf a element (a Gemma 3 decode step spent 8% there).
const float* gelu_f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(size_t(1) << 16);
    for (uint32_t h = 0; h < t.size(); ++h) t[h] = gelu_f16(uint16_t(h));
    return t;
  }();
  return table.data();
}

}  // namespace

void geglu(const float* gate, const float* up, int64_t count, float* out) {
  KV_CHECK(count >= 0, "geglu: negative count {}", count);
  // As ggml computes it (ggml_vec_gelu_f32): 0 below -10, identity above 10,
  // else GELU of the gate rounded to f16, itself rounded to f16 (its table).
  const float* table = gelu_f16_table();
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    float gl = g;
    if (g <= -10.f) {
      gl = 0.f;
    } else if (g < 10.f) {
      gl = table[f32_to_fp16(g)];
    }
    out[i] = gl * up[i];
  }
}

void scale_inplace(float* x, float c, int64_t count) {
  KV_CHECK(count >= 0, "scale_inplace: negative count {}", count);
  for (int64_t i = 0; i < count; ++i) x[i] *= c;
}

void softcap_inplace(float* x, float cap, int64_t count) {
  KV_CHECK(count >= 0 && cap > 0.f, "softcap_inplace: count {} / cap {} invalid", count, cap);
  for (int64_t i = 0; i < count; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void add_inplace(float* x, const float* y, int64_t count) {
  KV_CHECK(count >= 0, "add_inplace: negative count {}", count);
#ifdef KV_HAVE_X86
  if (use_avx2()) return add_avx2(x, y, count);
#endif
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

}  // namespace kvasir::cpu
