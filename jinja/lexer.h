// jinja/lexer.h — template source to tokens, with jinja2's whitespace
// rules as transformers configures them.
//
// transformers renders chat templates with trim_blocks=True and
// lstrip_blocks=True (and jinja2's default keep_trailing_newline=False):
//   - the first newline after a block or comment tag (%} #}) is removed;
//   - spaces and tabs from the start of a line up to a block or comment tag
//     are removed when nothing else precedes the tag on that line;
//   - '-' inside a delimiter ({%- -%} {{- -}} {#- -#}) strips all whitespace
//     on that side, '+' ({%+ +%}) turns the two rules above off for that tag;
//   - newlines are normalised to \n and one trailing newline is dropped.
// The lexer applies all of this, so the parser only sees text and tags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::jinja {

enum class TokKind : uint8_t {
  kText,  // template text, whitespace rules applied
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,  // text: the decoded value
  kInt,
  kFloat,
  kOp,  // text: the operator ("+", "//", "==", "(", ...)
  kEof,
};

struct Token {
  TokKind kind = TokKind::kEof;
  std::string text;
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
};

// Throws kvasir::Error (kModelFormat) naming the line on malformed input.
std::vector<Token> lex(std::string_view source);

}  // namespace kvasir::jinja
