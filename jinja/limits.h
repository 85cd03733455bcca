// jinja/limits.h — what one rendering may consume.
//
// A chat template comes with the model file, and the conversation with the
// request: both are untrusted. Each limit ends a rendering with a clear
// error (kInvalidArgument) instead of exhausting memory, stack or time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvasir::jinja {

struct Limits {
  // Bytes of the rendered prompt, and of any string built on the way.
  size_t max_output = 8u << 20;
  // Work: one step per statement, expression and loop iteration, plus one
  // per 256 bytes of every string built. Bounds the time of a rendering
  // (a runaway loop stops after about half a second at the default).
  uint64_t max_steps = 10'000'000;
  // Nested macro calls (a recursive macro over a nested tool schema).
  int max_call_depth = 64;
  // Blocks and expressions being evaluated inside one another, macro calls
  // included: bounds the interpreter's stack (a few hundred kilobytes at the
  // default, a few megabytes in a sanitizer build).
  int max_nesting = 500;
  // Elements of one list (range(), concatenation, repetition).
  size_t max_items = 1u << 20;
};

}  // namespace kvasir::jinja
