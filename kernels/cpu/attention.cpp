// paged_attention: causal attention over the paged KV cache with a streaming
// (online) softmax.
//
// Work item = (row, kv head, chunk of up to kTokChunk new tokens). With
// AVX2 or AVX-512 and a head dim they divide, every item takes the tiled path
// (attention_tiled.cpp); otherwise an item walks the row's blocks once here:
// each block's keys and values for that kv head are converted to f32 once
// and serve every query of the item: all the query heads of the group (GQA)
// times all its tokens. Items are taken dynamically from an atomic counter,
// so a long prefill chunk and many decodes balance.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "base/check.h"
#include "base/half.h"
#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/paged_kv.h"
#include "kernels/cpu/paged_kv_internal.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/simd_math.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_HAVE_X86 1
#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace kvasir::cpu {
namespace {

constexpr int kTokChunk = 16;

using Item = detail::AttnItem;
using Job = detail::AttnJob;

// Per-thread scratch, grow-only.
struct Scratch {
  std::vector<float> acc;         // [nq, hd]
  std::vector<float> m, l;        // [nq]
  std::vector<float> kbuf, vbuf;  // [bs, hd]
  std::vector<float> s;           // [bs]
  void reserve(size_t nq, size_t hd, size_t bs) {
    if (acc.size() < nq * hd) acc.resize(nq * hd);
    if (m.size() < nq) m.resize(nq), l.resize(nq);
    if (kbuf.size() < bs * hd) kbuf.resize(bs * hd), vbuf.resize(bs * hd);
    if (s.size() < bs) s.resize(bs);
  }
};

// ---- the vector helpers, one set per level --------------------------------

struct ScalarOps {
  static float dot(const float* a, const float* b, int64_t n) {
    float s = 0.f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
  }
  static void scale(float* a, float c, int64_t n) {
    for (int64_t i = 0; i < n; ++i) a[i] *= c;
  }
  static void axpy(float* a, float c, const float* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) a[i] += c * b[i];
  }
  static void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
  }
  // out[j] = dot(q, k + j * n) for j < 4.
  static void dot4(const float* q, const float* k, int64_t n, float* out) {
    for (int j = 0; j < 4; ++j) out[j] = dot(q, k + j * n, n);
  }
  // s[j] = exp(s[j] - m); returns the sum.
  static float exp_shift(float* s, float m, int64_t n) {
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - m));
    return sum;
  }
  static void axpy2(float* a, float c0, const float* b0, float c1, const float* b1, int64_t n) {
    for (int64_t i = 0; i < n; ++i) a[i] += c0 * b0[i] + c1 * b1[i];
  }
};

#ifdef KV_HAVE_X86
struct Avx2Ops {
  KV_AVX2 static float dot(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
  }
  KV_AVX2 static void scale(float* a, float c, int64_t n) {
    const __m256 cv = _mm256_set1_ps(c);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), cv));
    for (; i < n; ++i) a[i] *= c;
  }
  KV_AVX2 static void axpy(float* a, float c, const float* b, int64_t n) {
    const __m256 cv = _mm256_set1_ps(c);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(a + i, _mm256_fmadd_ps(cv, _mm256_loadu_ps(b + i), _mm256_loadu_ps(a + i)));
    for (; i < n; ++i) a[i] += c * b[i];
  }
  KV_AVX2 static void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
  }
  KV_AVX2 static void dot4(const float* q, const float* k, int64_t n, float* out) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      s0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + i), s0);
      s1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + n + i), s1);
      s2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 2 * n + i), s2);
      s3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 3 * n + i), s3);
    }
    // Lanes: hadd twice leaves, per 128-bit half, (s0, s1, s2, s3) partial sums.
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    _mm_storeu_ps(out, r);
    for (; i < n; ++i)
      for (int j = 0; j < 4; ++j) out[j] += q[i] * k[j * n + i];
  }
  KV_AVX2 static float exp_shift(float* s, float m, int64_t n) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 e = detail::exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
      _mm256_storeu_ps(s + j, e);
      sum = _mm256_add_ps(sum, e);
    }
    float total = detail::hsum256(sum);
    for (; j < n; ++j) total += (s[j] = std::exp(s[j] - m));
    return total;
  }
  KV_AVX2 static void axpy2(float* a, float c0, const float* b0, float c1, const float* b1,
                            int64_t n) {
    const __m256 v0 = _mm256_set1_ps(c0), v1 = _mm256_set1_ps(c1);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 x = _mm256_fmadd_ps(v0, _mm256_loadu_ps(b0 + i), _mm256_loadu_ps(a + i));
      _mm256_storeu_ps(a + i, _mm256_fmadd_ps(v1, _mm256_loadu_ps(b1 + i), x));
    }
    for (; i < n; ++i) a[i] += c0 * b0[i] + c1 * b1[i];
  }
};
#endif

