// jinja/parser.h — tokens to a syntax tree, following jinja2's
// grammar and operator precedence:
//
//   expression := or ['if' or ['else' expression]]
//   or := and ('or' and)*        and := not ('and' not)*
//   not := 'not' not | compare   compare := math1 (cmp math1)*
//   math1 := concat (('+'|'-') concat)*   concat := math2 ('~' math2)*
//   math2 := pow (('*'|'/'|'//'|'%') pow)*   pow := unary ('**' unary)*
//   unary := ('-'|'+') unary | primary postfix* (filter | test | call)*
//
// Statements: if/elif/else, for (tuple targets, 'if' filter, else), set
// (names, tuples, namespace attributes, block form), macro, call, filter,
// with, break/continue (jinja2.ext.loopcontrols, which transformers
// enables), generation (transformers' extension; rendered as its body).
// Anything else (include, import, extends, block, do, recursive loops...)
// is refused with the construct named: a chat template is a single file
// rendered in a sandbox, and those constructs have no meaning there.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace kvasir::jinja {

// Nesting deeper than this (expressions, blocks) is refused at load: the
// parser and the interpreter are recursive, and a template is untrusted.
inline constexpr int kMaxParseDepth = 100;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}
  // Throws kvasir::Error (kModelFormat) naming the line and the construct.
  Body parse_template();

 private:
  // Statements (parser_stmt.cpp).
  Body subparse(const std::vector<std::string_view>& end_names);
  Body statements(const std::vector<std::string_view>& end_names, bool drop_end);
  StmtPtr statement();
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();
  void assign_target(Stmt& s, bool with_namespace);
  void signature(Stmt& s);

  // Expressions (parser_expr.cpp).
  ExprPtr expression(bool with_condexpr = true);
  ExprPtr tuple(bool with_condexpr = true, bool explicit_parens = false,
                std::string_view extra_end = {});
  ExprPtr condexpr();
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr not_expr();
  ExprPtr compare();
  ExprPtr math1();
  ExprPtr concat();
  ExprPtr math2();
  ExprPtr power();
  ExprPtr unary(bool with_filter = true);
  ExprPtr primary();
  ExprPtr postfix(ExprPtr node);
  ExprPtr subscript(ExprPtr node);
  ExprPtr filter_expr(ExprPtr node);
  ExprPtr filter(ExprPtr node, bool start_inline);
  ExprPtr test(ExprPtr node);
  ExprPtr list_literal();
  ExprPtr dict_literal();
  void call_args(Expr& e);

  // Tokens.
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek() const { return toks_[pos_ + 1 < toks_.size() ? pos_ + 1 : pos_]; }
  const Token& advance() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(std::string_view op) const;
  bool is_name(std::string_view name) const;
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view name);
  void expect_op(std::string_view op);
  void expect(TokKind k, const char* what);
  std::string expect_name();
  [[noreturn]] void fail(const std::string& msg) const;
  ExprPtr node(ExprKind k) const;

  struct DepthGuard {
    explicit DepthGuard(Parser& p);
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loops_ = 0;  // enclosing for-loops (break/continue need one)
};

}  // namespace kvasir::jinja
