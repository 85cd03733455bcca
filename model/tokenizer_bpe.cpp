// model/tokenizer_bpe.cpp — byte-level BPE: split words, merge by rank.
//
// Per word: symbols start as the UTF-8 characters of the byte-alphabet
// string; the adjacent pair with the lowest merge rank (leftmost on ties) is
// merged until no pair has a rank. A queue entry is stale when either side
// has since changed; that is the same rule as the reference's text check.
// Final symbols that are not tokens fall back to single-byte tokens.
#include <queue>

#include "base/check.h"
#include "model/tokenizer_impl.h"
#include "base/utf8.h"
#include "model/unicode.h"

namespace kvasir {
namespace {

struct Sym {
  int32_t id;    // interned symbol, -1 if the text is not a known string
  uint32_t off;  // into the word
  uint32_t len;  // 0 once merged into its left neighbour
  int32_t prev, next;
};

struct Pair {
  int32_t rank;
  int32_t left, right;
  int32_t lid, rid;  // symbol ids when queued (staleness check)
  int32_t result;
  bool operator>(const Pair& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
};

// Merges a word's symbols, the lowest-ranked pair first, again and again
// (the reference's order). merge_of(left id, right id) gives the merge's
// {rank, resulting id}, rank < 0 when the pair does not merge.
template <class MergeOf>
void merge_symbols(std::vector<Sym>& syms, const MergeOf& merge_of) {
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> queue;
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const int32_t lid = syms[l].id, rid = syms[r].id;
    if (lid < 0 || rid < 0) return;
    const auto [rank, result] = merge_of(lid, rid);
    if (rank < 0) return;
    queue.push({rank, l, r, lid, rid, result});
  };
  for (int32_t i = 1; i < int32_t(syms.size()); ++i) try_pair(i - 1, i);
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Sym& L = syms[p.left];
    Sym& R = syms[p.right];
    if (L.len == 0 || R.len == 0 || L.id != p.lid || R.id != p.rid || L.next != p.right) continue;
    L.len += R.len;
    L.id = p.result;
    R.len = 0;
    L.next = R.next;
    if (R.next >= 0) syms[R.next].prev = p.left;
    try_pair(L.prev, p.left);
    try_pair(p.left, L.next);
  }
}

}  // namespace

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& m = *impl_;
  thread_local std::vector<uint32_t> cps;
  thread_local std::vector<std::pair<uint32_t, uint32_t>> words;
  thread_local std::vector<Sym> syms;
  thread_local std::string utf8, word;
  cps.clear(), words.clear();
  unicode::decode_utf8(text, cps);
  pretokenize(d_.pre, cps, words);

  for (const auto& [b, e] : words) {
    // The word's bytes (re-encoded from codepoints: bad bytes are U+FFFD
    // now), each mapped to its byte-alphabet symbol.
    utf8.clear(), word.clear();
    for (uint32_t i = b; i < e; ++i) append_utf8(utf8, cps[i]);
    for (unsigned char c : utf8) word += unicode::byte_to_symbol(c);

    if (d_.ignore_merges) {
      auto it = m.token_to_id.find(word);
      if (it != m.token_to_id.end()) {
        out.push_back(it->second);
        continue;
      }
    }
    {
      std::lock_guard<std::mutex> lock(m.cache_mu);
      auto it = m.cache.find(word);
      if (it != m.cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }

    syms.clear();
    for (uint32_t off = 0; off < word.size();) {
      const uint32_t len =
          uint32_t(std::min<size_t>(word.size() - off, unicode::utf8_len(uint8_t(word[off]))));
      auto it = m.sym_id.find(std::string_view(word).substr(off, len));
      const int32_t idx = int32_t(syms.size());
      syms.push_back({it == m.sym_id.end() ? -1 : it->second, off, len, idx - 1,
                      off + len == word.size() ? -1 : idx + 1});
      off += len;
    }
    merge_symbols(syms, [&](int32_t l, int32_t r) {
      auto it = m.merges.find(Impl::key(l, r));
      return it == m.merges.end() ? std::pair<int32_t, int32_t>{-1, -1}
                                  : std::pair<int32_t, int32_t>{it->second.rank, it->second.result};
    });

    std::vector<int32_t> ids;
    for (int32_t i = 0; i != -1 && !syms.empty(); i = syms[i].next) {
      const Sym& s = syms[i];
      if (s.id >= 0 && s.id < vocab_size()) {
        ids.push_back(s.id);
        continue;
      }
      // Not a token: each raw byte of the symbol's text, if it is a token.
      for (char c : std::string_view(word).substr(s.off, s.len)) {
        auto it = m.token_to_id.find(std::string_view(&c, 1));
        if (it != m.token_to_id.end()) ids.push_back(it->second);
      }
    }
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(m.cache_mu);
    if (m.cache.size() >= Impl::kCacheMax) m.cache.clear();
    m.cache.emplace(word, std::move(ids));
  }
}

}  // namespace kvasir
