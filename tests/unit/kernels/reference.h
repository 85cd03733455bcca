// tests/unit/kernels/reference.h — plain scalar references for the CPU
// kernels, written from the formats' definitions (base/dtype.h) and the
// textbook formulas, in double where it matters. Slow on purpose; they share
// no code with kernels/cpu.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "base/half.h"
#include "base/tensor.h"

namespace kvasir::ref {

// ---- weights --------------------------------------------------------------

// A weight tensor that owns its bytes.
struct OwnedWeight {
  std::vector<uint8_t> bytes;
  TensorView view;
};

inline uint16_t rand_half(std::mt19937& rng, float lo, float hi) {
  return f32_to_fp16(std::uniform_real_distribution<float>(lo, hi)(rng));
}

inline void put_u16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
inline uint16_t get_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Random weights [rows, cols] of type t: every quantised byte random (all
// nibbles and int8 values, -128 included), scales positive, Q4_1 minimums of
// either sign.
inline OwnedWeight random_weight(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t rb = int64_t(*dtype_row_bytes(t, cols));
  OwnedWeight w;
  w.bytes.resize(size_t(rb * rows));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  uint8_t* p = w.bytes.data();
  const int64_t nb = cols / 32;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = p + r * rb;
    switch (t) {
      case DType::F32:
        for (int64_t c = 0; c < cols; ++c) {
          const float v = val(rng);
          std::memcpy(row + 4 * c, &v, 4);
        }
        break;
      case DType::F16:
        for (int64_t c = 0; c < cols; ++c) put_u16(row + 2 * c, f32_to_fp16(val(rng)));
        break;
      case DType::BF16:
        for (int64_t c = 0; c < cols; ++c) put_u16(row + 2 * c, f32_to_bf16(val(rng)));
        break;
      case DType::Q8_0:
        for (int64_t b = 0; b < nb; ++b) {
          put_u16(row + b * 34, rand_half(rng, 0.001f, 0.01f));
          for (int i = 0; i < 32; ++i) row[b * 34 + 2 + i] = uint8_t(byte(rng));
        }
        break;
      case DType::Q4_0:
        for (int64_t b = 0; b < nb; ++b) {
          put_u16(row + b * 18, rand_half(rng, 0.01f, 0.1f));
          for (int i = 0; i < 16; ++i) row[b * 18 + 2 + i] = uint8_t(byte(rng));
        }
        break;
      case DType::Q4_1:
        for (int64_t b = 0; b < nb; ++b) {
          put_u16(row + b * 20, rand_half(rng, 0.01f, 0.1f));
          put_u16(row + b * 20 + 2, rand_half(rng, -0.5f, 0.5f));
          for (int i = 0; i < 16; ++i) row[b * 20 + 4 + i] = uint8_t(byte(rng));
        }
        break;
      case DType::Q5_0:
        for (int64_t b = 0; b < nb; ++b) {
          put_u16(row + b * 22, rand_half(rng, 0.01f, 0.1f));
          for (int i = 0; i < 20; ++i) row[b * 22 + 2 + i] = uint8_t(byte(rng));
        }
        break;
      case DType::MXFP4:
        // Scales 2^-8..2^-1 (E8M0 120..127): weights up to 6 in magnitude.
        for (int64_t b = 0; b < nb; ++b) {
          row[b * 17] = uint8_t(120 + byte(rng) % 8);
          for (int i = 0; i < 16; ++i) row[b * 17 + 1 + i] = uint8_t(byte(rng));
        }
        break;
      case DType::Q4_K:
      case DType::Q5_K:
      case DType::Q6_K: {
        // All bytes random (every scale, min and quant pattern), then sane
        // super-block scales: d ≈ 1e-3 so weights stay O(1).
        const int64_t bytes = dtype_info(t).bytes;
        for (int64_t b = 0; b < cols / 256; ++b) {
          uint8_t* blk = row + b * bytes;
          for (int64_t i = 0; i < bytes; ++i) blk[i] = uint8_t(byte(rng));
          if (t == DType::Q6_K) {
            put_u16(blk + 208, rand_half(rng, 0.0005f, 0.002f));
          } else {
            put_u16(blk, rand_half(rng, 0.0005f, 0.002f));
            put_u16(blk + 2, rand_half(rng, 0.0005f, 0.002f));
          }
        }
        break;
      }
      default:
        break;
    }
  }
  w.view.type = t;
  w.view.n_dims = 2;
  w.view.ne[0] = cols;
  w.view.ne[1] = rows;
  w.view.data = w.bytes.data();
  w.view.nbytes = w.bytes.size();
  return w;
}

// Weight i (0..255) of a K-quant block, straight from ggml's definitions
// (dequantize_row_q4_K / q5_K / q6_K), written independently of kquant.h.
inline float kquant_weight(DType t, const uint8_t* blk, int i) {
  if (t == DType::Q6_K) {
    const int half = i / 128, l = i % 32, quarter = (i % 128) / 32;  // y[l + 32·quarter]
    const uint8_t* ql = blk + 64 * half;
    const uint8_t* qh = blk + 128 + 32 * half;
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * half);
    const int low = quarter == 0   ? ql[l] & 0xF
                    : quarter == 1 ? ql[l + 32] & 0xF
                    : quarter == 2 ? ql[l] >> 4
                                   : ql[l + 32] >> 4;
    const int q = (low | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
    return fp16_to_f32(get_u16(blk + 208)) * float(sc[l / 16 + 2 * quarter]) * float(q);
  }
  const bool q5 = t == DType::Q5_K;
  const int j = i / 32, l = i % 32;  // sub-block, index in it
  const uint8_t* sc = blk + 4;
  int scale, min;
  if (j < 4) {
    scale = sc[j] & 63;
    min = sc[j + 4] & 63;
  } else {
    scale = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
    min = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
  const uint8_t* qs = blk + (q5 ? 48 : 16) + 32 * (j / 2);
  int q = j % 2 ? qs[l] >> 4 : qs[l] & 0xF;
  if (q5 && (blk[16 + l] & (1 << j))) q += 16;
  const float d = fp16_to_f32(get_u16(blk)), dmin = fp16_to_f32(get_u16(blk + 2));
  return d * float(scale) * float(q) - dmin * float(min);
}

// Row r of w as f32, straight from the block definitions.
inline std::vector<float> dequant_row(const TensorView& w, int64_t r) {
  const int64_t cols = w.cols();
  const int64_t rb = int64_t(*dtype_row_bytes(w.type, cols));
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * rb;
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t b = c / 32, i = c % 32;
    float v = 0.f;
    switch (w.type) {
      case DType::F32:
        std::memcpy(&v, row + 4 * c, 4);
        break;
      case DType::F16:
        v = fp16_to_f32(get_u16(row + 2 * c));
        break;
      case DType::BF16:
        v = bf16_to_f32(get_u16(row + 2 * c));
        break;
      case DType::Q8_0: {
        const uint8_t* blk = row + b * 34;
        v = fp16_to_f32(get_u16(blk)) * float(int8_t(blk[2 + i]));
        break;
      }
      case DType::Q4_0: {
        const uint8_t* blk = row + b * 18;
        const int q = i < 16 ? (blk[2 + i] & 15) : (blk[2 + i - 16] >> 4);
        v = fp16_to_f32(get_u16(blk)) * float(q - 8);
        break;
      }
      case DType::Q4_1: {
        const uint8_t* blk = row + b * 20;
        const int q = i < 16 ? (blk[4 + i] & 15) : (blk[4 + i - 16] >> 4);
        v = fp16_to_f32(get_u16(blk)) * float(q) + fp16_to_f32(get_u16(blk + 2));
        break;
      }
      case DType::Q5_0: {
        const uint8_t* blk = row + b * 22;
        const uint32_t qh = uint32_t(blk[2]) | uint32_t(blk[3]) << 8 | uint32_t(blk[4]) << 16 |
                            uint32_t(blk[5]) << 24;
        const int nib = i < 16 ? (blk[6 + i] & 15) : (blk[6 + i - 16] >> 4);
        v = fp16_to_f32(get_u16(blk)) * float((nib | int((qh >> i) & 1) << 4) - 16);
        break;
      }
      case DType::MXFP4: {
        // OCP microscaling: e2m1 (sign, 2 exponent bits bias 1, 1 mantissa
        // bit) times 2^(e - 127).
        const uint8_t* blk = row + b * 17;
        const int code = i < 16 ? (blk[1 + i] & 15) : (blk[1 + i - 16] >> 4);
        const int exp = (code >> 1) & 3, man = code & 1;
        const float mag =
            exp == 0 ? 0.5f * float(man) : std::ldexp(1.f + 0.5f * float(man), exp - 1);
        v = (code & 8 ? -mag : mag) * std::ldexp(1.f, int(blk[0]) - 127);
        break;
      }
      case DType::Q4_K:
      case DType::Q5_K:
      case DType::Q6_K:
        v = kquant_weight(w.type, row + (c / 256) * dtype_info(w.type).bytes, int(c % 256));
        break;
      default:
        break;
    }
    out[size_t(c)] = v;
  }
  return out;
}

// y = x · Wᵀ with dequantised weights and f32 activations, in double.
// Also returns abs_sum[j, r] = Σ|w||x| (for tolerances) and, for quantised
// types, qerr[j, r] = the bound Σ_blocks Σ|w| · amax(x_block) / 254 on the
// error of 8-bit activation quantisation (round to nearest: |x - d q| ≤ d/2,
// d = amax / 127). The activation blocks are of 32 but of 256 for the
// K-quants (BlockQ8K, as llama.cpp's Q8_K), so their amax, and the bound,
// is taken per 256.
struct MatmulRef {
  std::vector<double> y, abs_sum, qerr;  // [n, rows]
};

inline MatmulRef matmul(const TensorView& w, const float* x, int64_t n) {
  const int64_t rows = w.rows(), cols = w.cols();
  const bool kquant = w.type == DType::Q4_K || w.type == DType::Q5_K || w.type == DType::Q6_K;
  const int64_t act_block = kquant ? 256 : 32;
  MatmulRef out;
  out.y.assign(size_t(n * rows), 0.0);
  out.abs_sum.assign(size_t(n * rows), 0.0);
  out.qerr.assign(size_t(n * rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> wr = dequant_row(w, r);
    for (int64_t j = 0; j < n; ++j) {
      const float* xj = x + j * cols;
      double s = 0, a = 0, q = 0;
      for (int64_t c0 = 0; c0 < cols; c0 += act_block) {
        double amax = 0, wabs = 0;
        for (int64_t c = c0; c < std::min(c0 + act_block, cols); ++c) {
          s += double(wr[size_t(c)]) * xj[c];
          a += std::fabs(double(wr[size_t(c)]) * xj[c]);
          amax = std::max(amax, std::fabs(double(xj[c])));
          wabs += std::fabs(double(wr[size_t(c)]));
        }
        q += wabs * amax / 254.0;
      }
      out.y[size_t(j * rows + r)] = s;
      out.abs_sum[size_t(j * rows + r)] = a;
      out.qerr[size_t(j * rows + r)] = q;
    }
  }
  return out;
}

// ---- norms and elementwise ------------------------------------------------

inline void rmsnorm(const float* x, const float* w, float eps, int64_t n, int64_t dim, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = float(x[r * dim + i] * inv * w[i]);
  }
}

inline double silu(double g) {
  return g / (1.0 + std::exp(-g));
}

// ---- rope -----------------------------------------------------------------

// Rotates one head vector v[head_dim] at position pos with angles computed
// in double from theta (no scaling). adjacent: pairs (2i, 2i+1); else (i, i + rot/2).
inline void rope_head(float* v, int head_dim, int rot_dim, double theta, double pos,
                      bool adjacent) {
  (void)head_dim;
  const int half = rot_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double inv = std::pow(theta, -2.0 * i / rot_dim);
    const double a = pos * inv;
    const int i0 = adjacent ? 2 * i : i, i1 = adjacent ? 2 * i + 1 : i + half;
    const double x0 = v[i0], x1 = v[i1];
    v[i0] = float(x0 * std::cos(a) - x1 * std::sin(a));
    v[i1] = float(x0 * std::sin(a) + x1 * std::cos(a));
  }
}

