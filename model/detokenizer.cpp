// model/detokenizer.cpp — StreamDecoder: hold incomplete UTF-8, emit the rest.
#include "model/tokenizer.h"
#include "model/unicode.h"

namespace kvasir {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special, bool at_start)
    : tok_(tok),
      skip_special_(skip_special),
      strip_space_(at_start && tok.strips_leading_space()) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string& p = tok_.piece(id, skip_special_);
  if (strip_space_ && !p.empty()) {
    strip_space_ = false;
    pending_.append(p, p[0] == ' ' ? 1 : 0);
  } else {
    pending_ += p;
  }
  std::string out;
  while (!pending_.empty()) {
    size_t bad;
    const size_t ok = unicode::utf8_complete_prefix(pending_, bad);
    out.append(pending_, 0, ok);
    if (bad == std::string::npos) {
      pending_.erase(0, ok);  // keep only an incomplete (still possible) tail
      break;
    }
    out += "\xEF\xBF\xBD";  // one byte that can never be valid
    pending_.erase(0, ok + 1);
  }
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  while (!pending_.empty()) {
    size_t bad;
    const size_t ok = unicode::utf8_complete_prefix(pending_, bad);
    out.append(pending_, 0, ok);
    if (ok == pending_.size()) break;
    out += "\xEF\xBF\xBD";  // invalid byte, or the start of a sequence that never completed
    const size_t skip = bad == std::string::npos ? pending_.size() - ok : 1;
    pending_.erase(0, ok + skip);
    if (bad == std::string::npos) break;
  }
  pending_.clear();
  return out;
}

}  // namespace kvasir
