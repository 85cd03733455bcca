// jinja/text_ops.h — Python's string operations on Str, keeping data
// ranges (str.h: bytes derived from data stay data).
//
// Case mapping is Unicode's full mapping (ICU), as Python's: 'ß'.upper() is
// 'SS'. Whitespace is Python's str.isspace().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "jinja/str.h"
#include "jinja/value.h"

namespace kvasir::jinja {

class Interpreter;

Str py_upper(const Str& s);
Str py_lower(const Str& s);
Str py_capitalize(const Str& s);  // str.capitalize()
Str py_title(const Str& s);       // str.title()
Str jinja_title(const Str& s);    // jinja2's |title filter
enum class Side { kBoth, kLeft, kRight };
// chars: the set to strip; none = whitespace.
Str py_strip(const Str& s, Side side, const std::optional<std::string>& chars = std::nullopt);
// sep: none = runs of whitespace. maxsplit < 0: no limit. Fails on an empty sep.
std::vector<Str> py_split(Interpreter& in, const Str& s, const std::optional<std::string>& sep,
                          int64_t maxsplit, bool from_right);
std::vector<Str> py_splitlines(const Str& s, bool keepends);
// count < 0: all. A replacement made where data matched is data.
Str py_replace(Interpreter& in, const Str& s, const Str& old, const Str& repl, int64_t count);
// Codepoint index of sub in s[start:], or -1.
int64_t py_find(const Str& s, const std::string& sub, bool from_right);
int64_t py_count(const Str& s, const std::string& sub);
// fmt % args ('%s', '%d', '%(name)s'...); a Markup fmt escapes string
// arguments and gives Markup.
Value percent_format(Interpreter& in, const Value& fmt, const Value& args);
// s.format(*args, **kwargs) ('{}', '{0}', '{name}', simple specs).
Str str_format(Interpreter& in, const Str& fmt, const Args& args);
// Python's format(value, spec) for the specs templates use: [[fill]align][width][.prec][type].
Str format_spec(Interpreter& in, const Value& v, const std::string& spec);
// s.center(width) / jinja2's |center.
Str py_center(const Str& s, int64_t width);
// markupsafe's escape(): & < > ' " as HTML entities.
Str html_escape(const Str& s);
// A string value as Markup: escaped unless it is Markup already.
Value to_html(const Value& s);

}  // namespace kvasir::jinja
