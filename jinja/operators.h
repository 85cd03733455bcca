// jinja/operators.h — Python's semantics for the template operators:
// arithmetic (+ - * / // % **), ~, comparisons, `in`, equality, ordering,
// and iteration (what a for-loop or a filter walks over).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace kvasir::jinja {

class Interpreter;

// Python ==. Undefined equals only Undefined (jinja2's Undefined.__eq__).
bool equals(const Value& a, const Value& b, int depth = 0);
// Python's ordering: <0, 0 or >0. Fails (kvasir::Error) for values Python
// cannot order ('<' not supported between instances of 'str' and 'int').
int compare(const Value& a, const Value& b, int depth = 0);
// a op b for op in == != < <= > >= in notin.
bool compare_op(Interpreter& in, std::string_view op, const Value& a, const Value& b);
// item in container.
bool contains(Interpreter& in, const Value& container, const Value& item);
// a op b for op in + - * / // % ** ~.
Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b);
// -a, +a.
Value negate(Interpreter& in, const Value& a, bool minus);
// The items a for-loop sees: list items, a string's characters, a dict's
// keys; Undefined is empty. Fails for anything else.
std::vector<Value> iterate(Interpreter& in, const Value& v);

// The indices of seq[start:stop:step] for a sequence of length n (Python's
// slice rules; a missing bound is nullopt). Fails on a zero step.
std::vector<size_t> slice_indices(Interpreter& in, size_t n, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, std::optional<int64_t> step);
}  // namespace kvasir::jinja
