// jinja/value_format.h — values as Python prints them: str() for
// `{{ x }}` and `|string`, repr() inside lists and dicts, float repr.
//
// jinja2 prints a value with Python's str(): None, True, 1.0, 1e+20,
// [1, 'a'], {'k': None}, (1,). We do the same byte for byte. A string keeps
// its data ranges; inside a container's repr, a quoted string that holds
// data is data as a whole, quotes included.
#pragma once

#include <string>

#include "jinja/str.h"
#include "jinja/value.h"

namespace kvasir::jinja {

// Python's str(value).
Str py_str(const Value& v);
// Python's repr(value), appended to out.
void py_repr(const Value& v, Str& out, int depth = 0);
// repr(float): shortest round-trip digits, '1.0', '1e+16', 'inf', 'nan'.
std::string float_repr(double f);
// repr(str) of UTF-8 text: quotes and escapes as Python chooses them.
std::string string_repr(const std::string& s);

}  // namespace kvasir::jinja
