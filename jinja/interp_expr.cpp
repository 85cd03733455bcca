// jinja/interp_expr.cpp — evaluating expressions; attribute and item
// access as jinja2's sandbox does them.
#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/operators.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

// jinja2's object_type_repr: "None", "dict object", "str object"...
std::string object_type(const Value& v) {
  if (v.is_none()) return "None";
  return v.type_name() + " object";
}

// Methods jinja2's ImmutableSandboxedEnvironment refuses (they modify).
bool unsafe_method(const Value& obj, const std::string& name) {
  static const char* kDict[] = {"clear", "pop", "popitem", "setdefault", "update"};
  static const char* kList[] = {"append", "clear",  "extend",  "insert",
                                "pop",    "remove", "reverse", "sort"};
  if (obj.is_dict()) {
    for (const char* n : kDict)
      if (name == n) return true;
  } else if (obj.is_list() && !obj.is_tuple()) {
    for (const char* n : kList)
      if (name == n) return true;
  }
  return false;
}

Value bound_method(const Value& obj, const std::string& name) {
  return Value::callable(
      name, [obj, name](Interpreter& in, Args& a) { return call_method(in, obj, name, a); });
}

std::optional<int64_t> slice_bound(Interpreter& in, const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_int() && !v.is_bool()) in.fail("slice indices must be integers or None");
  return v.integer();
}

}  // namespace

Value missing(const Value& obj, const std::string& name) {
  return Value::undefined(obj.is_none()
                              ? "'None' has no attribute '" + name + "'"
                              : "'" + object_type(obj) + "' has no attribute '" + name + "'");
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) const {
  if (const Value* v = scope->find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      undefined_error(obj);
    case Value::Kind::kNamespace:
      if (const Value* v = obj.dict().find(name)) return *v;
      return missing(obj, name);
    case Value::Kind::kDict:
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (unsafe_method(obj, name))
        return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() +
                                "' object is unsafe.");
      if (has_method(obj, name)) return bound_method(obj, name);
      if (obj.is_dict())
        if (const Value* v = obj.dict().find(name)) return *v;
      return missing(obj, name);
    default:
      return missing(obj, name);
  }
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict()) {
    if (Dict::hashable(key))
      if (const Value* v = obj.dict().find(key)) return *v;
  } else if ((obj.is_plain_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    const int64_t n =
        obj.is_list() ? int64_t(obj.items().size()) : int64_t(utf8_length(obj.str().bytes()));
    int64_t i = key.integer();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.items()[size_t(i)];
      const auto cps = utf8_offsets(obj.str().bytes());
      Str c = obj.str().substr(cps[size_t(i)], cps[size_t(i) + 1]);
      return obj.is_html() ? Value::html(std::move(c)) : Value(std::move(c));
    }
  }
  if (key.is_string()) return getattr(obj, key.str().bytes());
  return Value::undefined(object_type(obj) + " has no element " + py_str(key).bytes());
}

Value Interpreter::call(const Value& fn, Args& args) {
  if (fn.is_callable()) {
    step();
    return fn.fn().fn(*this, args);
  }
  if (fn.is_undefined()) undefined_error(fn);
  fail(fmt::format("'{}' object is not callable", fn.type_name()));
}

Value Interpreter::filter(std::string_view name, const Value& v, Args& args) {
  FilterFn f = find_filter(name);
  if (!f) fail(fmt::format("no filter named '{}'", name));
  step();
  return f(*this, v, args);
}

bool Interpreter::test(std::string_view name, const Value& v, Args& args) {
  TestFn t = find_test(name);
  if (!t) fail(fmt::format("no test named '{}'", name));
  step();
  return t(*this, v, args);
}

Args Interpreter::eval_args(const Expr& e, const ScopePtr& scope) {
  Args a;
  for (const auto& x : e.args) a.pos.push_back(eval(*x, scope));
  for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x, scope));
  return a;
}

Value Interpreter::eval_collection(const Expr& e, const ScopePtr& scope) {
  if (e.kind != ExprKind::kDict) {
    std::vector<Value> items;
    for (const auto& x : e.args) items.push_back(eval(*x, scope));
    return Value::list(std::move(items), e.kind == ExprKind::kTuple);
  }
  auto d = std::make_shared<Dict>();
  for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
    Value k = eval(*e.args[i], scope);
    Value v = eval(*e.args[i + 1], scope);
    line_ = e.line;
    d->set(k, std::move(v));
  }
  return Value::dict(std::move(d));
}