// ---- attention ------------------------------------------------------------

// Naive causal attention of one query head over a dense history.
//   k_hist, v_hist: [P, n_kv, hd]; q: [hd]; attends positions 0..pos, or
//   with window > 0 the last `window` of them (the others masked: -inf).
//   sink: NAN for none, else a logit that joins the softmax with no value
//   (gpt-oss's attention sinks).
inline void attend(const float* q, const float* k_hist, const float* v_hist, int n_kv, int hd,
                   int kv_head, int pos, double scale, float* out, int window = 0,
                   double sink = NAN) {
  std::vector<double> s(static_cast<size_t>(pos + 1));
  double mx = -INFINITY;
  for (int j = 0; j <= pos; ++j) {
    if (window > 0 && pos - j >= window) {
      s[size_t(j)] = -INFINITY;
      continue;
    }
    const float* k = k_hist + (int64_t(j) * n_kv + kv_head) * hd;
    double d = 0;
    for (int i = 0; i < hd; ++i) d += double(q[i]) * k[i];
    s[size_t(j)] = d * scale;
    mx = std::max(mx, s[size_t(j)]);
  }
  if (!std::isnan(sink)) mx = std::max(mx, sink);
  double l = std::isnan(sink) ? 0.0 : std::exp(sink - mx);
  for (auto& e : s) l += (e = std::exp(e - mx));
  for (int i = 0; i < hd; ++i) {
    double o = 0;
    for (int j = 0; j <= pos; ++j)
      o += s[size_t(j)] * v_hist[(int64_t(j) * n_kv + kv_head) * hd + i];
    out[i] = float(o / l);
  }
}

