#include "daemon/api/harmony.h"

#include <algorithm>
#include <array>

#include "daemon/api/tool_calls.h"

namespace kvasir {
namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>",
                           kMessage = "<|message|>", kTo = " to=";
// A message's end: the next message follows <|end|>; the others end the turn.
constexpr std::array<std::string_view, 3> kEnds = {"<|end|>", "<|return|>", "<|call|>"};
// A header longer than this without <|message|> is not one.
constexpr size_t kMaxHeader = 512;

// Bytes at the end of `s` that may begin `marker` (held back while streaming).
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// The word after `key` in a header ("to=functions.get_weather" gives
// "functions.get_weather"), up to a space or a marker; empty if absent.
std::string_view word_after(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return {};
  const std::string_view rest = header.substr(at + key.size());
  return rest.substr(0, std::min(rest.find(' '), rest.find("<|")));
}

// Could `s` begin a header? The first message's "<|start|>assistant" is
// the prompt's, so it begins with the channel marker or a recipient; a
// later one with the start marker.
bool may_be_header(std::string_view s) {
  for (std::string_view m : {kChannel, kStart, kTo}) {
    const size_t n = std::min(s.size(), m.size());
    if (s.substr(0, n) == m.substr(0, n)) return true;
  }
  return false;
}

}  // namespace

HarmonyStream::HarmonyStream(uint64_t id_seed) : seed_(id_seed) {}

HarmonyStream::Out HarmonyStream::push(std::string_view text) {
  buf_.append(text);
  Out out;
  while (step(out, false)) {
  }
  return out;
}

HarmonyStream::Out HarmonyStream::finish() {
  Out out;
  while (step(out, true)) {
  }
  if (state_ == State::kBody && sink_ == Sink::kCall) {
    cut_ = true;  // ended as it stands; an empty one as no arguments
    if (calls_.back().arguments.empty()) emit(out, "{}");
  }
  return out;
}

bool HarmonyStream::step(Out& out, bool end) {
  switch (state_) {
    case State::kHeader:
      return header_step(out, end);
    case State::kBody:
      return body_step(out, end);
    case State::kPlain:  // not harmony: everything is content
      sink_ = Sink::kContent;
      emit(out, buf_);
      buf_.clear();
      return false;
    case State::kDone:  // the turn ended; nothing after it is output
      buf_.clear();
      return false;
  }
  return false;
}

// Reads a header up to <|message|>; false when it needs more text.
bool HarmonyStream::header_step(Out& out, bool end) {
  if (buf_.empty()) return false;
  const size_t at = may_be_header(buf_) ? buf_.find(kMessage) : std::string::npos;
  if (at <= kMaxHeader) {
    open_message(out, std::string_view(buf_).substr(0, at));
    buf_.erase(0, at + kMessage.size());
    state_ = State::kBody;
    first_ = false;
    return true;
  }
  if (!may_be_header(buf_) || buf_.size() > kMaxHeader || (end && first_)) {
    state_ = State::kPlain;  // not harmony after all: content as written
    return true;
  }
  if (end) buf_.clear();  // a later header the end cut: markup, not output
  return false;
}

// A body up to its end marker; false when it needs more text.
bool HarmonyStream::body_step(Out& out, bool end) {
  size_t at = std::string::npos, len = 0;
  bool next = false;
  for (std::string_view m : kEnds) {
    const size_t i = buf_.find(m);
    if (i < at) at = i, len = m.size(), next = m == kEnds[0];
  }
  if (at != std::string::npos) {
    emit(out, std::string_view(buf_).substr(0, at));
    buf_.erase(0, at + len);
    state_ = next ? State::kHeader : State::kDone;
    return true;
  }
  size_t hold = 0;
  if (!end)
    for (std::string_view m : kEnds) hold = std::max(hold, partial_suffix(buf_, m));
  emit(out, std::string_view(buf_).substr(0, buf_.size() - hold));
  buf_.erase(0, buf_.size() - hold);
  return false;
}

// The message's channel and recipient decide where its body goes: analysis
// to reasoning, a function's name to a call, the rest (final, a preamble
// addressed to no one) to content.
void HarmonyStream::open_message(Out& out, std::string_view header) {
  const std::string_view channel = word_after(header, kChannel);
  const std::string_view to = word_after(header, kTo);
  constexpr std::string_view kFunctions = "functions.";
  if (to.size() > kFunctions.size() && to.substr(0, kFunctions.size()) == kFunctions) {
    sink_ = Sink::kCall;
    const size_t k = calls_.size();
    calls_.push_back({tool_call_id(seed_, k, ToolFormat::kHarmony),
                      std::string(to.substr(kFunctions.size())), ""});
    out.deltas.push_back({k, true, calls_.back().id, calls_.back().name, ""});
  } else {
    sink_ = channel == "analysis" ? Sink::kReasoning : Sink::kContent;
  }
}

void HarmonyStream::emit(Out& out, std::string_view text) {
  if (text.empty()) return;
  switch (sink_) {
    case Sink::kReasoning:
      out.reasoning.append(text);
      reasoning_.append(text);
      break;
    case Sink::kContent:
      out.content.append(text);
      content_.append(text);
      break;
    case Sink::kCall:
      calls_.back().arguments.append(text);
      out.deltas.push_back({calls_.size() - 1, false, "", "", std::string(text)});
      break;
  }
}

}  // namespace kvasir
