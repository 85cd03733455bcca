// grammar/xgrammar_bridge.h — the XGrammar side of grammar/grammar.h's
// classes (private to grammar/: nothing outside includes XGrammar).
#pragma once

#include <xgrammar/xgrammar.h>

#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/xgrammar_hooks.h"

namespace kvasir::grammar {

struct Vocabulary::Impl {
  std::vector<std::string> tokens;  // bytes per id below size ("" for specials)
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
