// daemon/engine/drafter.cpp — see drafter.h.
#include "daemon/engine/drafter.h"

#include <algorithm>

#include "base/check.h"
#include "daemon/engine/suffix_drafter.h"

namespace kvasir {

std::optional<DraftMethod> parse_draft_method(std::string_view name) {
  if (name == "none") return DraftMethod::kNone;
  if (name == "ngram") return DraftMethod::kNgram;
  if (name == "suffix") return DraftMethod::kSuffix;
  return std::nullopt;
}

const char* draft_method_name(DraftMethod m) {
  switch (m) {
    case DraftMethod::kNone:
      return "none";
    case DraftMethod::kNgram:
      return "ngram";
    case DraftMethod::kSuffix:
      return "suffix";
  }
  return "?";
}

NgramDrafter::NgramDrafter(int32_t ngram_min, int32_t ngram_max)
    : min_(ngram_min), max_(ngram_max) {
  KV_CHECK(min_ >= 1 && max_ >= min_, "ngram drafter: sizes {}..{}", min_, max_);
}

std::vector<int32_t> NgramDrafter::propose(std::span<const int32_t> tokens, int32_t k,
                                           std::string_view) const {
  const int64_t L = int64_t(tokens.size());
  if (k <= 0) return {};
  for (int64_t n = std::min<int64_t>(max_, L - 1); n >= min_; --n) {
    const int32_t* tail = tokens.data() + (L - n);
    // The most recent earlier occurrence: starts below L - n, so at least
    // one token follows it.
    for (int64_t i = L - n - 1; i >= 0; --i) {
      if (!std::equal(tail, tail + n, tokens.data() + i)) continue;
      const int64_t from = i + n, to = std::min<int64_t>(from + k, L);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

std::unique_ptr<Drafter> make_drafter(const SpecLimits& spec) {
  switch (spec.method) {
    case DraftMethod::kNone:
      return nullptr;
    case DraftMethod::kNgram:
      return std::make_unique<NgramDrafter>(spec.ngram_min, spec.ngram_max);
    case DraftMethod::kSuffix:
      return std::make_unique<SuffixDrafter>(
          SuffixLimits{spec.suffix_max_depth, spec.suffix_min_prob, spec.suffix_cache_requests});
  }
  return nullptr;
}

}  // namespace kvasir