// ---- mixture of experts ---------------------------------------------------

// The router, token by token, from its definition: p = softmax(logits) over
// all n_experts, the k largest (equal p: lower id first), their p divided by
// their sum when norm. ids / weights: [n, k].
inline void moe_route(const float* logits, int64_t n, int n_experts, int k, bool norm,
                      std::vector<int32_t>& ids, std::vector<double>& weights) {
  ids.assign(size_t(n * k), -1);
  weights.assign(size_t(n * k), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> p(static_cast<size_t>(n_experts));
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < n_experts; ++e) mx = std::max(mx, double(logits[t * n_experts + e]));
    for (int e = 0; e < n_experts; ++e)
      sum += (p[size_t(e)] = std::exp(double(logits[t * n_experts + e]) - mx));
    std::vector<bool> taken(static_cast<size_t>(n_experts), false);
    double chosen = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < n_experts; ++e)
        if (!taken[size_t(e)] && (best < 0 || p[size_t(e)] > p[size_t(best)])) best = e;
      taken[size_t(best)] = true;
      ids[size_t(t * k + j)] = best;
      weights[size_t(t * k + j)] = p[size_t(best)] / sum;
      chosen += p[size_t(best)] / sum;
    }
    if (norm)
      for (int j = 0; j < k; ++j) weights[size_t(t * k + j)] /= chosen;
  }
}

