// model/tokenizer_spm.cpp — SentencePiece-style BPE (Llama 2, TinyLlama).
//
// Spaces become U+2581; symbols start as UTF-8 characters; the adjacent pair
// whose concatenation is the highest-scoring token merges first (leftmost on
// ties). Final symbols that are not tokens are written as <0xNN> byte tokens
// (byte fallback), or as unk when the vocabulary has no byte tokens.
#include <queue>

#include "base/check.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

namespace kvasir {
namespace {

struct SpmSym {
  uint32_t off, len;
  int32_t prev, next;
};
struct SpmPair {
  float score;
  int32_t left, right;
  uint32_t size;
  bool operator<(const SpmPair& o) const {
    return score < o.score || (score == o.score && left > o.left);
  }
};

}  // namespace

void Tokenizer::encode_spm(std::string_view raw, std::vector<int32_t>& out) const {
  const Impl& m = *impl_;
  std::string text;
  text.reserve(raw.size() + 16);
  for (char c : raw) {
    if (c == ' ')
      text += "\xE2\x96\x81";
    else
      text.push_back(c);
  }
  std::vector<SpmSym> syms;
  for (uint32_t off = 0; off < text.size();) {
    const uint32_t len =
        uint32_t(std::min<size_t>(text.size() - off, unicode::utf8_len(uint8_t(text[off]))));
    const int32_t idx = int32_t(syms.size());
    syms.push_back({off, len, idx - 1, off + len == text.size() ? -1 : idx + 1});
    off += len;
  }
  std::priority_queue<SpmPair> queue;
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const std::string_view t =
        std::string_view(text).substr(syms[l].off, syms[l].len + syms[r].len);
    auto it = m.token_to_id.find(t);
    if (it == m.token_to_id.end()) return;
    const float score = d_.scores.empty() ? 0.0f : d_.scores[it->second];
    queue.push({score, l, r, uint32_t(t.size())});
  };
  for (int32_t i = 1; i < int32_t(syms.size()); ++i) try_pair(i - 1, i);
  while (!queue.empty()) {
    const SpmPair p = queue.top();
    queue.pop();
    SpmSym& L = syms[p.left];
    SpmSym& R = syms[p.right];
    if (L.len == 0 || R.len == 0 || L.len + R.len != p.size) continue;
    L.len += R.len;
    R.len = 0;
    L.next = R.next;
    if (R.next >= 0) syms[R.next].prev = p.left;
    try_pair(L.prev, p.left);
    try_pair(p.left, L.next);
  }
  for (int32_t i = 0; i != -1 && !syms.empty(); i = syms[i].next) {
    const std::string_view t = std::string_view(text).substr(syms[i].off, syms[i].len);
    auto it = m.token_to_id.find(t);
    if (it != m.token_to_id.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char c : t) {
      const int32_t b = m.byte_token[c];
      KV_CHECK(b >= 0 || d_.unk >= 0, "{}: no byte token <0x{:02X}> and no unknown token", d_.name,
               c);
      out.push_back(b >= 0 ? b : d_.unk);
    }
  }
}

}  // namespace kvasir
