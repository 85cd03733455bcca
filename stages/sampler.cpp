// stages/sampler.cpp — see sampler.h for the order of operations and why.
#include "stages/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "base/check.h"
#include "kernels/cpu/logits.h"

namespace kvasir {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMaxFinite = std::numeric_limits<float>::max();
// Below this temperature the sampler is greedy (vLLM's _SAMPLING_EPS): a
// division by a near-zero temperature would only turn ties into coin flips.
constexpr float kGreedyBelow = 1e-5f;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Canonical order of candidates: higher value first, then lower id. A total
// order, so which tokens survive top-k / top-p and the order of the draw
// depend only on the values, never on the sort algorithm.
struct ByValueDesc {
  template <class C>
  bool operator()(const C& a, const C& b) const {
    return a.v > b.v || (a.v == b.v && a.id < b.id);
  }
};

float clamp_finite(float x) {
  // -inf (a masked token) stays masked; overflow from a tiny repetition
  // penalty becomes the largest finite value instead of +inf.
  if (x > kMaxFinite) return kMaxFinite;
  if (x < -kMaxFinite && x != -kInf) return -kMaxFinite;
  return x;
}

// Penalises in place; if `saved` is given, records each overwritten raw value
// first so the caller can restore it.
void penalize(float* logits, int32_t vocab, const SamplingParams& p, const SequenceHistory& hist,
              std::vector<std::pair<int32_t, float>>* saved) {
  const float rep = p.repetition_penalty;
  const float freq = p.frequency_penalty;
  const float pres = p.presence_penalty;
  for (const auto& e : hist.entries()) {
    if (e.token < 0 || e.token >= vocab) continue;
    float x = logits[e.token];
    if (saved) saved->emplace_back(e.token, x);
    if (rep != 1.0f && (e.prompt > 0 || e.output > 0)) x = x > 0 ? x / rep : x * rep;
    if (e.output > 0) x = x - freq * static_cast<float>(e.output) - pres;
    logits[e.token] = clamp_finite(x);
  }
}

// The vocabulary-wide passes (sanitise and max, the exp sums, the greedy
// scan) are kernels/cpu/logits.h's: SIMD-wide, with the bits of one 4-lane
// order at every level, so a sampled token never depends on the CPU.
using cpu::logits_exp_sum;
using cpu::logits_sanitize_max;

// Dense probabilities: prob[i] = exp((x_i - max) * inv_t), zeroed below
// min_p (the best token has exactly 1, so min_p is the threshold itself);
// block[b] = sum of block b. Returns the total (sum of block sums, in order).
double exp_blocks(const float* x, int32_t n, float max, float inv_t, float min_p, float* prob,
                  int32_t block_len, double* block) {
  double total = 0.0;
  for (int32_t b = 0, lo = 0; lo < n; ++b, lo += block_len) {
    const int32_t len = std::min(block_len, n - lo);
    double s = logits_exp_sum(x + lo, len, max, inv_t, prob + lo);
    if (min_p > 0.0f) {
      s = 0.0;
      for (int32_t i = lo; i < lo + len; ++i) {
        if (prob[i] < min_p) prob[i] = 0.0f;
        s += prob[i];
      }
    }
    block[b] = s;
    total += s;
  }
  return total;
}

// The largest power of two t such that the tokens with prob >= t surely hold
// `need` (margin for rounding: the exact cut is made later by a sequential
// sum over the sorted shortlist). Every token below t is outside the nucleus,
// because the tokens >= t come before it and already reach `need`.
float nucleus_threshold(const float* prob, int32_t n, double need) {
  // Mass per binary exponent (probabilities are in [0, 1]: exponent field
  // 0..127), four interleaved histograms to break store-to-load chains.
  double hist[4][128] = {};
  for (int32_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &prob[i], sizeof bits);
    hist[i & 3][(bits >> 23) & 127] += prob[i];
  }
  const double want = need * (1.0 + 1e-6);
  double mass = 0.0;
  for (int e = 127; e >= 1; --e) {
    mass += hist[0][e] + hist[1][e] + hist[2][e] + hist[3][e];
    if (mass >= want) return std::ldexp(1.0f, e - 127);
  }
  return 0.0f;
}

}  // namespace

// ---------------------------------------------------------------------------
// SequenceHistory

