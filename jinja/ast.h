// jinja/ast.h — the parsed template: expressions and statements.
//
// Plain tagged nodes: one struct per family with the fields its kinds use,
// so the interpreter is a switch over kinds.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kvasir::jinja {

enum class ExprKind : uint8_t {
  kConst,    // value
  kName,     // name
  kList,     // args: items
  kTuple,    // args: items
  kDict,     // args: key, value, key, value...
  kAttr,     // a.name
  kItem,     // a[b]
  kSlice,    // a[args[0]:args[1]:args[2]], each may be null
  kCall,     // a(args, kwargs)
  kFilter,   // a|name(args, kwargs); a is null in {% filter %} and {% set x | f %}
  kTest,     // a is name(args, kwargs)
  kNeg,      // -a
  kPos,      // +a
  kNot,      // not a
  kBinary,   // a name b: + - * / // % ** ~
  kCompare,  // a ops[0] args[0] ops[1] args[1]...: == != < <= > >= in notin
  kAnd,      // a and b
  kOr,       // a or b
  kCond,     // a if b else c (c may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  Value value;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (condition, body); else_body
  kFor,          // for targets in expr [if cond]: body; else_body
  kSet,          // set targets = expr, or set targets[0].attr = expr
  kSetBlock,     // set targets[0] [| expr] %} body {% endset
  kMacro,        // macro name(params): body
  kCallBlock,    // call(params) expr: body, passed to the macro as caller()
  kFilterBlock,  // filter expr: body
  kWith,         // with params: body
  kBreak,
  kContinue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr, cond;
  std::vector<std::string> targets;
  std::string attr;  // kSet/kSetBlock on a namespace attribute
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default or null
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
};

}  // namespace kvasir::jinja
