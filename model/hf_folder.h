// model/hf_folder.h — what a Hugging Face model folder says beside its
// weights: the tokenizer (tokenizer.json with tokenizer_config.json's
// special tokens) and generation_config.json's defaults.
//
// The weights and config.json are ModelFile's (model/model_file.h); the
// chat template is ChatTemplate::from_hf_dir's (model/chat_template.h).
// Everything here is read once, at load: a folder whose tokenizer cannot be
// read is refused then, with the file named, never per request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace kvasir {

// generation_config.json's sampling defaults and end-of-generation ids. A
// key the file lacks (or a file that is absent) stays unset. Honoured keys:
// temperature, top_p, top_k, min_p, repetition_penalty (numbers; null as
// absent) and eos_token_id (an id or a list of ids). vLLM reads the same
// keys (--generation-config auto). Others (do_sample, max_new_tokens, ...)
// are ignored.
struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  std::vector<int32_t> eos_ids;
};

// Reads DIR/generation_config.json. Throws kvasir::Error (kModelFormat)
// naming the file and the key if it is not JSON or a honoured key has the
// wrong type.
GenerationDefaults read_generation_config(const std::string& dir);

// The folder's tokenizer: DIR/tokenizer.json (Tokenizer::from_hf_json), its
// bos/eos overridden by tokenizer_config.json's bos_token / eos_token (a
// string or {"content": ...}) when they name a token, add_bos_token /
// add_eos_token when given, and every id of generation_config.json's
// eos_token_id added to the end-of-generation ids. Throws kvasir::Error
// (kModelFormat) naming the file when tokenizer.json is absent or
// unreadable, or a JSON file is malformed.
std::unique_ptr<Tokenizer> hf_folder_tokenizer(const std::string& dir);

}  // namespace kvasir