// ---- one work item --------------------------------------------------------

template <class Ops>
inline void run_item(const Job& job, const Item& it, Scratch& sc) {
  const KvLayerView& kv = *job.kv;
  const AttnRow& row = job.rows[it.row];
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  const int G = job.group;
  const int nt = it.t1 - it.t0;
  const int64_t nq = int64_t(nt) * G;  // query (t, h) at index t_local * G + h_local
  sc.reserve(size_t(nq), size_t(hd), size_t(bs));
  float* acc = sc.acc.data();
  float* m = sc.m.data();
  float* l = sc.l.data();
  float* s = sc.s.data();
  std::fill(acc, acc + nq * hd, 0.f);
  std::fill(m, m + nq, -std::numeric_limits<float>::infinity());
  std::fill(l, l + nq, 0.f);

  const int64_t tok0 = job.tok_off[it.row] + it.t0;  // global index of the first token
  auto qptr = [&](int t, int h) {
    return job.q + ((tok0 + t) * job.n_heads + int64_t(it.head) * G + h) * hd;
  };
  const int64_t first_pos = int64_t(row.pos0) + it.t0;
  const int64_t last_pos = int64_t(row.pos0) + it.t1 - 1;
  // Blocks wholly before the first query's window are not read.
  for (int64_t lb = detail::window_start(job, first_pos) / bs; lb <= last_pos / bs; ++lb) {
    const int64_t start = lb * bs;
    const int64_t phys = row.block_table[lb];
    const int64_t off = detail::kv_offset(kv, phys, it.head, 0);
    const int64_t avail = std::min(bs, last_pos - start + 1);  // slots any query may see
    const float *kb, *vb;
    if (kv.type == DType::F32) {
      kb = static_cast<const float*>(kv.k) + off;
      vb = static_cast<const float*>(kv.v) + off;
    } else {
      Ops::f16_to_f32(static_cast<const uint16_t*>(kv.k) + off, sc.kbuf.data(), avail * hd);
      Ops::f16_to_f32(static_cast<const uint16_t*>(kv.v) + off, sc.vbuf.data(), avail * hd);
      kb = sc.kbuf.data();
      vb = sc.vbuf.data();
    }
    // Tokens before this block's start see none of it.
    const int t_begin = int(std::max<int64_t>(0, start - first_pos));
    for (int t = t_begin; t < nt; ++t) {
      const int64_t cnt = std::min(bs, first_pos + t - start + 1);
      // Slots [lo, cnt) of the block are in the query's window (lo 0 without one).
      const int64_t lo = std::max<int64_t>(0, detail::window_start(job, first_pos + t) - start);
      if (lo >= cnt) continue;
      const int64_t n = cnt - lo;
      const float* kl = kb + lo * hd;
      const float* vl = vb + lo * hd;
      for (int h = 0; h < G; ++h) {
        const int64_t qi = int64_t(t) * G + h;
        const float* qv = qptr(t, h);
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) Ops::dot4(qv, kl + j * hd, hd, s + j);
        for (; j < n; ++j) s[j] = Ops::dot(qv, kl + j * hd, hd);
        float bmax = -std::numeric_limits<float>::infinity();
        for (j = 0; j < n; ++j) bmax = std::max(bmax, s[j] *= job.scale);
        float* a = acc + qi * hd;
        if (bmax > m[qi]) {
          const float corr = std::exp(m[qi] - bmax);  // 0 on the first block
          l[qi] *= corr;
          Ops::scale(a, corr, hd);
          m[qi] = bmax;
        }
        l[qi] += Ops::exp_shift(s, m[qi], n);
        for (j = 0; j + 2 <= n; j += 2)
          Ops::axpy2(a, s[j], vl + j * hd, s[j + 1], vl + (j + 1) * hd, hd);
        if (j < n) Ops::axpy(a, s[j], vl + j * hd, hd);
      }
    }
  }
  for (int t = 0; t < nt; ++t) {
    for (int h = 0; h < G; ++h) {
      const int64_t qi = int64_t(t) * G + h;
      float* o = job.out + ((tok0 + t) * job.n_heads + int64_t(it.head) * G + h) * hd;
      const float inv = detail::out_factor(job, int64_t(it.head) * G + h, m[qi], l[qi]);
      const float* a = acc + qi * hd;
      for (int64_t i = 0; i < hd; ++i) o[i] = a[i] * inv;
    }
  }
}

