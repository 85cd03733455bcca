// daemon/api/model_facts.cpp — see model_facts.h.
#include "daemon/api/model_facts.h"

#include <algorithm>
#include <string>

#include "daemon/api/api.h"

namespace kvasir {

bool ModelFacts::is_eog(int32_t id) const {
  return std::binary_search(eog_ids.begin(), eog_ids.end(), id);
}

ModelFacts model_facts(const TextCodec& codec) {
  ModelFacts f;
  f.vocab_size = codec.vocab_size();
  for (int32_t id = 0; id < f.vocab_size; ++id)
    if (codec.is_eog(id)) f.eog_ids.push_back(id);
  const std::string src = codec.chat_template_source();
  f.template_traits = template_traits(src);
  f.tool_format = detect_tool_format(src);
  return f;
}

}  // namespace kvasir
