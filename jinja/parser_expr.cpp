// jinja/parser_expr.cpp — expressions, as jinja2's parser reads them.
#include "base/check.h"
#include "jinja/builtins.h"
#include "jinja/parser.h"

namespace kvasir::jinja {

Parser::DepthGuard::DepthGuard(Parser& parser) : p(parser) {
  if (++p.depth_ > kMaxParseDepth)
    p.fail(fmt::format("nested deeper than {} levels", kMaxParseDepth));
}

bool Parser::is_op(std::string_view op) const {
  return cur().kind == TokKind::kOp && cur().text == op;
}

bool Parser::is_name(std::string_view name) const {
  return cur().kind == TokKind::kName && cur().text == name;
}

bool Parser::skip_op(std::string_view op) {
  if (!is_op(op)) return false;
  advance();
  return true;
}

bool Parser::skip_name(std::string_view name) {
  if (!is_name(name)) return false;
  advance();
  return true;
}

void Parser::expect_op(std::string_view op) {
  if (!skip_op(op)) fail(fmt::format("expected '{}'", op));
}

void Parser::expect(TokKind k, const char* what) {
  if (cur().kind != k) fail(fmt::format("expected {}", what));
  advance();
}

std::string Parser::expect_name() {
  if (cur().kind != TokKind::kName) fail("expected a name");
  return advance().text;
}

void Parser::fail(const std::string& msg) const {
  const Token& t = cur();
  std::string near;
  switch (t.kind) {
    case TokKind::kEof:
      near = "end of template";
      break;
    case TokKind::kBlockEnd:
      near = "'%}'";
      break;
    case TokKind::kVarEnd:
      near = "'}}'";
      break;
    case TokKind::kText:
      near = "template text";
      break;
    case TokKind::kString:
      near = "a string";
      break;
    default:
      near = "'" + t.text + "'";
  }
  KV_FAIL_CODE(ErrorCode::kModelFormat, "chat template, line {}: {} (at {})", t.line, msg, near);
}

ExprPtr Parser::node(ExprKind k) const {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = cur().line;
  return e;
}

ExprPtr Parser::expression(bool with_condexpr) {
  return with_condexpr ? condexpr() : or_expr();
}

// A tuple without parentheses where the grammar allows one ({{ a, b }},
// set x = a, b, for targets), or the single expression.
ExprPtr Parser::tuple(bool with_condexpr, bool explicit_parens, std::string_view extra_end) {
  auto t = node(ExprKind::kTuple);
  bool is_tuple = false;
  while (true) {
    if (!t->args.empty()) expect_op(",");
    const TokKind k = cur().kind;
    if (k == TokKind::kVarEnd || k == TokKind::kBlockEnd || is_op(")") ||
        (!extra_end.empty() && is_name(extra_end)))
      break;
    t->args.push_back(expression(with_condexpr));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!t->args.empty()) return std::move(t->args[0]);
    if (!explicit_parens) fail("expected an expression");
  }
  return t;
}

