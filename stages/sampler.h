// stages/sampler.h — turns one row's logits into one token id, at the tail.
//
// The tail stage returns token ids, never logits, so every sampling control
// lives here: greedy, temperature, top-k, top-p, min-p, repetition /
// presence / frequency penalties, a seeded draw, and logprobs of the chosen
// token plus top-N alternatives.
//
// Order of operations (vLLM's, so users get the output they expect):
//   raw logits ─┬─> logprobs (log-softmax of the raw logits, see below)
//               └─> logit_bias ─> repetition penalty ─> frequency/presence penalties
//                   ─> greedy argmax            (temperature < 1e-5)
//                   ─> temperature ─> top-k ─> top-p ─> min-p ─> draw
//
// Reproducibility: the draw for a row is a pure function of
// (logits, params, history, seed, position). The uniform number comes from a
// counter-based RNG keyed by (seed, position of the token being sampled), not
// from a stream advanced once per call, so it does not depend on which other
// rows share the batch, on how many stages the plan has, or on a preempted
// sequence being recomputed: the same position gets the same draw. Requests
// without a seed get a random one from the bridge, so sample() itself never
// reads a clock or a global RNG.
//
// Logprobs are "raw": log-softmax of the logits before logit_bias,
// penalties and temperature (vLLM's default, and what an evaluation harness wants to read:
// the model's distribution, not the sampler's).
//
// NaN logits are treated as -inf (never sampled) and +inf as the largest
// finite float, so a broken row degrades instead of crashing the tail. A row
// whose logits are all NaN / -inf gets token 0 with all_masked set; the caller
// should finish that sequence with an error.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ipc/sampling.h"

namespace kvasir {

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;  // raw log-softmax of the chosen token
  // Top-N alternatives (N = params.logprobs) by raw logprob, highest first;
  // ties go to the lower id.
  int32_t n_top = 0;
  std::array<std::pair<int32_t, float>, kMaxLogprobs> top{};
  bool all_masked = false;  // every logit was NaN or -inf: token is meaningless
};

// Tokens a sequence has seen, counted separately for the prompt and the
// output: the repetition penalty looks at both, the presence and frequency
// penalties only at the output (as in vLLM and the OpenAI API). Tokens that a
// preemption makes the scheduler recompute stay counted as output: the tail
// keeps them in its sequences' records, by position (stages/tail_sequences.h).
class SequenceHistory {
 public:
  struct Entry {
    int32_t token;
    int32_t prompt;  // times seen in the prompt
    int32_t output;  // times generated
  };

  void add_prompt(std::span<const int32_t> tokens);
  void add_prompt(int32_t token);
  void add_output(int32_t token);
  void clear();

  int32_t prompt_count(int32_t token) const;
  int32_t output_count(int32_t token) const;
  int64_t n_prompt() const { return n_prompt_; }
  int64_t n_output() const { return n_output_; }
  // Distinct tokens, in first-seen order: the penalties walk this, so their
  // cost is the number of distinct tokens, not the vocabulary.
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  Entry& slot(int32_t token);

  std::unordered_map<int32_t, uint32_t> index_;  // token -> position in entries_
  std::vector<Entry> entries_;
  int64_t n_prompt_ = 0;
  int64_t n_output_ = 0;
};

// The counter-based RNG: SplitMix64's output number `position` of the stream
// whose start is derived from `seed`. Exposed for tests and for anyone who
// must reproduce a draw outside the engine.
uint64_t sampler_random_bits(uint64_t seed, uint64_t position);
// Uniform in [0, 1) with 53 bits of resolution.
double sampler_uniform(uint64_t seed, uint64_t position);

// Sets every logit whose bit in `allowed` is 0 (or that lies past the mask)
// to -inf; returns the largest logit left (-inf if none).
float apply_token_mask(float* logits, int32_t vocab, std::span<const uint32_t> allowed);

// Applies the repetition, frequency and presence penalties of `p` in place
// (no-op when all three are neutral). Tokens outside [0, vocab) in the history
// are ignored. Results are clamped to finite floats; -inf stays -inf.
void apply_penalties(float* logits, int32_t vocab, const SamplingParams& p,
                     const SequenceHistory& hist);

// One sampler per thread: it owns the scratch buffers, so steady-state
// sampling allocates nothing once they have grown to the vocabulary.
// penalties_active (ipc/sampling.h): such a row needs its sequence's
// history (the agent's, on the host).

class Sampler {
 public:
  // logits: [vocab], used as scratch (contents unspecified afterwards).
  // hist: may be null (no penalties). position: the sequence position of the
  // token being sampled (keys the RNG). allowed: empty, or a structured
  // output's token mask (bit id%32 of word id/32: id may come next; ids past
  // the mask are not allowed): the other logits become -inf right after
  // the NaN clean-up, before logprobs and penalties, as vLLM applies its
  // bitmask (the logprobs are then those of the masked distribution).
  // bias: the request's logit biases (ipc/sampling.h), added after the
  // logprobs, before the penalties (vLLM's order): a token the mask refused
  // stays refused. Throws kvasir::Error on invalid params
  // (validate_sampling, validate_logit_bias) or vocab <= 0.
  SampleResult sample(float* logits, int32_t vocab, const SamplingParams& p,
                      const SequenceHistory* hist, uint64_t position,
                      std::span<const uint32_t> allowed = {}, std::span<const LogitBias> bias = {});

 private:
  static constexpr int32_t kBlock = 256;  // tokens per block sum in the dense draw
  // The steps of sample(), in order (sampler.cpp numbers them).
  static void top_logprobs(const float* logits, int32_t vocab, int n_top, double lse,
                           SampleResult& r);
  float bias_saving(float* logits, int32_t vocab, std::span<const LogitBias> bias, float raw_max);
  float penalize_saving(float* logits, int32_t vocab, const SamplingParams& p,
                        const SequenceHistory* hist, float raw_max);
  int32_t draw(const float* logits, int32_t vocab, const SamplingParams& p, float max_pen,
               uint64_t position);
  void shortlist_nucleus(int32_t vocab, double need);
  double shortlist_top_k(const float* logits, int32_t vocab, size_t k, float max_pen, float inv_t);
  double cut_top_p(float top_p, double total);
  double cut_min_p(float min_p);
  int32_t draw_shortlist(double target) const;
  int32_t draw_dense(double u, double total) const;

  struct Cand {
    float v;  // logit, then unnormalised probability
    int32_t id;
  };
  std::vector<Cand> cand_;                        // top-k survivors, or the top-p shortlist
  std::vector<float> prob_;                       // [vocab] unnormalised probabilities (no top-k)
  std::vector<double> block_;                     // sums of prob_ per block of kBlock, for the draw
  std::vector<std::pair<int32_t, float>> saved_;  // raw logits the penalties overwrote
};

}  // namespace kvasir
