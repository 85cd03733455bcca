// stages/tail_grammar_off.cpp — TailGrammar in a build without the grammar
// engine (-DKVASIR_GRAMMAR=OFF): there is none, and constrained rows fail.
#include "base/check.h"
#include "base/log.h"
#include "stages/tail_grammar.h"

namespace kvasir {

std::unique_ptr<TailGrammar> TailGrammar::create(std::shared_ptr<const grammar::Vocabulary>,
                                                 const ipc::GrammarTable&,
                                                 const TailGrammarOptions&) {
  KV_FAIL("this build has no grammar engine (configured with -DKVASIR_GRAMMAR=OFF)");
}

std::unique_ptr<TailGrammar> TailGrammar::create(const ModelFile&, int32_t,
                                                 const ipc::GrammarTable& table,
                                                 const TailGrammarOptions&) {
  if (table.entries() > 0)
    KV_LOG_WARN("stage", "structured outputs off: this build has no grammar engine");
  return nullptr;
}

}  // namespace kvasir
