// jinja/jinja.h — a compact Jinja interpreter for chat templates.
//
// It implements the subset of Jinja that real chat templates use, with the
// semantics of Python's jinja2 as Hugging Face transformers configures it
// for apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, tojson/raise_exception/strftime_now), and
// renders byte for byte as it does (tests/unit/model/test_jinja*.cpp
// compare against jinja2's output). docs/chat-templates.md describes the
// subset, the limits and why this exists.
//
// Rendering tracks where text came from: strings built from the context's
// data (the conversation) stay marked as data through every operation, so
// the output is a list of runs, template markup or data (segments()).
//
//   Template t(source);                       // throws kModelFormat
//   Str out = t.render({{"messages", msgs}}, {});  // throws kInvalidArgument
//
// A Template is immutable after parsing: render() may run concurrently.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/json.h"
#include "jinja/limits.h"
#include "jinja/str.h"
#include "jinja/value.h"

namespace kvasir::jinja {

struct RenderOptions {
  Limits limits;
  std::tm now{};  // what strftime_now() formats
};

// A run of rendered text: markup (written by the template) or data.
struct Segment {
  std::string text;
  bool data = false;
};

class Template {
 public:
  // Throws kvasir::Error (kModelFormat) naming the line and, for a construct
  // outside the supported subset, the construct.
  explicit Template(std::string_view source);

  // Renders with `vars` defined (they hide the globals of the same name).
  // Throws kvasir::Error (kInvalidArgument): raise_exception()'s message as
  // the template wrote it, anything else as "chat template, line N: ...".
  Str render(const std::vector<std::pair<std::string, Value>>& vars,
             const RenderOptions& options) const;

  // The runs of a rendered string, adjacent runs of the same kind merged.
  static std::vector<Segment> segments(const Str& s);

 private:
  struct Parsed;
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace kvasir::jinja
