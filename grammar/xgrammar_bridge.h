// grammar/xgrammar_bridge.h — the XGrammar side of grammar/grammar.h's
// classes (private to grammar/: nothing outside includes XGrammar).
#pragma once

#include <xgrammar/xgrammar.h>

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/xgrammar_hooks.h"

namespace kvasir::grammar {

// XGrammar matches UTF-8 by its lead byte and takes any continuation byte
// after it, so its character classes admit overlong forms, surrogates and
// code points above U+10FFFF, which are not UTF-8 (a client's JSON parser
// refuses them; the detokenizer turns them into U+FFFD). The grammar module
// closes that gap: the byte after a lead byte must be in this range.
inline bool utf8_narrow_lead(uint8_t lead) {
  return lead == 0xE0 || lead == 0xED || lead == 0xF0 || lead == 0xF4;
}
inline bool utf8_second_byte_ok(uint8_t lead, uint8_t next) {
  switch (lead) {
    case 0xE0:
      return next >= 0xA0 && next <= 0xBF;  // no overlong 3-byte forms
    case 0xED:
      return next >= 0x80 && next <= 0x9F;  // no surrogates
    case 0xF0:
      return next >= 0x90 && next <= 0xBF;  // no overlong 4-byte forms
    case 0xF4:
      return next >= 0x80 && next <= 0x8F;  // nothing above U+10FFFF
    default:
      return true;
  }
}

struct Vocabulary::Impl {
  std::vector<std::string> tokens;  // bytes per id below tokens.size() ("": never text)
  std::vector<int32_t> stop_ids;
  int32_t size = 0;
  uint64_t fingerprint = 0;
  xgrammar::TokenizerInfo info{xgrammar::NullObj{}};
};

struct CompiledGrammar::Impl {
  GrammarSpec spec;
  std::shared_ptr<const Vocabulary> vocab;
  xgrammar::CompiledGrammar compiled{xgrammar::NullObj{}};
  double seconds = 0;
  std::vector<std::string> warnings;
};

}  // namespace kvasir::grammar
