// jinja/interp_stmt.cpp — executing statements: output, if, for, set,
// macros and call blocks; limits and errors.
#include "jinja/interpreter.h"
#include "jinja/operators.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

// Python's error for unpacking n values into `want` names.
std::string unpack_error(size_t want, size_t got) {
  return got < want ? fmt::format("not enough values to unpack (expected {}, got {})", want, got)
                    : fmt::format("too many values to unpack (expected {})", want);
}

// jinja2's LoopContext: one object per loop, advanced at each iteration
// (a template that keeps `loop` in a variable sees it advance, as in jinja2).
class LoopObject {
 public:
  explicit LoopObject(const std::vector<Value>& items)
      : items_(items), index_(std::make_shared<size_t>(0)), dict_(std::make_shared<Dict>()) {
    for (const char* k : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                          "depth", "depth0", "previtem", "nextitem"})
      dict_->set(Str::markup(k), Value());
    dict_->set(Str::markup("cycle"),
               Value::callable("cycle", [i = index_](Interpreter& in, Args& a) {
                 if (a.pos.empty()) in.fail("no items for cycling given");
                 return a.pos[*i % a.pos.size()];
               }));
    dict_->set_at(6, Value(int64_t(items.size())));
    dict_->set_at(7, Value(int64_t(1)));
    dict_->set_at(8, Value(int64_t(0)));
  }
  Value at(size_t i) {
    const size_t n = items_.size();
    *index_ = i;
    dict_->set_at(0, Value(int64_t(i + 1)));
    dict_->set_at(1, Value(int64_t(i)));
    dict_->set_at(2, Value(int64_t(n - i)));
    dict_->set_at(3, Value(int64_t(n - i - 1)));
    dict_->set_at(4, Value(i == 0));
    dict_->set_at(5, Value(i + 1 == n));
    dict_->set_at(9, i > 0 ? items_[i - 1] : no_prev_);
    dict_->set_at(10, i + 1 < n ? items_[i + 1] : no_next_);
    return Value::dict(dict_);
  }

 private:
  const std::vector<Value>& items_;
  std::shared_ptr<size_t> index_;
  std::shared_ptr<Dict> dict_;
  const Value no_prev_ = Value::undefined("there is no previous item");
  const Value no_next_ = Value::undefined("there is no next item");
};

}  // namespace

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

void Interpreter::fail(const std::string& msg) const {
  KV_FAIL("{}", msg);
}

void Interpreter::undefined_error(const Value& u) const {
  fail(u.undefined_hint().empty() ? "undefined value" : u.undefined_hint());
}

void Interpreter::step(uint64_t n) {
  steps_ += n + 1;
  if (steps_ > limits_.max_steps)
    fail(fmt::format("rendering took more than {} steps", limits_.max_steps));
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output)
    fail(fmt::format("a string of {} bytes exceeds the limit of {} bytes", bytes,
                     limits_.max_output));
}

void Interpreter::check_items(size_t n) const {
  if (n > limits_.max_items)
    fail(fmt::format("a list of {} items exceeds the limit of {}", n, limits_.max_items));
}

Str Interpreter::render(const Body& body, const ScopePtr& globals) {
  auto root = std::make_shared<Scope>(globals);
  Str out;
  try {
    exec(body, root, out);
  } catch (const TemplateRaised&) {
    throw;
  } catch (const Error& e) {
    throw Error(__FILE__, __LINE__, ErrorCode::kInvalidArgument,
                fmt::format("chat template, line {}: {}", line_, e.message()));
  }
  return out;
}

void Interpreter::emit(Str& out, const Str& s) {
  check_size(out.size() + s.size());
  out.append(s);
  step(s.size() / 256);
}

Interpreter::Nest::Nest(Interpreter& interp) : in(interp) {
  if (++in.nesting_ > in.limits_.max_nesting)
    in.fail(fmt::format("template nested deeper than {} levels while rendering",
                        in.limits_.max_nesting));
}

Interpreter::Flow Interpreter::exec(const Body& body, const ScopePtr& scope, Str& out) {
  const Nest nest(*this);
  for (const StmtPtr& s : body) {
    const Flow f = exec(*s, scope, out);
    if (f != Flow::kNext) return f;
  }
  return Flow::kNext;
}

