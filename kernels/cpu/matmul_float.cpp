// Plain weights (F32, F16, BF16) × f32 activations, accumulated in f32.
#include "base/half.h"
#include "kernels/cpu/matmul_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#endif

namespace kvasir::cpu::detail {
namespace {

template <DType T>
inline float load_scalar(const uint8_t* w, int64_t c) {
  if constexpr (T == DType::F32) {
    float v;
    std::memcpy(&v, w + 4 * c, 4);
    return v;
  } else if constexpr (T == DType::F16) {
    return fp16_to_f32(load_u16(w + 2 * c));
  } else {
    return bf16_to_f32(load_u16(w + 2 * c));
  }
}

template <DType T>
struct Scalar {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  static void tile(const uint8_t* w, int64_t, const float* x, int64_t x_stride, int64_t cols,
                   float* y, int64_t y_stride) {
    float acc[NX] = {};
    for (int64_t c = 0; c < cols; ++c) {
      const float wv = load_scalar<T>(w, c);
      for (int j = 0; j < NX; ++j) acc[j] += wv * x[j * x_stride + c];
    }
    for (int j = 0; j < NX; ++j) y[j * y_stride] = acc[j];
  }
};

#ifdef KV_HAVE_X86
#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))

KV_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <DType T>
KV_AVX2 inline __m256 load8(const uint8_t* w, int64_t c) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + c);
  } else if constexpr (T == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * c)));
  } else {
    const __m256i u =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * c)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
}

// Two accumulators per activation row hide the FMA latency.
template <DType T, int NX>
KV_AVX2 void dot_avx2_nx(const uint8_t* w, const float* x, int64_t x_stride, int64_t cols, float* y,
                         int64_t y_stride) {
  __m256 a0[NX], a1[NX];
  for (int j = 0; j < NX; ++j) a0[j] = a1[j] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m256 w0 = load8<T>(w, c), w1 = load8<T>(w, c + 8);
    for (int j = 0; j < NX; ++j) {
      a0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j * x_stride + c), a0[j]);
      a1[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j * x_stride + c + 8), a1[j]);
    }
  }
  for (; c + 8 <= cols; c += 8) {
    const __m256 w0 = load8<T>(w, c);
    for (int j = 0; j < NX; ++j)
      a0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j * x_stride + c), a0[j]);
  }
  float tail[NX];
  for (int j = 0; j < NX; ++j) tail[j] = 0.f;
  for (; c < cols; ++c) {
    const float wv = load_scalar<T>(w, c);
    for (int j = 0; j < NX; ++j) tail[j] += wv * x[j * x_stride + c];
  }
  for (int j = 0; j < NX; ++j) y[j * y_stride] = hsum(_mm256_add_ps(a0[j], a1[j])) + tail[j];
}

// One weight row per tile: two accumulators × 4 rows already use 8 of the
// 16 registers; a second weight row would spill.
template <DType T>
struct Avx2 {
  static constexpr int kNW = 1;
  template <int NW, int NX>
  static void tile(const uint8_t* w, int64_t, const float* x, int64_t x_stride, int64_t cols,
                   float* y, int64_t y_stride) {
    dot_avx2_nx<T, NX>(w, x, x_stride, cols, y, y_stride);
  }
};
#endif  // KV_HAVE_X86

}  // namespace

DotFn float_dot_kernel(DType type, SimdLevel level) {
#ifdef KV_HAVE_X86
  if (level >= SimdLevel::kAvx2) {
    switch (type) {
      case DType::F32:
        return dispatch_tile<Avx2<DType::F32>, float>;
      case DType::F16:
        return dispatch_tile<Avx2<DType::F16>, float>;
      case DType::BF16:
        return dispatch_tile<Avx2<DType::BF16>, float>;
      default:
        return nullptr;
    }
  }
#endif
  (void)level;
  switch (type) {
    case DType::F32:
      return dispatch_tile<Scalar<DType::F32>, float>;
    case DType::F16:
      return dispatch_tile<Scalar<DType::F16>, float>;
    case DType::BF16:
      return dispatch_tile<Scalar<DType::BF16>, float>;
    default:
      return nullptr;
  }
}

}  // namespace kvasir::cpu::detail
