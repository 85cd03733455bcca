// jinja/interpreter.h — renders a parsed template.
//
// Scopes follow jinja2: a for-loop iteration, a macro call, a with-block
// and a call-block body each get a fresh scope (a `set` inside does not
// leak out, which is why templates use namespace()); if-blocks do not.
// Macros see the scope they were defined in, as it is when they are called.
//
// Every limit is checked as the template runs (see Limits in jinja.h): a
// template is untrusted input, and a bad one must end in a clear error,
// never a crash or a hang.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/check.h"
#include "jinja/ast.h"
#include "jinja/limits.h"
#include "jinja/str.h"
#include "jinja/value.h"

namespace kvasir::jinja {

// Thrown by raise_exception(): its message is the template's own and is
// passed on unchanged.
class TemplateRaised : public Error {
 public:
  using Error::Error;
};

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v) { vars_[name] = std::move(v); }

 private:
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  Interpreter(const Limits& limits, const std::tm& now) : limits_(limits), now_(now) {}
  // Renders body with `globals` as the outermost scope. Errors are
  // kvasir::Error (kInvalidArgument) with the line, or TemplateRaised.
  Str render(const Body& body, const ScopePtr& globals);

  // For the operators and builtins.
  [[noreturn]] void fail(const std::string& msg) const;
  // jinja2's UndefinedError for using an undefined value (its hint).
  [[noreturn]] void undefined_error(const Value& u) const;
  void step(uint64_t n = 1);
  void check_size(size_t bytes) const;  // a string about to be built
  void check_items(size_t n) const;     // a list about to be built
  const Limits& limits() const { return limits_; }
  const std::tm& now() const { return now_; }
  Value call(const Value& fn, Args& args);
  Value filter(std::string_view name, const Value& v, Args& args);
  bool test(std::string_view name, const Value& v, Args& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);

 private:
  enum class Flow { kNext, kBreak, kContinue };
  // Statements (interp_stmt.cpp).
  Flow exec(const Body& body, const ScopePtr& scope, Str& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, Str& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, Str& out);
  void exec_set(const Stmt& s, const ScopePtr& scope, Value v);
  void exec_macro(const Stmt& s, const ScopePtr& scope);
  void exec_call_block(const Stmt& s, const ScopePtr& scope, Str& out);
  Value call_macro(const Stmt& def, const ScopePtr& closure, Args& args);
  Str render_block(const Body& body, const ScopePtr& scope);
  void emit(Str& out, const Str& s);
  void bind(const Stmt& s, const ScopePtr& scope, const Value& item);

  // Expressions (interp_expr.cpp).
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_call(const Expr& e, const ScopePtr& scope);
  Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input);
  Value eval_slice(const Expr& e, const ScopePtr& scope);
  Value eval_collection(const Expr& e, const ScopePtr& scope);
  Args eval_args(const Expr& e, const ScopePtr& scope);
  Value lookup(const std::string& name, const ScopePtr& scope) const;

  Limits limits_;
  std::tm now_;
  uint64_t steps_ = 0;
  int depth_ = 0;    // macro calls
  int nesting_ = 0;  // bodies and expressions being evaluated
  struct Nest {      // counts one level of nesting for its lifetime
    explicit Nest(Interpreter& in);
    ~Nest() { --in.nesting_; }
    Interpreter& in;
  };
  int line_ = 0;  // of the statement or expression being evaluated
};

// The Undefined for obj.name / obj[name] that does not exist, with jinja2's
// message ("'dict object' has no attribute 'x'").
Value missing(const Value& obj, const std::string& name);

}  // namespace kvasir::jinja
