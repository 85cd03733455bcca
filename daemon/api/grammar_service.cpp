// daemon/api/grammar_service.cpp — the daemon's GrammarService (api.h):
// checks each constraint on arrival (grammar::check_grammar: the limits,
// then XGrammar building the grammar from the spec), so that a bad schema,
// regex or grammar is a 400 before anything is scheduled. It does not
// compile against the vocabulary: the tail stage does that, once, starting
// when the spec reaches it and overlapped with the prompt's forward pass
// (stages/tail_grammar.h). A compilation here as well would put a second
// one on a new schema's first token. The check is synchronous and cheap
// (no pass over the vocabulary), so done() runs on the caller's thread.
#include "base/log.h"
#include "daemon/api/api.h"
#include "grammar/grammar.h"

namespace kvasir {
namespace {

grammar::GrammarSpec to_spec(const OutputConstraint& c) {
  using K = OutputConstraint::Kind;
  switch (c.kind) {
    case K::kJsonObject:
      return grammar::GrammarSpec::json_object();
    case K::kJsonSchema:
      return grammar::GrammarSpec::json_schema(c.text, /*strict=*/true);
    case K::kRegex:
      return grammar::GrammarSpec::regex(c.text);
    case K::kChoice:
      return grammar::GrammarSpec::choice(c.choices);
    case K::kEbnf:
      return grammar::GrammarSpec::ebnf(c.text);
    case K::kStructuralTag:
      return grammar::GrammarSpec::structural_tag(c.text);
  }
  return grammar::GrammarSpec::json_object();
}

class Service final : public GrammarService {
 public:
  explicit Service(const GrammarServiceOptions& o) {
    options_.limits.max_text_bytes = o.max_spec_bytes;
  }

  void compile(const OutputConstraint& c, Done done) override {
    const grammar::GrammarSpec spec = to_spec(c);
    std::vector<std::string> warnings;
    Status st = grammar::check_grammar(spec, options_, &warnings);
    if (!st.ok()) return done(std::move(st), nullptr);
    for (const std::string& w : warnings)
      KV_LOG_DEBUG("api", "{}: {}", grammar::kind_name(spec.kind), w);
    done(Status(), std::make_shared<const std::string>(grammar::encode_spec(spec)));
  }

 private:
  grammar::CompilerOptions options_;
};

}  // namespace

std::shared_ptr<GrammarService> make_grammar_service(const GrammarServiceOptions& options) {
  return std::make_shared<Service>(options);
}

}  // namespace kvasir