SequenceHistory::Entry& SequenceHistory::slot(int32_t token) {
  KV_CHECK(token >= 0, "sampler history: negative token id {}", token);
  auto [it, fresh] = index_.try_emplace(token, static_cast<uint32_t>(entries_.size()));
  if (fresh) entries_.push_back(Entry{token, 0, 0});
  return entries_[it->second];
}

void SequenceHistory::add_prompt(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) add_prompt(t);
}

void SequenceHistory::add_prompt(int32_t token) {
  ++slot(token).prompt;
  ++n_prompt_;
}

void SequenceHistory::add_output(int32_t token) {
  ++slot(token).output;
  ++n_output_;
}

void SequenceHistory::clear() {
  index_.clear();
  entries_.clear();
  n_prompt_ = n_output_ = 0;
}

int32_t SequenceHistory::prompt_count(int32_t token) const {
  auto it = index_.find(token);
  return it == index_.end() ? 0 : entries_[it->second].prompt;
}

int32_t SequenceHistory::output_count(int32_t token) const {
  auto it = index_.find(token);
  return it == index_.end() ? 0 : entries_[it->second].output;
}

// ---------------------------------------------------------------------------
// RNG

uint64_t sampler_random_bits(uint64_t seed, uint64_t position) {
  // SplitMix64: output n of the stream starting at state s is
  // mix64(s + (n + 1) * golden). Starting state mix64(seed) keeps nearby seeds
  // from giving shifted copies of one stream.
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  return mix64(mix64(seed) + (position + 1) * kGolden);
}

double sampler_uniform(uint64_t seed, uint64_t position) {
  return static_cast<double>(sampler_random_bits(seed, position) >> 11) * 0x1.0p-53;
}

void apply_penalties(float* logits, int32_t vocab, const SamplingParams& p,
                     const SequenceHistory& hist) {
  if (penalties_active(p)) penalize(logits, vocab, p, hist, nullptr);
}

// ---------------------------------------------------------------------------
// Sampler

float apply_token_mask(float* logits, int32_t vocab, std::span<const uint32_t> allowed) {
  float mx = -kInf;
  for (int32_t w = 0; w * 32 < vocab; ++w) {
    const int32_t base = w * 32, n = std::min<int32_t>(32, vocab - base);
    const uint32_t bits = size_t(w) < allowed.size() ? allowed[size_t(w)] : 0;
    if (bits == 0) {
      std::fill_n(logits + base, n, -kInf);
      continue;
    }
    for (int32_t j = 0; j < n; ++j) {
      if (bits >> j & 1u)
        mx = std::max(mx, logits[base + j]);
      else
        logits[base + j] = -kInf;
    }
  }
  return mx;
}

SampleResult Sampler::sample(float* logits, int32_t vocab, const SamplingParams& p,
                             const SequenceHistory* hist, uint64_t position,
                             std::span<const uint32_t> allowed, std::span<const LogitBias> bias) {
  KV_CHECK(logits != nullptr && vocab > 0, "sampler: no logits (vocab {})", vocab);
  KV_THROW_IF_ERROR(validate_sampling(p));
  KV_THROW_IF_ERROR(validate_logit_bias(bias, vocab));

  SampleResult r;

  // 1. Sanitise (NaN -> -inf, +inf -> max finite) and find the raw maximum;
  // a structured output's mask takes the tokens it refuses out here.
  float raw_max = logits_sanitize_max(logits, vocab);
  if (!allowed.empty()) raw_max = apply_token_mask(logits, vocab, allowed);
  if (raw_max == -kInf) {
    r.token = 0;
    r.logprob = -kInf;
    r.all_masked = true;
    return r;
  }

  // 2. Raw logprobs: log-sum-exp of the sanitised logits, then top-N.
  const double lse = static_cast<double>(raw_max) +
                     std::log(logits_exp_sum(logits, vocab, raw_max, 1.0f, nullptr));
  top_logprobs(logits, vocab, std::min<int>(p.logprobs, std::min<int32_t>(vocab, kMaxLogprobs)),
               lse, r);

  // 3. Logit biases, then the penalties (in place; raw values saved so the
  // chosen logprob stays raw).
  saved_.clear();
  const float max_bias = bias_saving(logits, vocab, bias, raw_max);
  const float max_pen = penalize_saving(logits, vocab, p, hist, max_bias);

  // 4. Greedy: argmax of the penalised logits, ties to the lowest id.
  // 5-9. Otherwise the truncations and the seeded draw.
  int32_t token = 0;
  if (p.temperature < kGreedyBelow) {
    token = cpu::logits_find(logits, vocab, max_pen);
    KV_CHECK(token < vocab, "sampler: the maximum {} is not in the row", max_pen);
  } else {
    token = draw(logits, vocab, p, max_pen, position);
  }

  // The raw logits back, and the chosen token's raw logprob.
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) logits[it->first] = it->second;
  r.token = token;
  r.logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  return r;
}

