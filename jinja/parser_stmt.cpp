// jinja/parser_stmt.cpp — statements and the template body.
#include <algorithm>

#include "base/check.h"
#include "jinja/parser.h"

namespace kvasir::jinja {
namespace {

// jinja2 tags that a chat template cannot use here (named in the error).
bool known_unsupported(std::string_view t) {
  for (const char* n : {"include", "import", "from", "extends", "block", "autoescape", "do",
                        "trans", "pluralize", "print", "endblock", "debug"})
    if (t == n) return true;
  return false;
}

StmtPtr make(StmtKind k, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = k;
  s->line = line;
  return s;
}

}  // namespace

Body Parser::parse_template() {
  Body b = subparse({});
  if (cur().kind != TokKind::kEof) fail("unexpected tag");
  return b;
}

// Statements up to a block tag whose first name is one of end_names (left
// as the current token) or the end of the template.
Body Parser::subparse(const std::vector<std::string_view>& end_names) {
  DepthGuard g(*this);
  Body body;
  while (cur().kind != TokKind::kEof) {
    const Token& t = cur();
    if (t.kind == TokKind::kText) {
      auto s = make(StmtKind::kText, t.line);
      s->text = advance().text;
      body.push_back(std::move(s));
    } else if (t.kind == TokKind::kVarBegin) {
      auto s = make(StmtKind::kOutput, t.line);
      advance();
      s->expr = tuple();
      expect(TokKind::kVarEnd, "'}}'");
      body.push_back(std::move(s));
    } else if (t.kind == TokKind::kBlockBegin) {
      advance();
      if (cur().kind == TokKind::kName &&
          std::find(end_names.begin(), end_names.end(), cur().text) != end_names.end())
        return body;
      body.push_back(statement());
      expect(TokKind::kBlockEnd, "'%}'");
    } else {
      fail("unexpected token");
    }
  }
  return body;
}

// The block after a statement's header, up to one of end_names; with
// drop_end the end name is consumed (its '%}' is left to subparse).
Body Parser::statements(const std::vector<std::string_view>& end_names, bool drop_end) {
  skip_op(":");
  expect(TokKind::kBlockEnd, "'%}'");
  Body b = subparse(end_names);
  if (cur().kind == TokKind::kEof) {
    std::string names;
    for (auto n : end_names) names += (names.empty() ? "" : " or ") + std::string(n);
    fail(fmt::format("missing {{% {} %}}", names));
  }
  if (drop_end) advance();
  return b;
}

StmtPtr Parser::statement() {
  if (cur().kind != TokKind::kName) fail("expected a tag name");
  const std::string t = cur().text;
  const int line = cur().line;
  if (t == "for") return parse_for();
  if (t == "if") return parse_if();
  if (t == "set") return parse_set();
  if (t == "macro") return parse_macro();
  if (t == "call") return parse_call_block();
  if (t == "filter") return parse_filter_block();
  if (t == "with") return parse_with();
  if (t == "break" || t == "continue") {
    if (loops_ == 0) fail(fmt::format("'{}' outside a loop", t));
    advance();
    return make(t == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
  }
  if (t == "generation") {  // transformers' assistant-mask marker: renders its body
    advance();
    auto s = make(StmtKind::kWith, line);
    s->body = statements({"endgeneration"}, true);
    return s;
  }
  if (known_unsupported(t)) fail(fmt::format("unsupported construct '{{% {} %}}'", t));
  if (t.rfind("end", 0) == 0 || t == "elif" || t == "else")
    fail(fmt::format("unexpected '{{% {} %}}'", t));
  fail(fmt::format("unknown tag '{}'", t));
}

// Names (a; a, b; (a, b)) or, with_namespace, ns.attr.
void Parser::assign_target(Stmt& s, bool with_namespace) {
  if (with_namespace && cur().kind == TokKind::kName && peek().kind == TokKind::kOp &&
      peek().text == ".") {
    s.targets.push_back(advance().text);
    advance();
    s.attr = expect_name();
    return;
  }
  const bool parens = skip_op("(");
  while (true) {
    const std::string n = expect_name();
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
      fail(fmt::format("cannot assign to '{}'", n));
    s.targets.push_back(n);
    if (!skip_op(",")) break;
    if (parens && is_op(")")) break;
    if (!parens && (is_name("in") || is_op("="))) break;
  }
  if (parens) expect_op(")");
}

StmtPtr Parser::parse_for() {
  auto s = make(StmtKind::kFor, cur().line);
  advance();
  assign_target(*s, false);
  if (!skip_name("in")) fail("expected 'in'");
  s->expr = tuple(false, false, "recursive");
  if (skip_name("if")) s->cond = expression();
  if (is_name("recursive")) fail("unsupported construct 'recursive' loop");
  ++loops_;
  s->body = statements({"endfor", "else"}, false);
  --loops_;
  if (advance().text == "else") s->else_body = statements({"endfor"}, true);
  return s;
}

StmtPtr Parser::parse_if() {
  auto s = make(StmtKind::kIf, cur().line);
  advance();
  while (true) {
    ExprPtr cond = tuple(false);
    Body body = statements({"elif", "else", "endif"}, false);
    s->branches.emplace_back(std::move(cond), std::move(body));
    const std::string end = advance().text;
    if (end == "elif") continue;
    if (end == "else") s->else_body = statements({"endif"}, true);
    return s;
  }
}

StmtPtr Parser::parse_set() {
  auto s = make(StmtKind::kSet, cur().line);
  advance();
  assign_target(*s, true);
  if (skip_op("=")) {
    s->expr = tuple();
    return s;
  }
  if (s->targets.size() != 1) fail("a block set takes one target");
  s->kind = StmtKind::kSetBlock;
  s->expr = filter(nullptr, false);
  s->body = statements({"endset"}, true);
  return s;
}

void Parser::signature(Stmt& s) {
  expect_op("(");
  while (!is_op(")")) {
    if (!s.params.empty()) expect_op(",");
    std::string name = expect_name();
    ExprPtr def;
    if (skip_op("=")) def = expression();
    s.params.emplace_back(std::move(name), std::move(def));
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro() {
  auto s = make(StmtKind::kMacro, cur().line);
  advance();
  s->name = expect_name();
  signature(*s);
  const int loops = std::exchange(loops_, 0);
  s->body = statements({"endmacro"}, true);
  loops_ = loops;
  return s;
}

StmtPtr Parser::parse_call_block() {
  auto s = make(StmtKind::kCallBlock, cur().line);
  advance();
  if (is_op("(")) signature(*s);
  s->expr = expression();
  if (s->expr->kind != ExprKind::kCall) fail("expected a macro call");
  const int loops = std::exchange(loops_, 0);
  s->body = statements({"endcall"}, true);
  loops_ = loops;
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = make(StmtKind::kFilterBlock, cur().line);
  advance();
  s->expr = filter(nullptr, true);
  s->body = statements({"endfilter"}, true);
  return s;
}

StmtPtr Parser::parse_with() {
  auto s = make(StmtKind::kWith, cur().line);
  advance();
  while (cur().kind != TokKind::kBlockEnd) {
    if (!s->params.empty()) expect_op(",");
    std::string name = expect_name();
    expect_op("=");
    s->params.emplace_back(std::move(name), expression());
  }
  s->body = statements({"endwith"}, true);
  return s;
}

}  // namespace kvasir::jinja
