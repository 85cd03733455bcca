// base/utf8.h — writing a codepoint as UTF-8, for every module that builds
// text out of codepoints (the tokenizers in model/, the template lexer in
// jinja/). Reading UTF-8 has two owners on purpose: model/unicode.h decodes
// leniently, as the tokenizer reference does; jinja/str.h reads text that was
// checked valid on entry.
#pragma once

#include <cstdint>
#include <string>

namespace kvasir {

// Appends the UTF-8 form of `cp`. Codepoints beyond U+10FFFF (which lenient
// decoding of F4 90.. / F5..F7 lead bytes can produce) are written as U+FFFD:
// the tokenizer reference aborts on them instead, see docs/tokenizer.md.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace kvasir
