// Test-side HTTP helpers of the front-door tests (test_api_http.cpp,
// test_api_run.cpp): a raw response parsed, chunked coding undone, SSE
// payloads as JSON.
#pragma once

#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/sse.h"
#include "daemon/api/openai.h"

namespace kvasir::test {

using nlohmann::json;

struct Resp {
  int status = 0;
  std::string head, body;
  json j() const { return json::parse(body); }
};

// Undoes chunked transfer coding (test side only).
inline std::string dechunk(const std::string& s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t eol = s.find("\r\n", pos);
    if (eol == std::string::npos) break;
    size_t n = std::stoul(s.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += s.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

inline Resp parse_resp(const std::string& raw) {
  Resp r;
  if (raw.size() < 12) return r;
  r.status = std::stoi(raw.substr(9, 3));
  size_t sep = raw.find("\r\n\r\n");
  r.head = raw.substr(0, sep);
  r.body = sep == std::string::npos ? "" : raw.substr(sep + 4);
  std::string lower = r.head;
  for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") != std::string::npos) r.body = dechunk(r.body);
  return r;
}

inline std::vector<json> sse_events(const std::string& body, bool* done = nullptr) {
  SseParser p;
  std::vector<json> out;
  for (const auto& ev : p.feed(body)) {
    const std::string& d = ev.data;
    if (d == "[DONE]") {
      if (done) *done = true;
    } else {
      out.push_back(json::parse(d));
    }
  }
  return out;
}

}  // namespace kvasir::test