Str Interpreter::render_block(const Body& body, const ScopePtr& scope) {
  Str buf;
  exec(body, std::make_shared<Scope>(scope), buf);
  return buf;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, Str& out) {
  step();
  line_ = s.line;
  switch (s.kind) {
    case StmtKind::kText:
      emit(out, Str::markup(s.text));
      break;
    case StmtKind::kOutput:
      emit(out, py_str(eval(*s.expr, scope)));
      break;
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches)
        if (eval(*cond, scope).truthy()) return exec(body, scope, out);
      return exec(s.else_body, scope, out);
    case StmtKind::kFor:
      return exec_for(s, scope, out);
    case StmtKind::kSet:
      exec_set(s, scope, eval(*s.expr, scope));
      break;
    case StmtKind::kSetBlock: {
      Value v(render_block(s.body, scope));
      if (s.expr) v = eval_filter(*s.expr, scope, &v);
      exec_set(s, scope, std::move(v));
      break;
    }
    case StmtKind::kMacro:
      exec_macro(s, scope);
      break;
    case StmtKind::kCallBlock:
      exec_call_block(s, scope, out);
      break;
    case StmtKind::kFilterBlock: {
      const Value body(render_block(s.body, scope));
      emit(out, py_str(eval_filter(*s.expr, scope, &body)));
      break;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>(scope);
      for (const auto& [name, e] : s.params) inner->set(name, eval(*e, scope));
      return exec(s.body, inner, out);
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNext;
}

// Binds a loop item to the loop's target names.
void Interpreter::bind(const Stmt& s, const ScopePtr& scope, const Value& item) {
  if (s.targets.size() == 1) return scope->set(s.targets[0], item);
  if (!item.is_list()) fail(fmt::format("cannot unpack non-sequence {}", item.type_name()));
  const std::vector<Value> parts = item.consume();
  if (parts.size() != s.targets.size()) fail(unpack_error(s.targets.size(), parts.size()));
  for (size_t i = 0; i < s.targets.size(); ++i) scope->set(s.targets[i], parts[i]);
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, Str& out) {
  std::vector<Value> items = iterate(*this, eval(*s.expr, scope));
  if (s.cond) {
    std::vector<Value> kept;
    for (Value& item : items) {
      auto sc = std::make_shared<Scope>(scope);
      bind(s, sc, item);
      if (eval(*s.cond, sc).truthy()) kept.push_back(std::move(item));
    }
    items.swap(kept);
  }
  if (items.empty()) {
    exec(s.else_body, std::make_shared<Scope>(scope), out);
    return Flow::kNext;
  }
  LoopObject loop(items);
  for (size_t i = 0; i < items.size(); ++i) {
    step();
    line_ = s.line;
    auto sc = std::make_shared<Scope>(scope);
    bind(s, sc, items[i]);
    sc->set("loop", loop.at(i));
    if (exec(s.body, sc, out) == Flow::kBreak) break;
  }
  return Flow::kNext;
}

void Interpreter::exec_set(const Stmt& s, const ScopePtr& scope, Value v) {
  line_ = s.line;
  if (!s.attr.empty()) {
    const Value ns = lookup(s.targets[0], scope);
    if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object");
    if (v.holds_namespace()) fail("a namespace attribute cannot hold a namespace");
    ns.ns_attrs().set(Str::markup(s.attr), std::move(v));
    return;
  }
  if (s.targets.size() == 1) return scope->set(s.targets[0], std::move(v));
  if (!v.is_list()) fail(fmt::format("cannot unpack non-sequence {}", v.type_name()));
  const std::vector<Value> parts = v.consume();
  if (parts.size() != s.targets.size()) fail(unpack_error(s.targets.size(), parts.size()));
  for (size_t i = 0; i < s.targets.size(); ++i) scope->set(s.targets[i], parts[i]);
}

// A macro sees the scope it was defined in (held weakly: scopes own the
// macro values, and a strong reference would be a cycle).
void Interpreter::exec_macro(const Stmt& s, const ScopePtr& scope) {
  const Stmt* def = &s;
  std::weak_ptr<Scope> closure = scope;
  scope->set(s.name,
             Value::callable(
                 s.name,
                 [def, closure](Interpreter& in, Args& a) {
                   const ScopePtr sc = closure.lock();
                   if (!sc)
                     in.fail(fmt::format("macro '{}' called after its scope ended", def->name));
                   return in.call_macro(*def, sc, a);
                 },
                 true));
}

Value Interpreter::call_macro(const Stmt& def, const ScopePtr& closure, Args& args) {
  if (depth_ >= limits_.max_call_depth)
    fail(fmt::format("macro calls nested deeper than {}", limits_.max_call_depth));
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } depth{++depth_};
  auto sc = std::make_shared<Scope>(closure);
  const size_t np = def.params.size();
  std::vector<bool> bound(np, false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.pos.size(); ++i) {
    if (i < np) {
      sc->set(def.params[i].first, args.pos[i]);
      bound[i] = true;
    } else {
      varargs.push_back(args.pos[i]);
    }
  }
  auto kwargs = std::make_shared<Dict>();
  for (auto& [k, v] : args.kw) {
    size_t i = 0;
    while (i < np && def.params[i].first != k) ++i;
    if (i < np) {
      if (bound[i])
        fail(fmt::format("macro '{}' got multiple values for argument '{}'", def.name, k));
      sc->set(k, v);
      bound[i] = true;
    } else if (k == "caller") {
      sc->set(k, v);
    } else {
      kwargs->set(Str::markup(k), v);
    }
  }
  for (size_t i = 0; i < np; ++i) {
    if (bound[i]) continue;
    const auto& [name, def_expr] = def.params[i];
    sc->set(name, def_expr ? eval(*def_expr, sc)
                           : Value::undefined("parameter '" + name + "' was not provided"));
  }
  sc->set("varargs", Value::list(std::move(varargs), true));
  sc->set("kwargs", Value::dict(std::move(kwargs)));
  Str out;
  exec(def.body, sc, out);
  return Value(std::move(out));
}

// {% call(params) macro(args) %}body{% endcall %}: the macro gets
// caller(), which renders the body.
void Interpreter::exec_call_block(const Stmt& s, const ScopePtr& scope, Str& out) {
  const Stmt* def = &s;
  std::weak_ptr<Scope> closure = scope;
  Value caller = Value::callable(
      "caller",
      [def, closure](Interpreter& in, Args& a) {
        const ScopePtr sc = closure.lock();
        if (!sc) in.fail("caller() called after its scope ended");
        return in.call_macro(*def, sc, a);
      },
      true);
  const Expr& call_expr = *s.expr;
  Value fn = eval(*call_expr.a, scope);
  Args a = eval_args(call_expr, scope);
  a.kw.emplace_back("caller", std::move(caller));
  line_ = s.line;
  emit(out, py_str(call(fn, a)));
}

}  // namespace kvasir::jinja
