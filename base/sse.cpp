// base/sse.cpp — the event stream interpretation of the SSE spec.
#include "base/sse.h"

namespace kvasir {

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  if (bytes.empty()) return out;
  size_t i = 0;
  // The "\n" of a "\r\n" whose "\r" ended the previous feed.
  if (after_cr_ && bytes[0] == '\n') i = 1;
  after_cr_ = false;
  while (i < bytes.size()) {
    const size_t eol = bytes.find_first_of("\r\n", i);
    if (eol == std::string_view::npos) {
      line_.append(bytes.substr(i));
      break;
    }
    line_.append(bytes.substr(i, eol - i));
    take_line(out);
    i = eol + 1;
    if (bytes[eol] == '\r') {
      if (i == bytes.size())
        after_cr_ = true;
      else if (bytes[i] == '\n')
        ++i;
    }
  }
  return out;
}

void SseParser::take_line(std::vector<SseEvent>& out) {
  std::string_view line = line_;
  if (first_line_ && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
  first_line_ = false;
  if (line.empty()) {  // the end of an event
    if (has_data_) out.push_back({type_.empty() ? "message" : type_, std::move(data_), id_});
    type_.clear();
    data_.clear();
    has_data_ = false;
  } else if (line[0] != ':') {  // not a comment
    const size_t colon = line.find(':');
    std::string_view value;
    if (colon != std::string_view::npos) {
      value = line.substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    }
    field(line.substr(0, colon), value);
  }
  line_.clear();
}

void SseParser::field(std::string_view name, std::string_view value) {
  if (name == "data") {
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
  } else if (name == "event") {
    type_ = value;
  } else if (name == "id") {
    if (value.find('\0') == std::string_view::npos) id_ = value;
  }
}

}  // namespace kvasir
