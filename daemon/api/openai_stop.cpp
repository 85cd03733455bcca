// daemon/api/openai_stop.cpp — see openai_stop.h.
#include "daemon/api/openai_stop.h"

#include <algorithm>
#include <utility>

namespace kvasir {

std::string StopMatcher::push(std::string_view text) {
  if (matched_) return "";
  pending_.append(text);
  if (stops_.empty()) return std::exchange(pending_, std::string());

  // The earliest occurrence of any stop string wins.
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    size_t at = pending_.find(s);
    if (at < first) {
      first = at;
      which_ = s;
    }
  }
  if (first != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    size_t max_k = std::min(s.size() - 1, pending_.size());
    for (size_t k = max_k; k > hold; --k) {
      if (std::string_view(pending_).substr(pending_.size() - k) ==
          std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (matched_) return "";
  return std::exchange(pending_, std::string());
}

}  // namespace kvasir
