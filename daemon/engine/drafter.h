// daemon/engine/drafter.h — speculative decoding's drafters: who proposes
// the tokens a decoding row carries after its last one (docs/speculative.md).
//
// A drafter sees a sequence's tokens (prompt, then output) and proposes up to
// k tokens to follow them; the tail verifies them against the model in the
// same row (ipc DescRow::n_draft). A drafter is deterministic: a proposal is a
// point mass (q one-hot), so "accept iff the target's sampled token equals the
// draft" is the exact rejection rule and the output is the one without
// speculation. A drafter that proposes distributions (a draft model) uses
// the general rule instead (stages/spec_accept.h).
//
// Engine thread only (the scheduler owns its drafter).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kvasir {

enum class DraftMethod {
  kNone,    // no speculation
  kNgram,   // prompt lookup (NgramDrafter)
  kSuffix,  // suffix matching over the sequence and recent outputs (suffix_drafter.h)
};
std::optional<DraftMethod> parse_draft_method(std::string_view name);
const char* draft_method_name(DraftMethod m);

// [speculative] (docs/config.md), as the scheduler takes it.
struct SpecLimits {
  DraftMethod method = DraftMethod::kNone;
  int32_t max_draft = 4;  // k: the most draft tokens per row per step
  // Prompt lookup's n-gram sizes (vLLM's prompt_lookup_max / _min).
  int32_t ngram_max = 4;
  int32_t ngram_min = 2;
  // The suffix drafter's (suffix_drafter.h).
  int32_t suffix_max_depth = 24;
  double suffix_min_prob = 0.1;
  int32_t suffix_cache_requests = 256;
  // The draft length chosen per sequence per step (docs/speculative.md,
  // "When k drops to 0"; draft_length.h), max_draft its bound; false: every
  // eligible row asks for max_draft.
  bool adaptive = true;
  // Decode steps a sequence whose acceptance turned its drafts down drafts
  // nothing (the drafter not asked) before it probes again with one draft.
  int32_t probe_interval = 16;
  // With the adaptive length, what the drafts of a micro-batch holding
  // more than one decode may add to its step, as a fraction of the step
  // without them (by the cost model): the rows that do not draft wait for
  // those that do, so a step the throughput rule would lengthen is their
  // inter-token latency. A lone decode keeps the throughput rule.
  // 16 bounds nothing: drafts (max_draft <= 16 a row) add no more.
  double max_step_growth = 0;
  // Constrained rows draft the grammar-forced tokens the tail returned
  // with their last result (docs/speculative.md, "Grammar-forced drafts").
  bool grammar_forced = true;
  bool enabled() const { return method != DraftMethod::kNone && max_draft > 0; }
};

// What speculation did, counted over the scheduler's life (vLLM's
// spec_decode_num_drafts / _num_draft_tokens / _num_accepted_tokens).
struct SpecCounts {
  int64_t drafts = 0;    // rows that carried drafts, with results applied
  int64_t proposed = 0;  // draft tokens those rows carried
  int64_t accepted = 0;  // of which the target agreed with (emitted as its own)
  // The adaptive draft length (draft_length.h): rows that could have
  // drafted and drafted nothing, because their acceptance estimate turned
  // them down (resting included), or because the step's cost did (even an
  // always-right drafter would not pay: a compute-bound batch, or the time
  // budget); and rows that probed a resting sequence with one draft.
  int64_t zero_by_acceptance = 0;
  int64_t zero_by_cost = 0;
  int64_t probes = 0;
  // Of drafts / proposed / accepted, the rows that drafted grammar-forced
  // tokens (structured outputs) and theirs.
  int64_t forced_drafts = 0, forced_proposed = 0, forced_accepted = 0;
  // The tokens a drafting row emits on average: 1 + accepted / drafts.
  double mean_accepted_length() const {
    return drafts > 0 ? 1.0 + double(accepted) / double(drafts) : 0.0;
  }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  // Up to k tokens to follow `tokens` (may be none), for a request of this
  // cache salt (GenRequest::cache_salt: a drafter that learns from other
  // requests draws only on those of the same salt). Deterministic in its
  // inputs and what it has learnt.
  virtual std::vector<int32_t> propose(std::span<const int32_t> tokens, int32_t k,
                                       std::string_view salt) const = 0;
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int32_t k) const {
    return propose(tokens, k, {});
  }
  // A sequence ended (any reason) with these tokens, the first n_prompt its
  // prompt. Default: nothing learnt.
  virtual void learn(std::span<const int32_t> tokens, int64_t n_prompt, std::string_view salt) {
    (void)tokens, (void)n_prompt, (void)salt;
  }
};

// Prompt lookup (vLLM's "ngram"): for n from ngram_max down to ngram_min,
// the n tokens ending the sequence are looked for earlier in it; the first
// n that matches proposes up to k tokens that followed its most recent
// earlier occurrence (at least one always follows it). Cost: O(length x n)
// per call, a decode's scan of its own tokens.
class NgramDrafter final : public Drafter {
 public:
  NgramDrafter(int32_t ngram_min, int32_t ngram_max);
  const char* name() const override { return "ngram"; }
  using Drafter::propose;
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int32_t k,
                               std::string_view salt) const override;

 private:
  int32_t min_, max_;
};

// The drafter `spec` names; null for kNone.
std::unique_ptr<Drafter> make_drafter(const SpecLimits& spec);

}  // namespace kvasir