// One expert's SwiGLU FFN on one token, in double with the dequantised weights
// and unrounded activations: down · (silu(gate · x) ⊙ up · x).
inline std::vector<double> expert_ffn(const TensorView& gate, const TensorView& up,
                                      const TensorView& down, const float* x) {
  const int64_t hidden = gate.cols(), ffn = gate.rows();
  std::vector<double> h(static_cast<size_t>(ffn));
  for (int64_t r = 0; r < ffn; ++r) {
    const std::vector<float> g = dequant_row(gate, r), u = dequant_row(up, r);
    double sg = 0, su = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      sg += double(g[size_t(c)]) * x[c];
      su += double(u[size_t(c)]) * x[c];
    }
    h[size_t(r)] = silu(sg) * su;
  }
  std::vector<double> y(static_cast<size_t>(hidden));
  for (int64_t r = 0; r < hidden; ++r) {
    const std::vector<float> d = dequant_row(down, r);
    double s = 0;
    for (int64_t c = 0; c < ffn; ++c) s += double(d[size_t(c)]) * h[size_t(c)];
    y[size_t(r)] = s;
  }
  return y;
}

// out[t] = Σ_j weights[t, j] · FFN_{ids[t, j]}(x[t]) over the j whose expert
// lies in [first, first + gate.size()): one token at a time, no grouping.
inline std::vector<double> moe_ffn(const std::vector<TensorView>& gate,
                                   const std::vector<TensorView>& up,
                                   const std::vector<TensorView>& down, int first, const float* x,
                                   int64_t n, int k, const std::vector<int32_t>& ids,
                                   const std::vector<double>& weights) {
  const int64_t hidden = gate[0].cols();
  std::vector<double> out(size_t(n * hidden), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = ids[size_t(t * k + j)] - first;
      if (e < 0 || e >= int(gate.size())) continue;
      const auto y = expert_ffn(gate[size_t(e)], up[size_t(e)], down[size_t(e)], x + t * hidden);
      for (int64_t c = 0; c < hidden; ++c)
        out[size_t(t * hidden + c)] += weights[size_t(t * k + j)] * y[size_t(c)];
    }
  return out;
}

}  // namespace kvasir::ref