void Sampler::top_logprobs(const float* logits, int32_t vocab, int n_top, double lse,
                           SampleResult& r) {
  if (n_top <= 0) return;
  // Insertion into a small sorted array: one pass, N <= kMaxLogprobs.
  struct TopItem {
    float v;
    int32_t id;
  };
  std::array<TopItem, kMaxLogprobs> top;
  int n = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    const float x = logits[i];
    if (n == n_top && !(x > top[n - 1].v)) continue;  // ties keep the lower id
    int j = n < n_top ? n++ : n - 1;
    while (j > 0 && x > top[j - 1].v) {
      top[j] = top[j - 1];
      --j;
    }
    top[j] = TopItem{x, i};
  }
  r.n_top = n;
  for (int j = 0; j < n; ++j)
    r.top[j] = {top[j].id, static_cast<float>(static_cast<double>(top[j].v) - lse)};
}

// A token the mask took out stays out (-inf plus a bias is -inf); a sum
// past the largest float is clamped to it, as the clean-up clamps +inf.
float Sampler::bias_saving(float* logits, int32_t vocab, std::span<const LogitBias> bias,
                           float raw_max) {
  if (bias.empty()) return raw_max;
  for (const LogitBias& b : bias) {
    float& x = logits[b.token];
    if (x == -kInf) continue;
    saved_.emplace_back(b.token, x);
    x = std::clamp(x + b.bias, -kMaxFinite, kMaxFinite);
  }
  return logits_sanitize_max(logits, vocab);  // nothing to sanitise: just the max
}

float Sampler::penalize_saving(float* logits, int32_t vocab, const SamplingParams& p,
                               const SequenceHistory* hist, float raw_max) {
  if (hist == nullptr || !penalties_active(p) || hist->entries().empty()) return raw_max;
  penalize(logits, vocab, p, *hist, &saved_);
  return logits_sanitize_max(logits, vocab);  // nothing to sanitise: just the max
}

int32_t Sampler::draw(const float* logits, int32_t vocab, const SamplingParams& p, float max_pen,
                      uint64_t position) {
  // 5-6. Probabilities exp((x - max) / T) after the truncations. Subtracting
  // the max first keeps huge logits and tiny temperatures finite; the best
  // token gets exactly 1 (which min-p relies on). Two shapes:
  //  - dense: prob_[vocab] in id order, block sums for the draw (no top-k,
  //    no top-p: the common "temperature only" request, and min-p);
  //  - shortlist: cand_ in canonical order (value desc, id asc), for top-k
  //    and for top-p.
  const float inv_t = 1.0f / p.temperature;
  const bool top_k = p.top_k > 0 && p.top_k < vocab;
  double total = 0.0;
  if (!top_k) {
    prob_.resize(vocab);
    block_.resize((vocab + kBlock - 1) / kBlock);
    // min-p is fused here only when no top-p has to come before it.
    const float dense_min_p = p.top_p < 1.0f ? 0.0f : p.min_p;
    total =
        exp_blocks(logits, vocab, max_pen, inv_t, dense_min_p, prob_.data(), kBlock, block_.data());
    if (p.top_p >= 1.0f) return draw_dense(sampler_uniform(p.seed, position), total);
    shortlist_nucleus(vocab, p.top_p * total);
  } else {
    total = shortlist_top_k(logits, vocab, static_cast<size_t>(p.top_k), max_pen, inv_t);
  }
  if (p.top_p < 1.0f) total = cut_top_p(p.top_p, total);
  if (p.min_p > 0.0f) total = cut_min_p(p.min_p);
  return draw_shortlist(sampler_uniform(p.seed, position) * total);
}

// Top-p without top-k: shortlist only the tokens that can be in the nucleus,
// found with a histogram of probabilities by binary exponent, so the sort is
// over the nucleus (plus at most one octave), not the vocabulary.
void Sampler::shortlist_nucleus(int32_t vocab, double need) {
  const float thr = nucleus_threshold(prob_.data(), vocab, need);
  cand_.clear();
  for (int32_t i = 0; i < vocab; ++i)
    if (prob_[i] >= thr && prob_[i] > 0.0f) cand_.push_back(Cand{prob_[i], i});
  std::sort(cand_.begin(), cand_.end(), ByValueDesc{});
}

