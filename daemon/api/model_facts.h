// daemon/api/model_facts.h — what the routes need to know about the served
// model that cannot change while it is served: its vocabulary's size and
// end-of-generation ids, what its chat template can render and which
// tool-call syntax it teaches.
//
// Built once, when the tokenizer and template are loaded (model_facts, from
// the TextCodec: the daemon's main, or ApiService's setup when the context
// comes without), and handed to the routes immutable through ApiContext.
// A request reads them and recomputes nothing: no regex or scan of the
// template's source per request.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/api/chat_turns.h"
#include "daemon/api/tool_calls.h"

namespace kvasir {

class TextCodec;

struct ModelFacts {
  int32_t vocab_size = 0;
  std::vector<int32_t> eog_ids;  // ascending: the tokens that end a generation
  // Both from the template's source (no template: neither traits nor tools,
  // and chat requests are refused when encoded).
  TemplateTraits template_traits;
  ToolFormat tool_format = ToolFormat::kHermes;

  bool is_eog(int32_t id) const;
};

// Reads every fact off `codec` (one pass over the vocabulary, one over the
// template's source).
ModelFacts model_facts(const TextCodec& codec);

}  // namespace kvasir
