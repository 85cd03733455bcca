// model/tokenizer_impl.h — the indexes behind a Tokenizer (private to model/).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.h"

namespace kvasir {

struct Tokenizer::Impl {
  // Raw token text -> id. Keys view d_.tokens (stable: never resized).
  std::unordered_map<std::string_view, int32_t> token_to_id;

  // BPE. Symbols are interned strings: ids below vocab_size are tokens;
  // above are strings that appear only inside merges (they can still merge).
  std::unordered_map<std::string_view, int32_t> sym_id;
  std::deque<std::string> extra_syms;      // storage for non-token symbols
  std::vector<std::string_view> sym_text;  // id -> text
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left << 32 | right) -> merge
  static uint64_t key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }

  // SPM: id of <0xNN> for every byte (-1 if absent).
  int32_t byte_token[256];

  // Tokens matched in text before tokenizing: control, user-defined and
  // unknown tokens, longest text first (ties: lower id first).
  std::vector<int32_t> specials;

  std::vector<std::string> pieces;  // decode() piece per id, specials rendered
  std::vector<uint8_t> eog;         // 1 if the id ends generation

  // Built once by the Tokenizer's constructor (tokenizer.cpp) from its data.
  void index_merges(const TokenizerData& d, const std::string& who);   // sym_*, merges
  void render_pieces(const TokenizerData& d, const std::string& who);  // pieces

  // Per-word cache of BPE results: real text repeats its words constantly.
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
  static constexpr size_t kCacheMax = 1 << 16;
};

}  // namespace kvasir
