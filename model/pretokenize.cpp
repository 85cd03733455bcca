// model/pretokenize.cpp — the split scanners (see the header for patterns).
#include "model/pretokenize.h"

#include "base/check.h"
#include "model/unicode.h"

namespace kvasir {
namespace {

using unicode::flags;
using Words = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr uint32_t kOut = 0xFFFFFFFF;  // "past the segment" sentinel

// A view of one segment [ini, end) of the codepoints: outside it, a
// codepoint reads as kOut and its flags as 0 (no class at all).
struct Seg {
  const std::vector<uint32_t>& cps;
  size_t ini, end;
  uint32_t cp(size_t i) const { return i >= ini && i < end ? cps[i] : kOut; }
  uint16_t fl(size_t i) const { return i >= ini && i < end ? flags(cps[i]) : 0; }
};

constexpr uint16_t kLNS = unicode::kLetter | unicode::kNumber | unicode::kWhitespace;

bool contraction(const Seg& s, size_t pos, bool fold, size_t& len) {
  if (s.cp(pos) != '\'' || pos + 1 >= s.end) return false;
  auto low = [&](uint32_t c) { return fold ? unicode::to_lower(c) : c; };
  const uint32_t a = low(s.cp(pos + 1));
  if (a == 's' || a == 't' || a == 'm' || a == 'd') {
    len = 2;
    return true;
  }
  if (pos + 2 < s.end) {
    const uint32_t b = low(s.cp(pos + 2));
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
      len = 3;
      return true;
    }
  }
  return false;
}

void split_gpt2(const Seg& s, Words& out) {
  size_t prev = s.ini;
  auto add = [&](size_t end) {
    if (end > prev) out.emplace_back(uint32_t(prev), uint32_t(end));
    prev = end;
  };
  for (size_t pos = s.ini; pos < s.end;) {
    const uint32_t cpt = s.cp(pos);
    const uint16_t f = s.fl(pos);
    size_t clen;
    if (contraction(s, pos, false, clen)) {
      add(pos + clen);
      pos += clen;
      continue;
    }
    uint16_t f2 = cpt == ' ' ? s.fl(pos + 1) : f;
    if (f2 & unicode::kLetter) {  // ' ?\p{L}+'
      pos += cpt == ' ';
      while (f2 & unicode::kLetter) f2 = s.fl(++pos);
      add(pos);
      continue;
    }
    if (f2 & unicode::kNumber) {  // ' ?\p{N}+'
      pos += cpt == ' ';
      while (f2 & unicode::kNumber) f2 = s.fl(++pos);
      add(pos);
      continue;
    }
    if (!(f2 & kLNS) && f2) {  // ' ?[^\s\p{L}\p{N}]+'
      pos += cpt == ' ';
      while (!(f2 & kLNS) && f2) f2 = s.fl(++pos);
      add(pos);
      continue;
    }
    size_t nws = 0;
    while (s.fl(pos + nws) & unicode::kWhitespace) ++nws;
    if (nws > 1 && s.cp(pos + nws) != kOut) {  // '\s+(?!\S)'
      pos += nws - 1;
      add(pos);
      continue;
    }
    if (nws > 0) {  // '\s+'
      pos += nws;
      add(pos);
      continue;
    }
    add(++pos);  // no match: the codepoint stands alone
  }
}

void split_llama3(const Seg& s, bool digits3, Words& out) {
  size_t prev = s.ini;
  auto add = [&](size_t end) {
    if (end > prev) out.emplace_back(uint32_t(prev), uint32_t(end));
    prev = end;
  };
  for (size_t pos = s.ini; pos < s.end;) {
    const uint32_t cpt = s.cp(pos);
    const uint16_t f = s.fl(pos);
    size_t clen;
    if (contraction(s, pos, true, clen)) {
      add(pos + clen);
      pos += clen;
      continue;
    }
    // '[^\r\n\p{L}\p{N}]?\p{L}+'
    if (!(cpt == '\r' || cpt == '\n' || (f & unicode::kNumber))) {
      if ((f & unicode::kLetter) || (s.fl(pos + 1) & unicode::kLetter)) {
        ++pos;
        while (s.fl(pos) & unicode::kLetter) ++pos;
        add(pos);
        continue;
      }
    }
    if (f & unicode::kNumber) {  // '\p{N}{1,3}' or '\p{N}'
      if (!digits3) {
        add(++pos);
        continue;
      }
      size_t ini = pos;
      while (s.fl(pos) & unicode::kNumber) {
        if (++pos - ini >= 3) {
          add(pos);
          ini = pos;
        }
      }
      add(pos);
      continue;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*' — the reference tests `f` (not f2) for
    // "has a class"; we keep that.
    uint16_t f2 = cpt == ' ' ? s.fl(pos + 1) : f;
    if (!(f2 & kLNS) && f) {
      pos += cpt == ' ';
      while (!(f2 & kLNS) && f2) f2 = s.fl(++pos);
      uint32_t c2 = s.cp(pos);
      while (c2 == '\r' || c2 == '\n') c2 = s.cp(++pos);
      add(pos);
      continue;
    }
    size_t nws = 0, last_rn = 0;
    while (s.fl(pos + nws) & unicode::kWhitespace) {
      const uint32_t c2 = s.cp(pos + nws);
      if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
      ++nws;
    }
    if (last_rn > 0) {  // '\s*[\r\n]+'
      pos = last_rn;
      add(pos);
      continue;
    }
    if (nws > 1 && s.cp(pos + nws) != kOut) {  // '\s+(?!\S)'
      pos += nws - 1;
      add(pos);
      continue;
    }
    if (nws > 0) {
      pos += nws;
      add(pos);
      continue;
    }
    add(++pos);
  }
}

// Classes the gpt-4o scanner sees (see the header): the reference keeps an
// ASCII codepoint as itself and collapses any other to its category group,
// so a non-ASCII letter is both upper and lower case.
enum : uint8_t { kUp = 1, kLow = 2, kDigit = 4, kSpace = 8, kCrLf = 16, kOther = 32 };

uint8_t gpt4o_class(const Seg& s, size_t i) {
  const uint32_t c = s.cp(i);
  if (c == kOut) return 0;
  if (c < 128) {
    if (c >= 'A' && c <= 'Z') return kUp;
    if (c >= 'a' && c <= 'z') return kLow;
    if (c >= '0' && c <= '9') return kDigit;
    if (c == '\r' || c == '\n') return kSpace | kCrLf;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return kSpace;  // std::regex's \s
    return kOther;
  }
  const uint16_t f = flags(c);
  if (f & unicode::kWhitespace) return kSpace;
  if (f & unicode::kLetter) return kUp | kLow;
  if (f & unicode::kNumber) return kDigit;
  return kOther;
}

// (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]) at `pos`: its
// length, or 0. The reference folds ASCII case only.
size_t ascii_contraction(const Seg& s, size_t pos) {
  if (s.cp(pos) != '\'') return 0;
  auto low = [&](size_t i) {
    const uint32_t c = s.cp(i);
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
  };
  const uint32_t a = low(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = low(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The two letter alternatives at `pos`, the first that matches as a
// backtracking engine finds it: end of the word, or 0 if neither matches.
//   P? U* L+ C?  then  P? U+ L* C?   (P = [^\r\n\p{L}\p{N}])
size_t gpt4o_letters(const Seg& s, size_t pos) {
  const uint8_t c = gpt4o_class(s, pos);
  const bool p = c && !(c & (kCrLf | kUp | kLow | kDigit));
  const size_t i = pos + p;
  if (!(gpt4o_class(s, i) & (kUp | kLow))) return 0;
  size_t up_end = i;  // U* runs as far as it can
  while (gpt4o_class(s, up_end) & kUp) ++up_end;
  size_t end = up_end;
  if (gpt4o_class(s, up_end) & kLow) {  // L+ right after U*: take its whole run
    while (gpt4o_class(s, end) & kLow) ++end;
  } else {
    // U* gives back down to its last codepoint that is also lower case (a
    // non-ASCII letter), which L+ then takes; with none, U+ L* matches
    // the run as it is.
    for (size_t j = up_end; j > i; --j) {
      if (gpt4o_class(s, j - 1) & kLow) {
        end = j;
        break;
      }
    }
  }
  return end + ascii_contraction(s, end);
}

void split_gpt4o(const Seg& s, Words& out) {
  size_t prev = s.ini;
  auto add = [&](size_t end) {
    if (end > prev) out.emplace_back(uint32_t(prev), uint32_t(end));
    prev = end;
  };
  for (size_t pos = s.ini; pos < s.end;) {
    if (const size_t end = gpt4o_letters(s, pos)) {
      add(pos = end);
      continue;
    }
    const uint8_t c = gpt4o_class(s, pos);
    if (c & kDigit) {  // '\p{N}{1,3}'
      const size_t ini = pos;
      while (pos - ini < 3 && (gpt4o_class(s, pos) & kDigit)) ++pos;
      add(pos);
      continue;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
    const size_t i = pos + (s.cp(pos) == ' ' && gpt4o_class(s, pos + 1) == kOther);
    if (gpt4o_class(s, i) == kOther) {
      pos = i;
      while (gpt4o_class(s, pos) == kOther) ++pos;
      for (uint32_t c2 = s.cp(pos); c2 == '\r' || c2 == '\n' || c2 == '/'; c2 = s.cp(++pos)) {
      }
      add(pos);
      continue;
    }
    size_t nws = 0, last_rn = 0;
    while (gpt4o_class(s, pos + nws) & kSpace) {
      if (gpt4o_class(s, pos + nws) & kCrLf) last_rn = pos + nws + 1;
      ++nws;
    }
    if (last_rn > 0) {  // '\s*[\r\n]+'
      add(pos = last_rn);
      continue;
    }
    if (nws > 1 && s.cp(pos + nws) != kOut) {  // '\s+(?!\S)'
      add(pos += nws - 1);
      continue;
    }
    add(pos += nws > 0 ? nws : 1);  // '\s+', or a codepoint no branch takes
  }
}

}  // namespace

PreTokenizer pretokenizer_from_name(const std::string& name) {
  if (name == "gpt-2" || name == "gpt2" || name == "default" || name.empty())
    return PreTokenizer::kGpt2;
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "codeshell")
    return PreTokenizer::kSmolLm;
  if (name == "llama3" || name == "llama-v3" || name == "llama-bpe" || name == "dbrx" ||
      name == "smaug-bpe")
    return PreTokenizer::kLlama3;
  if (name == "qwen2" || name == "deepseek-r1-qwen" || name == "stablelm2" || name == "megrez")
    return PreTokenizer::kQwen2;
  // o200k (gpt-oss); the reference gives these names the same splitter.
  if (name == "gpt-4o" || name == "llama4" || name == "kanana2" || name == "talkie")
    return PreTokenizer::kGpt4o;
  KV_FAIL("unsupported pre-tokenizer '{}' (supported: gpt-2, smollm, llama-bpe, qwen2, gpt-4o)",
          name);
}

const char* pretokenizer_name(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::kGpt2:
      return "gpt-2";
    case PreTokenizer::kSmolLm:
      return "smollm";
    case PreTokenizer::kLlama3:
      return "llama-bpe";
    case PreTokenizer::kQwen2:
      return "qwen2";
    case PreTokenizer::kGpt4o:
      return "gpt-4o";
  }
  return "?";
}

void pretokenize(PreTokenizer p, const std::vector<uint32_t>& cps, Words& words) {
  const size_t n = cps.size();
  switch (p) {
    case PreTokenizer::kGpt2:
      split_gpt2(Seg{cps, 0, n}, words);
      break;
    case PreTokenizer::kLlama3:
      split_llama3(Seg{cps, 0, n}, true, words);
      break;
    case PreTokenizer::kQwen2:
      split_llama3(Seg{cps, 0, n}, false, words);
      break;
    case PreTokenizer::kGpt4o:
      split_gpt4o(Seg{cps, 0, n}, words);
      break;
    case PreTokenizer::kSmolLm: {
      // '\p{N}' first: every number codepoint is a segment of its own, and
      // the text between numbers is split by the gpt2 scanner, which sees
      // segment ends as end of text.
      size_t ini = 0;
      for (size_t i = 0; i < n; ++i) {
        if (flags(cps[i]) & unicode::kNumber) {
          if (i > ini) split_gpt2(Seg{cps, ini, i}, words);
          words.emplace_back(uint32_t(i), uint32_t(i + 1));
          ini = i + 1;
        }
      }
      if (n > ini) split_gpt2(Seg{cps, ini, n}, words);
      break;
    }
  }
}

}  // namespace kvasir
