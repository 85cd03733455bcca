// daemon/api/grammar_service_off.cpp — make_grammar_service in a build
// without the grammar engine (-DKVASIR_GRAMMAR=OFF): there is none, and
// structured requests get 400.
#include "daemon/api/api.h"

namespace kvasir {

std::shared_ptr<GrammarService> make_grammar_service(const GrammarServiceOptions&) {
  return nullptr;
}

}  // namespace kvasir