// Top-k: the k best by canonical order, then their probabilities (the total
// is returned). A small k keeps a min-heap of the best so far while scanning
// (ids rise, so an equal value never displaces: ties keep the lower id); a
// large k partitions the whole vocabulary with nth_element.
double Sampler::shortlist_top_k(const float* logits, int32_t vocab, size_t k, float max_pen,
                                float inv_t) {
  cand_.clear();
  if (k <= 1024) {
    for (int32_t i = 0; i < vocab; ++i) {
      const float x = logits[i];
      if (x == -kInf) continue;
      if (cand_.size() < k) {
        cand_.push_back(Cand{x, i});
        std::push_heap(cand_.begin(), cand_.end(), ByValueDesc{});
      } else if (x > cand_.front().v) {
        std::pop_heap(cand_.begin(), cand_.end(), ByValueDesc{});
        cand_.back() = Cand{x, i};
        std::push_heap(cand_.begin(), cand_.end(), ByValueDesc{});
      }
    }
  } else {
    for (int32_t i = 0; i < vocab; ++i)
      if (logits[i] != -kInf) cand_.push_back(Cand{logits[i], i});
    if (k < cand_.size()) {
      std::nth_element(cand_.begin(), cand_.begin() + k, cand_.end(), ByValueDesc{});
      cand_.resize(k);
    }
  }
  std::sort(cand_.begin(), cand_.end(), ByValueDesc{});
  double total = 0.0;
  size_t n = 0;
  for (const Cand& c : cand_) {
    const float prob = std::exp((c.v - max_pen) * inv_t);
    if (prob > 0.0f) {  // underflowed tokens can never be drawn
      cand_[n++] = Cand{prob, c.id};
      total += prob;
    }
  }
  cand_.resize(n);  // never empty: the best token has prob 1
  return total;
}

// 7. Top-p: the smallest prefix (by probability) whose mass reaches top_p; a
//    token is kept if the mass strictly before it is < top_p. Keeps at least
//    one token. Returns the mass kept.
double Sampler::cut_top_p(float top_p, double total) {
  const double need = static_cast<double>(top_p) * total;
  double cum = 0.0;
  size_t cut = cand_.size();
  for (size_t i = 0; i < cand_.size(); ++i) {
    if (cum >= need) {
      cut = i;
      break;
    }
    cum += cand_[i].v;
  }
  cand_.resize(cut);
  return cum;
}

// 8. Min-p: drop tokens below min_p times the best probability (1 here).
//    Returns the mass kept.
double Sampler::cut_min_p(float min_p) {
  size_t k = 0;
  double total = 0.0;
  for (const Cand& c : cand_) {
    if (c.v >= min_p) {
      cand_[k++] = c;
      total += c.v;
    }
  }
  cand_.resize(k);
  return total;
}

// 9. The draw: inverse CDF over the survivors in their canonical order.
int32_t Sampler::draw_shortlist(double target) const {
  double cum = 0.0;
  for (const Cand& c : cand_) {
    cum += c.v;
    if (cum > target) return c.id;
  }
  return cand_.back().id;  // if rounding leaves target unreached
}

int32_t Sampler::draw_dense(double u, double total) const {
  // Walk the block sums, then the one block. The block sums were added in
  // float lanes and the walk adds in double, so the inner walk may fall a
  // rounding short: then the block's last drawable token is taken.
  const double target = u * total;
  double cum = 0.0;
  const int32_t vocab = static_cast<int32_t>(prob_.size());
  const size_t n_blocks = block_.size();
  size_t b = 0;
  for (; b + 1 < n_blocks; ++b) {
    if (cum + block_[b] > target && block_[b] > 0.0) break;
    cum += block_[b];
  }
  while (block_[b] == 0.0) {  // target past the end by rounding: last non-empty block
    --b;
    cum -= block_[b];
  }
  const int32_t lo = static_cast<int32_t>(b) * kBlock;
  const int32_t hi = std::min(vocab, lo + kBlock);
  int32_t last = -1;
  for (int32_t i = lo; i < hi; ++i) {
    if (prob_[i] <= 0.0f) continue;
    last = i;
    cum += prob_[i];
    if (cum > target) return i;
  }
  return last;
}

}  // namespace kvasir
