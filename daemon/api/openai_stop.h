// daemon/api/openai_stop.h — stop strings matched on generated text.
//
// Text arrives piece by piece (one detokenized token at a time). A piece is
// released only when no stop string can still start inside it: the longest
// tail of the pending text that is a prefix of some stop string is held back.
// When a stop string appears, everything from its first byte on is dropped
// and matched() turns true (the caller cancels the request).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvasir {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {}) : stops_(std::move(stops)) {}

  // Appends `text`; returns what can be sent now. After a match, returns the
  // text before the stop string (once) and "" from then on.
  std::string push(std::string_view text);
  // At the end of generation: the text still held back (no match possible now).
  std::string flush();
  bool matched() const { return matched_; }
  const std::string& matched_stop() const { return which_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool matched_ = false;
  std::string which_;
};

}  // namespace kvasir