void run_item_scalar(const Job& job, const Item& it, Scratch& sc) {
  run_item<ScalarOps>(job, it, sc);
}

#ifdef KV_HAVE_X86
// flatten: inline the Ops helpers (and everything else) so the whole item is
// compiled for AVX2.
__attribute__((target("avx2,fma,f16c"), flatten)) void run_item_avx2(const Job& job, const Item& it,
                                                                     Scratch& sc) {
  run_item<Avx2Ops>(job, it, sc);
}
#endif

}  // namespace

void paged_attention(const KvLayerView& kv, const AttnRow* rows, int n_rows, const float* q,
                     int n_heads, float scale, float* out, ThreadPool* pool, int32_t window,
                     const float* sinks) {
  KV_CHECK(window >= 0, "paged_attention: window {} is negative", window);
  const int64_t total = detail::check_kv_rows(kv, rows, n_rows, window);
  KV_CHECK(n_heads > 0 && n_heads % kv.n_kv_heads == 0,
           "paged_attention: {} query heads is not a multiple of {} kv heads", n_heads,
           kv.n_kv_heads);
  KV_CHECK(std::isfinite(scale), "paged_attention: scale {} is not finite", scale);
  if (total == 0) return;
  KV_CHECK(q != nullptr && out != nullptr, "paged_attention: null q or out");

  thread_local std::vector<int64_t> tok_off;  // grow-only
  thread_local std::vector<Item> items;
  if (tok_off.size() < size_t(n_rows)) tok_off.resize(size_t(n_rows));
  items.clear();
  int64_t off = 0;
  for (int r = 0; r < n_rows; ++r) {
    tok_off[size_t(r)] = off;
    off += rows[r].n_tokens;
    for (int32_t t0 = 0; t0 < rows[r].n_tokens; t0 += kTokChunk)
      for (int32_t h = 0; h < kv.n_kv_heads; ++h)
        items.push_back({r, h, t0, std::min(rows[r].n_tokens, t0 + kTokChunk)});
  }
  // Longest contexts first: better balance with dynamic scheduling. (std::sort:
  // stable_sort would allocate; the order does not change any result.)
  std::sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    const int64_t la = int64_t(rows[a.row].pos0) + a.t1, lb = int64_t(rows[b.row].pos0) + b.t1;
    if (la != lb) return la > lb;
    if (a.row != b.row) return a.row < b.row;
    if (a.t0 != b.t0) return a.t0 < b.t0;
    return a.head < b.head;
  });

  const Job job{&kv,   rows,   tok_off.data(), q, out, n_heads, n_heads / kv.n_kv_heads,
                scale, window, sinks};
  // Every item of a call takes the same path: a query's result must not
  // depend on which other queries share its item (a prefill split into other
  // chunks, a prefix-cache hit, another stage count all give the same bits).
  auto fn = run_item_scalar;
  void (*tiled)(const Job&, const Item&) = nullptr;
#ifdef KV_HAVE_X86
  if (simd_level() >= SimdLevel::kAvx2) fn = run_item_avx2;
  if (simd_level() >= SimdLevel::kAvx512 &&
      kv.head_dim % detail::tiled_head_dim_multiple(true) == 0)
    tiled = detail::attend_item_tiled_avx512;
  else if (simd_level() >= SimdLevel::kAvx2 &&
           kv.head_dim % detail::tiled_head_dim_multiple(false) == 0)
    tiled = detail::attend_item_tiled_avx2;
#endif
  const int64_t n_items = int64_t(items.size());
  const Item* item_data = items.data();
  std::atomic<int64_t> next{0};
  auto body = [&](int64_t, int64_t, int) {
    thread_local Scratch sc;
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
      const Item& it = item_data[i];
      if (tiled)
        tiled(job, it);
      else
        fn(job, it, sc);
    }
  };
  if (pool && pool->size() > 1 && n_items > 1)
    pool->parallel_for(std::min<int64_t>(pool->size(), n_items), body);
  else
    body(0, 1, 0);
}

}  // namespace kvasir::cpu
