// kernels/cpu/logits.cpp — see logits.h. Built with -ffp-contract=off
// (kernels/CMakeLists.txt): a fused multiply-add would round once where the
// reference rounds twice, and the bits are the contract.
#include "kernels/cpu/logits.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/simd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_LOGITS_X86 1
#endif

namespace kvasir::cpu {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMaxFinite = std::numeric_limits<float>::max();
constexpr int kLanes = 4;

// ---- the reference: 4 lanes (one SSE register on x86-64, NEON on ARM) ----

using vf = float __attribute__((vector_size(16)));
using vi = int32_t __attribute__((vector_size(16)));

vf loadv(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void storev(float* p, vf v) {
  std::memcpy(p, &v, sizeof v);
}
vf splat(float x) {
  return vf{x, x, x, x};
}

// exp(x) for x <= 0 (Cephes' expf: range reduction by ln 2, degree-6
// polynomial; relative error ~2e-7). Below -87.3 (e^-87.3 ~ 1e-38) it returns
// exactly 0, which the sampler reads as "cannot be drawn".
vf expv(vf x) {
  const vf lo = splat(-87.3f);
  const vi dead = x < lo;
  x = x < lo ? lo : x;
  x = x > splat(0.0f) ? splat(0.0f) : x;
  // n = round(x / ln2); x <= 0 so round-to-nearest is truncation of fx - 0.5.
  const vi n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, vi);
  const vf nf = __builtin_convertvector(n, vf);
  vf r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  vf y = splat(1.9875691500e-4f);
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const vi bits = (n + 127) << 23;  // 2^n, n >= -126 here
  vf scale;
  std::memcpy(&scale, &bits, sizeof scale);
  y = y * scale;
  return dead ? splat(0.0f) : y;
}

float zero_as_plus(float m) {
  return m == 0.0f ? 0.0f : m;
}

float sanitize_max_ref(float* x, int32_t n) {
  vf m = splat(-kInf);
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    vf v = loadv(x + i);
    v = v != v ? splat(-kInf) : v;
    v = v > splat(kMaxFinite) ? splat(kMaxFinite) : v;
    storev(x + i, v);
    m = v > m ? v : m;
  }
  float mx = m[0];
  for (int j = 1; j < kLanes; ++j) mx = std::max(mx, m[j]);
  for (; i < n; ++i) {
    float v = x[i];
    if (std::isnan(v)) v = -kInf;
    if (v > kMaxFinite) v = kMaxFinite;
    x[i] = v;
    mx = std::max(mx, v);
  }
  return zero_as_plus(mx);
}

// The lanes in double, then the last n % 4 terms (padded with -inf, whose
// term is 0) in double: the reference's end, shared by every level.
double finish_sum(vf acc, const float* x, int32_t i, int32_t n, float max, float inv_t,
                  float* out) {
  double s = 0.0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  if (i < n) {
    vf t = splat(-kInf);
    for (int32_t j = 0; i + j < n; ++j) t[j] = x[i + j];
    const vf e = expv((t - max) * inv_t);
    for (int32_t j = 0; i + j < n; ++j) {
      if (out) out[i + j] = e[j];
      s += e[j];
    }
  }
  return s;
}

// From i on, 4 at a time, into acc; returns where it stopped.
int32_t exp_sum_lanes(const float* x, int32_t i, int32_t n, float max, float inv_t, float* out,
                      vf& acc) {
  for (; i + kLanes <= n; i += kLanes) {
    const vf e = expv((loadv(x + i) - max) * inv_t);
    if (out) storev(out + i, e);
    acc += e;
  }
  return i;
}

double exp_sum_ref(const float* x, int32_t n, float max, float inv_t, float* out) {
  vf acc = splat(0.0f);
  const int32_t i = exp_sum_lanes(x, 0, n, max, inv_t, out, acc);
  return finish_sum(acc, x, i, n, max, inv_t, out);
}

int32_t find_ref(const float* x, int32_t n, float v) {
  int32_t i = 0;
  while (i < n && x[i] != v) ++i;
  return i;
}

#ifdef KV_LOGITS_X86

// ---- AVX2: 8 lanes, the same operations in the same order ----------------

#define KV_LG_AVX2 __attribute__((target("avx2")))

KV_LG_AVX2 inline __m256 expv8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 dead = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_blendv_ps(x, lo, dead);
  const __m256 zero = _mm256_setzero_ps();
  x = _mm256_blendv_ps(x, zero, _mm256_cmp_ps(x, zero, _CMP_GT_OQ));
  const __m256i n = _mm256_cvttps_epi32(
      _mm256_sub_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(0.5f)));
  const __m256 nf = _mm256_cvtepi32_ps(n);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(nf, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(nf, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(dead, y);
}

KV_LG_AVX2 float sanitize_max_avx2(float* x, int32_t n) {
  const __m256 ninf = _mm256_set1_ps(-kInf), big = _mm256_set1_ps(kMaxFinite);
  __m256 m = ninf;
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    v = _mm256_blendv_ps(v, ninf, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    v = _mm256_min_ps(v, big);  // +inf -> the largest finite; no NaN is left
    _mm256_storeu_ps(x + i, v);
    m = _mm256_max_ps(v, m);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float mx = -kInf;
  for (float l : lanes) mx = std::max(mx, l);
  return zero_as_plus(std::max(mx, sanitize_max_ref(x + i, n - i)));
}

KV_LG_AVX2 double exp_sum_avx2(const float* x, int32_t n, float max, float inv_t, float* out) {
  const __m256 mv = _mm256_set1_ps(max), tv = _mm256_set1_ps(inv_t);
  __m128 acc = _mm_setzero_ps();
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = expv8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), tv));
    if (out) _mm256_storeu_ps(out + i, e);
    acc = _mm_add_ps(acc, _mm256_castps256_ps128(e));  // terms i..i+3, then i+4..i+7
    acc = _mm_add_ps(acc, _mm256_extractf128_ps(e, 1));
  }
  vf a;
  std::memcpy(&a, &acc, sizeof a);
  i = exp_sum_lanes(x, i, n, max, inv_t, out, a);
  return finish_sum(a, x, i, n, max, inv_t, out);
}

