// base/sse.h — reading a server-sent-events stream (the WHATWG
// "event stream interpretation"), for every client of the API's streams:
// the CLI's `kvasir run`/`chat`, `kvasir bench` and the tests.
//
// Contract:
// - Lines end at "\n", "\r\n" or "\r"; a "\r\n" split across two feeds is
//   one line end. An empty line ends an event.
// - "data:" lines append to the event's data; several are joined with "\n".
//   One space after the colon is dropped, as the spec says.
// - "event:" names the event (type; "message" when absent), "id:" sets the
//   last event id, which every later event carries; "retry:" and unknown
//   fields are ignored, as are comments (lines starting with ':').
// - An event with no "data:" line is not dispatched (an event of only
//   comments, e.g. a keep-alive, yields nothing).
// - Bytes may be split anywhere: feed keeps the incomplete line and event
//   until the rest arrives. A leading UTF-8 BOM is dropped.
// Not thread-safe: one parser per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvasir {

struct SseEvent {
  std::string type = "message";  // the "event:" field
  std::string data;              // the "data:" lines, joined with "\n"
  std::string id;                // the last "id:" seen on the stream
};

class SseParser {
 public:
  // The events that `bytes` complete, in order.
  std::vector<SseEvent> feed(std::string_view bytes);

 private:
  void take_line(std::vector<SseEvent>& out);
  void field(std::string_view name, std::string_view value);

  std::string line_;        // the line being read (no end yet)
  bool after_cr_ = false;   // the last byte fed was a "\r" ending a line
  bool first_line_ = true;  // a BOM may open it
  std::string type_, data_, id_;
  bool has_data_ = false;
};

}  // namespace kvasir