ExprPtr Parser::condexpr() {
  DepthGuard g(*this);
  ExprPtr e = or_expr();
  while (is_name("if")) {
    auto c = node(ExprKind::kCond);
    advance();
    c->b = or_expr();
    if (skip_name("else")) c->c = condexpr();
    c->a = std::move(e);
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::or_expr() {
  ExprPtr e = and_expr();
  while (is_name("or")) {
    auto o = node(ExprKind::kOr);
    advance();
    o->a = std::move(e);
    o->b = and_expr();
    e = std::move(o);
  }
  return e;
}

ExprPtr Parser::and_expr() {
  ExprPtr e = not_expr();
  while (is_name("and")) {
    auto o = node(ExprKind::kAnd);
    advance();
    o->a = std::move(e);
    o->b = not_expr();
    e = std::move(o);
  }
  return e;
}

ExprPtr Parser::not_expr() {
  DepthGuard g(*this);
  if (is_name("not")) {
    auto n = node(ExprKind::kNot);
    advance();
    n->a = not_expr();
    return n;
  }
  return compare();
}

ExprPtr Parser::compare() {
  ExprPtr first = math1();
  auto c = node(ExprKind::kCompare);
  while (true) {
    std::string op;
    if (cur().kind == TokKind::kOp &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
         cur().text == ">" || cur().text == ">=")) {
      op = advance().text;
    } else if (is_name("in")) {
      advance();
      op = "in";
    } else if (is_name("not") && peek().kind == TokKind::kName && peek().text == "in") {
      advance();
      advance();
      op = "notin";
    } else {
      break;
    }
    c->ops.push_back(op);
    c->args.push_back(math1());
  }
  if (c->ops.empty()) return first;
  c->a = std::move(first);
  return c;
}

namespace {
ExprPtr binary(ExprPtr a, ExprPtr b, std::string op, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = ExprKind::kBinary;
  e->line = line;
  e->name = std::move(op);
  e->a = std::move(a);
  e->b = std::move(b);
  return e;
}
}  // namespace

ExprPtr Parser::math1() {
  ExprPtr e = concat();
  while (is_op("+") || is_op("-")) {
    const int line = cur().line;
    std::string op = advance().text;
    e = binary(std::move(e), concat(), op, line);
  }
  return e;
}

ExprPtr Parser::concat() {
  ExprPtr e = math2();
  while (is_op("~")) {
    const int line = cur().line;
    advance();
    e = binary(std::move(e), math2(), "~", line);
  }
  return e;
}

ExprPtr Parser::math2() {
  ExprPtr e = power();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const int line = cur().line;
    std::string op = advance().text;
    e = binary(std::move(e), power(), op, line);
  }
  return e;
}

ExprPtr Parser::power() {
  ExprPtr e = unary();
  while (is_op("**")) {
    const int line = cur().line;
    advance();
    e = binary(std::move(e), unary(), "**", line);
  }
  return e;
}

ExprPtr Parser::unary(bool with_filter) {
  DepthGuard g(*this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = node(is_op("-") ? ExprKind::kNeg : ExprKind::kPos);
    advance();
    e->a = unary(false);
  } else {
    e = primary();
  }
  e = postfix(std::move(e));
  return with_filter ? filter_expr(std::move(e)) : std::move(e);
}

ExprPtr Parser::primary() {
  const Token& t = cur();
  if (t.kind == TokKind::kName) {
    auto e = node(ExprKind::kConst);
    if (t.text == "true" || t.text == "True") {
      e->value = Value(true);
    } else if (t.text == "false" || t.text == "False") {
      e->value = Value(false);
    } else if (t.text == "none" || t.text == "None") {
      e->value = Value::none();
    } else {
      e->kind = ExprKind::kName;
      e->name = t.text;
    }
    advance();
    return e;
  }
  if (t.kind == TokKind::kString) {
    auto e = node(ExprKind::kConst);
    std::string s;
    while (cur().kind == TokKind::kString) s += advance().text;
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.kind == TokKind::kInt || t.kind == TokKind::kFloat) {
    auto e = node(ExprKind::kConst);
    e->value = t.kind == TokKind::kInt ? Value(t.ival) : Value(t.fval);
    advance();
    return e;
  }
  if (skip_op("(")) {
    ExprPtr e = tuple(true, true);
    expect_op(")");
    return e;
  }
  if (is_op("[")) return list_literal();
  if (is_op("{")) return dict_literal();
  fail("expected an expression");
}

ExprPtr Parser::list_literal() {
  auto e = node(ExprKind::kList);
  expect_op("[");
  while (!is_op("]")) {
    if (!e->args.empty()) expect_op(",");
    if (is_op("]")) break;
    e->args.push_back(expression());
  }
  expect_op("]");
  return e;
}