Value Interpreter::eval_slice(const Expr& e, const ScopePtr& scope) {
  Value obj = eval(*e.a, scope);
  std::optional<int64_t> b[3];
  for (int i = 0; i < 3; ++i)
    if (e.args[size_t(i)]) b[i] = slice_bound(*this, eval(*e.args[size_t(i)], scope));
  line_ = e.line;
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_plain_list()) {
    std::vector<Value> out;
    for (size_t i : slice_indices(*this, obj.items().size(), b[0], b[1], b[2]))
      out.push_back(obj.items()[i]);
    return Value::list(std::move(out), obj.is_tuple());
  }
  // Not sliceable: jinja2's getitem turns Python's TypeError into Undefined.
  if (!obj.is_string())
    return Value::undefined("'" + obj.type_name() + "' object is not subscriptable");
  const Str& s = obj.str();
  const auto cps = utf8_offsets(s.bytes());
  const auto idx = slice_indices(*this, cps.size() - 1, b[0], b[1], b[2]);
  Str out;
  if (!b[2] || *b[2] == 1) {  // contiguous
    if (!idx.empty()) out = s.substr(cps[idx.front()], cps[idx.back() + 1]);
  } else {
    for (size_t i : idx) out.append(s.substr(cps[i], cps[i + 1]));
  }
  return obj.is_html() ? Value::html(std::move(out)) : Value(std::move(out));
}

Value Interpreter::eval_call(const Expr& e, const ScopePtr& scope) {
  Value fn;
  if (e.a->kind == ExprKind::kAttr) {  // obj.method(...): no bound method needed
    Value obj = eval(*e.a->a, scope);
    if ((obj.is_string() || obj.is_dict() || obj.is_list()) && !unsafe_method(obj, e.a->name) &&
        has_method(obj, e.a->name)) {
      Args a = eval_args(e, scope);
      line_ = e.line;
      step();
      return call_method(*this, obj, e.a->name, a);
    }
    line_ = e.a->line;
    fn = getattr(obj, e.a->name);
  } else {
    fn = eval(*e.a, scope);
  }
  Args a = eval_args(e, scope);
  line_ = e.line;
  return call(fn, a);
}

// The filter chain e (a|f|g); block_input feeds the innermost filter of a
// {% filter %} block or {% set x | f %}.
Value Interpreter::eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input) {
  Value input;
  if (e.a)
    input =
        e.a->kind == ExprKind::kFilter ? eval_filter(*e.a, scope, block_input) : eval(*e.a, scope);
  else if (block_input)
    input = *block_input;
  Args a = eval_args(e, scope);
  line_ = e.line;
  return filter(e.name, input, a);
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  const Nest nest(*this);
  step();
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return lookup(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
      return eval_collection(e, scope);
    case ExprKind::kAttr: {
      Value obj = eval(*e.a, scope);
      line_ = e.line;
      return getattr(obj, e.name);
    }
    case ExprKind::kItem: {
      Value obj = eval(*e.a, scope);
      Value key = eval(*e.b, scope);
      line_ = e.line;
      return getitem(obj, key);
    }
    case ExprKind::kSlice:
      return eval_slice(e, scope);
    case ExprKind::kCall:
      return eval_call(e, scope);
    case ExprKind::kFilter:
      return eval_filter(e, scope, nullptr);
    case ExprKind::kTest: {
      Value v = eval(*e.a, scope);
      Args a = eval_args(e, scope);
      line_ = e.line;
      return Value(test(e.name, v, a));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = eval(*e.a, scope);
      line_ = e.line;
      return negate(*this, v, e.kind == ExprKind::kNeg);
    }
    case ExprKind::kNot:
      return Value(!eval(*e.a, scope).truthy());
    case ExprKind::kBinary: {
      Value a = eval(*e.a, scope);
      Value b = eval(*e.b, scope);
      line_ = e.line;
      return binary_op(*this, e.name, a, b);
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.a, scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i], scope);
        line_ = e.line;
        if (!compare_op(*this, e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.a, scope);
      return a.truthy() ? eval(*e.b, scope) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.a, scope);
      return a.truthy() ? a : eval(*e.b, scope);
    }
    case ExprKind::kCond:
      if (eval(*e.b, scope).truthy()) return eval(*e.a, scope);
      if (e.c) return eval(*e.c, scope);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section was defined");
  }
  fail("internal: unknown expression");
}

}  // namespace kvasir::jinja
