// jinja/tests.cpp — jinja2's tests (`x is defined`, `x is string`...),
// with Python's answers for each kind of value.
#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/operators.h"
#include "jinja/text_ops.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

const Value& arg(Interpreter& in, Args& a, const char* test) {
  ArgReader r(in, a, test, {"other"});
  if (!r.has(0)) in.fail(fmt::format("test '{}' takes one argument", test));
  return *r.get(0);
}

void none_args(Interpreter& in, Args& a, const char* test) {
  ArgReader(in, a, test, {});
}

bool t_defined(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "defined"), !v.is_undefined();
}
bool t_undefined(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "undefined"), v.is_undefined();
}
bool t_none(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "none"), v.is_none();
}
bool t_boolean(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "boolean"), v.is_bool();
}
bool t_true(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "true"), v.is_bool() && v.boolean();
}
bool t_false(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "false"), v.is_bool() && !v.boolean();
}
bool t_integer(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "integer"), v.is_int();
}
bool t_float(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "float"), v.is_float();
}
bool t_number(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "number"), v.is_number();
}
bool t_string(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "string"), v.is_string();
}
bool t_mapping(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "mapping"), v.is_dict();
}

// iter(v) succeeds: strings, lists, dicts, and Undefined (it iterates empty).
bool t_iterable(Interpreter& in, const Value& v, Args& a) {
  none_args(in, a, "iterable");
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}

// len(v) and v.__getitem__ exist: dicts and Undefined too, not generators
// or dict views.
bool t_sequence(Interpreter& in, const Value& v, Args& a) {
  none_args(in, a, "sequence");
  return v.is_string() || v.is_plain_list() || v.is_dict() || v.is_undefined();
}

// callable(v): Undefined defines __call__ (to raise), so it counts.
bool t_callable(Interpreter& in, const Value& v, Args& a) {
  none_args(in, a, "callable");
  return v.is_callable() || v.is_undefined();
}

bool t_sameas(Interpreter& in, const Value& v, Args& a) {
  return v.same_as(arg(in, a, "sameas"));
}
bool t_eq(Interpreter& in, const Value& v, Args& a) {
  return equals(v, arg(in, a, "eq"));
}
bool t_ne(Interpreter& in, const Value& v, Args& a) {
  return !equals(v, arg(in, a, "ne"));
}
bool t_lt(Interpreter& in, const Value& v, Args& a) {
  return compare_op(in, "<", v, arg(in, a, "lt"));
}
bool t_le(Interpreter& in, const Value& v, Args& a) {
  return compare_op(in, "<=", v, arg(in, a, "le"));
}
bool t_gt(Interpreter& in, const Value& v, Args& a) {
  return compare_op(in, ">", v, arg(in, a, "gt"));
}
bool t_ge(Interpreter& in, const Value& v, Args& a) {
  return compare_op(in, ">=", v, arg(in, a, "ge"));
}
bool t_in(Interpreter& in, const Value& v, Args& a) {
  return contains(in, arg(in, a, "in"), v);
}

int64_t int_of(Interpreter& in, const Value& v, const char* test) {
  if (v.is_undefined()) in.undefined_error(v);
  if (!v.is_int() && !v.is_bool())
    in.fail(fmt::format("test '{}' needs an integer, not {}", test, v.type_name()));
  return v.integer();
}

bool t_odd(Interpreter& in, const Value& v, Args& a) {
  none_args(in, a, "odd");
  return int_of(in, v, "odd") % 2 != 0;
}

bool t_even(Interpreter& in, const Value& v, Args& a) {
  none_args(in, a, "even");
  return int_of(in, v, "even") % 2 == 0;
}

bool t_divisibleby(Interpreter& in, const Value& v, Args& a) {
  const int64_t d = int_of(in, arg(in, a, "divisibleby"), "divisibleby");
  if (d == 0) in.fail("integer division or modulo by zero");
  return int_of(in, v, "divisibleby") % d == 0;
}

// str(v).islower() / isupper(): some cased character, none of the other case.
bool t_case(const Value& v, bool upper) {
  const Str s = py_str(v);
  return py_lower(s).bytes() != py_upper(s).bytes() &&
         (upper ? py_upper(s).bytes() == s.bytes() : py_lower(s).bytes() == s.bytes());
}
bool t_lower(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "lower"), t_case(v, false);
}
bool t_upper(Interpreter& in, const Value& v, Args& a) {
  return none_args(in, a, "upper"), t_case(v, true);
}
bool t_escaped(Interpreter& in, const Value&, Args& a) {
  return none_args(in, a, "escaped"), false;
}

bool t_filter(Interpreter& in, const Value& v, Args& a) {
  none_args(in, a, "filter");
  return v.is_string() && has_filter(v.str().bytes());
}

bool t_test(Interpreter& in, const Value& v, Args& a) {
  none_args(in, a, "test");
  return v.is_string() && has_test(v.str().bytes());
}

}  // namespace

void all_tests(TestTable& t) {
  t.insert(t.end(), {
                        {"defined", t_defined},
                        {"undefined", t_undefined},
                        {"none", t_none},
                        {"boolean", t_boolean},
                        {"true", t_true},
                        {"false", t_false},
                        {"integer", t_integer},
                        {"float", t_float},
                        {"number", t_number},
                        {"string", t_string},
                        {"mapping", t_mapping},
                        {"iterable", t_iterable},
                        {"sequence", t_sequence},
                        {"callable", t_callable},
                        {"sameas", t_sameas},
                        {"eq", t_eq},
                        {"equalto", t_eq},
                        {"==", t_eq},
                        {"ne", t_ne},
                        {"!=", t_ne},
                        {"lt", t_lt},
                        {"lessthan", t_lt},
                        {"<", t_lt},
                        {"le", t_le},
                        {"<=", t_le},
                        {"gt", t_gt},
                        {"greaterthan", t_gt},
                        {">", t_gt},
                        {"ge", t_ge},
                        {">=", t_ge},
                        {"in", t_in},
                        {"odd", t_odd},
                        {"even", t_even},
                        {"divisibleby", t_divisibleby},
                        {"lower", t_lower},
                        {"upper", t_upper},
                        {"escaped", t_escaped},
                        {"filter", t_filter},
                        {"test", t_test},
                    });
}

}  // namespace kvasir::jinja