ExprPtr Parser::dict_literal() {
  auto e = node(ExprKind::kDict);
  expect_op("{");
  while (!is_op("}")) {
    if (!e->args.empty()) expect_op(",");
    if (is_op("}")) break;
    e->args.push_back(expression());
    expect_op(":");
    e->args.push_back(expression());
  }
  expect_op("}");
  return e;
}

ExprPtr Parser::postfix(ExprPtr e) {
  while (true) {
    if (is_op(".")) {
      advance();
      if (cur().kind == TokKind::kName) {
        auto a = node(ExprKind::kAttr);
        a->name = advance().text;
        a->a = std::move(e);
        e = std::move(a);
      } else if (cur().kind == TokKind::kInt) {
        auto i = node(ExprKind::kItem);
        i->b = node(ExprKind::kConst);
        i->b->value = Value(advance().ival);
        i->a = std::move(e);
        e = std::move(i);
      } else {
        fail("expected an attribute name");
      }
    } else if (is_op("[")) {
      e = subscript(std::move(e));
    } else if (is_op("(")) {
      auto c = node(ExprKind::kCall);
      c->a = std::move(e);
      call_args(*c);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

// obj[key] or obj[start:stop:step].
ExprPtr Parser::subscript(ExprPtr obj) {
  expect_op("[");
  ExprPtr parts[3];
  bool slice = false;
  if (!is_op(":")) parts[0] = expression();
  if (skip_op(":")) {
    slice = true;
    if (!is_op("]") && !is_op(":")) parts[1] = expression();
    if (skip_op(":") && !is_op("]")) parts[2] = expression();
  }
  if (!slice && !parts[0]) fail("expected a subscript");
  if (is_op(",")) fail("tuple subscripts are not supported");
  expect_op("]");
  auto e = node(slice ? ExprKind::kSlice : ExprKind::kItem);
  e->a = std::move(obj);
  if (slice) {
    for (auto& p : parts) e->args.push_back(std::move(p));
  } else {
    e->b = std::move(parts[0]);
  }
  return e;
}

void Parser::call_args(Expr& e) {
  expect_op("(");
  bool comma = false;
  while (!is_op(")")) {
    if (comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (cur().kind == TokKind::kName && peek().kind == TokKind::kOp && peek().text == "=") {
      std::string key = advance().text;
      advance();
      e.kwargs.emplace_back(std::move(key), expression());
    } else {
      if (!e.kwargs.empty()) fail("positional argument after a keyword argument");
      e.args.push_back(expression());
    }
    comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      e = filter(std::move(e), false);
    } else if (is_name("is")) {
      e = test(std::move(e));
    } else if (is_op("(")) {
      auto c = node(ExprKind::kCall);
      c->a = std::move(e);
      call_args(*c);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

// input | name(args) | name2 ...; input is null for {% filter %} blocks.
ExprPtr Parser::filter(ExprPtr input, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    auto f = node(ExprKind::kFilter);
    f->name = expect_name();
    while (skip_op(".")) f->name += "." + expect_name();
    if (!has_filter(f->name)) fail(fmt::format("unsupported filter '{}'", f->name));
    if (is_op("(")) call_args(*f);
    f->a = std::move(input);
    input = std::move(f);
  }
  return input;
}

ExprPtr Parser::test(ExprPtr value) {
  advance();  // 'is'
  const bool negated = skip_name("not");
  auto t = node(ExprKind::kTest);
  t->name = expect_name();
  while (skip_op(".")) t->name += "." + expect_name();
  if (!has_test(t->name)) fail(fmt::format("unsupported test '{}'", t->name));
  const TokKind k = cur().kind;
  if (is_op("(")) {
    call_args(*t);
  } else if ((k == TokKind::kName || k == TokKind::kString || k == TokKind::kInt ||
              k == TokKind::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("tests cannot be chained with 'is'");
    t->args.push_back(postfix(primary()));
  }
  t->a = std::move(value);
  if (!negated) return t;
  auto n = node(ExprKind::kNot);
  n->a = std::move(t);
  return n;
}

}  // namespace kvasir::jinja
