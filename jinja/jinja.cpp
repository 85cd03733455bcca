// jinja/jinja.cpp — Template: parse once, render many times.
#include "jinja/jinja.h"

#include "base/check.h"
#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace kvasir::jinja {

struct Template::Parsed {
  Body body;
  ScopePtr globals;  // range, dict, namespace... (never modified after parsing)
};

Template::Template(std::string_view source) {
  KV_CHECK_CODE(utf8_valid(source), ErrorCode::kModelFormat, "chat template is not valid UTF-8");
  auto p = std::make_shared<Parsed>();
  p->body = Parser(lex(source)).parse_template();
  p->globals = std::make_shared<Scope>();
  add_globals(*p->globals);
  parsed_ = std::move(p);
}

Str Template::render(const std::vector<std::pair<std::string, Value>>& vars,
                     const RenderOptions& options) const {
  auto context = std::make_shared<Scope>(parsed_->globals);
  for (const auto& [name, v] : vars) context->set(name, v);
  Interpreter in(options.limits, options.now);
  return in.render(parsed_->body, context);
}

std::vector<Segment> Template::segments(const Str& s) {
  std::vector<Segment> out;
  size_t pos = 0;
  auto add = [&](size_t b, size_t e, bool data) {
    if (b < e) out.push_back({s.bytes().substr(b, e - b), data});
  };
  for (const ByteRange& r : s.data_ranges()) {
    add(pos, r.begin, false);
    add(r.begin, r.end, true);
    pos = r.end;
  }
  add(pos, s.size(), false);
  return out;
}

}  // namespace kvasir::jinja