KV_LG_AVX2 int32_t find_avx2(const float* x, int32_t n, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vv, _CMP_EQ_OQ));
    if (mask) return i + __builtin_ctz(unsigned(mask));
  }
  return i + find_ref(x + i, n - i, v);
}

// ---- AVX-512F: 16 lanes ---------------------------------------------------

// GCC 12's avx512fintrin.h builds results on _mm512_undefined_*(), a
// self-initialised variable that -Wuninitialized reports when inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define KV_LG_AVX512 __attribute__((target("avx2,avx512f")))

KV_LG_AVX512 inline __m512 expv16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  const __mmask16 dead = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_mask_blend_ps(dead, x, lo);
  const __m512 zero = _mm512_setzero_ps();
  x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), x, zero);
  const __m512i n = _mm512_cvttps_epi32(
      _mm512_sub_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _mm512_set1_ps(0.5f)));
  const __m512 nf = _mm512_cvtepi32_ps(n);
  __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(nf, _mm512_set1_ps(0.693359375f)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(nf, _mm512_set1_ps(-2.12194440e-4f)));
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(y, _mm512_mul_ps(r, r)), r), _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23);
  y = _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
  return _mm512_maskz_mov_ps(__mmask16(~dead), y);
}

KV_LG_AVX512 float sanitize_max_avx512(float* x, int32_t n) {
  const __m512 ninf = _mm512_set1_ps(-kInf), big = _mm512_set1_ps(kMaxFinite);
  __m512 m = ninf;
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), ninf);
    v = _mm512_min_ps(v, big);
    _mm512_storeu_ps(x + i, v);
    m = _mm512_max_ps(v, m);
  }
  const float mx = _mm512_reduce_max_ps(m);
  return zero_as_plus(std::max(mx, sanitize_max_avx2(x + i, n - i)));
}

KV_LG_AVX512 double exp_sum_avx512(const float* x, int32_t n, float max, float inv_t, float* out) {
  const __m512 mv = _mm512_set1_ps(max), tv = _mm512_set1_ps(inv_t);
  __m128 acc = _mm_setzero_ps();
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = expv16(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv), tv));
    if (out) _mm512_storeu_ps(out + i, e);
    acc = _mm_add_ps(acc, _mm512_castps512_ps128(e));  // the reference's order: 4 at a time
    acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(e, 1));
    acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(e, 2));
    acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(e, 3));
  }
  vf a;
  std::memcpy(&a, &acc, sizeof a);
  i = exp_sum_lanes(x, i, n, max, inv_t, out, a);
  return finish_sum(a, x, i, n, max, inv_t, out);
}

KV_LG_AVX512 int32_t find_avx512(const float* x, int32_t n, float v) {
  const __m512 vv = _mm512_set1_ps(v);
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 mask = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vv, _CMP_EQ_OQ);
    if (mask) return i + __builtin_ctz(unsigned(mask));
  }
  return i + find_ref(x + i, n - i, v);
}

#pragma GCC diagnostic pop

#endif  // KV_LOGITS_X86

enum class Width { k4, k8, k16 };

Width width() {
#ifdef KV_LOGITS_X86
  const SimdLevel l = simd_level();
  if (l == SimdLevel::kAvx512 || l == SimdLevel::kAvx512Vnni) return Width::k16;
  if (l != SimdLevel::kScalar) return Width::k8;
#endif
  return Width::k4;
}

}  // namespace

float logits_sanitize_max(float* x, int32_t n) {
#ifdef KV_LOGITS_X86
  switch (width()) {
    case Width::k16:
      return sanitize_max_avx512(x, n);
    case Width::k8:
      return sanitize_max_avx2(x, n);
    case Width::k4:
      break;
  }
#endif
  return sanitize_max_ref(x, n);
}

double logits_exp_sum(const float* x, int32_t n, float max, float inv_t, float* out) {
#ifdef KV_LOGITS_X86
  switch (width()) {
    case Width::k16:
      return exp_sum_avx512(x, n, max, inv_t, out);
    case Width::k8:
      return exp_sum_avx2(x, n, max, inv_t, out);
    case Width::k4:
      break;
  }
#endif
  return exp_sum_ref(x, n, max, inv_t, out);
}

int32_t logits_find(const float* x, int32_t n, float v) {
#ifdef KV_LOGITS_X86
  switch (width()) {
    case Width::k16:
      return find_avx512(x, n, v);
    case Width::k8:
      return find_avx2(x, n, v);
    case Width::k4:
      break;
  }
#endif
  return find_ref(x, n, v);
}

}  // namespace kvasir::cpu
