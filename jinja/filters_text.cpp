// jinja/filters_text.cpp — filters that produce strings: trim, upper,
// replace, indent, tojson...; each converts its input with str() first, as
// jinja2's do.
#include <unicode/uchar.h>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/json.h"
#include "jinja/text_ops.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

// jinja2's soft_str(): a Markup input gives a Markup result.
Value like(const Value& input, Str s) {
  return input.is_html() ? Value::html(std::move(s)) : Value(std::move(s));
}

Value f_trim(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "trim", {"chars"});
  std::optional<std::string> chars;
  if (r.has(0) && !r.get(0)->is_none()) chars = r.string(0, "");
  return like(v, py_strip(py_str(v), Side::kBoth, chars));
}

Value f_upper(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "upper", {});
  return like(v, py_upper(py_str(v)));
}

Value f_lower(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "lower", {});
  return like(v, py_lower(py_str(v)));
}

Value f_title(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "title", {});
  return Value(jinja_title(py_str(v)));
}

Value f_capitalize(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "capitalize", {});
  return like(v, py_capitalize(py_str(v)));
}

Value f_replace(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "replace", {"old", "new", "count"});
  if (!r.has(0) || !r.has(1)) in.fail("replace() needs 'old' and 'new'");
  return Value(py_replace(in, py_str(v), py_str(*r.get(0)), py_str(*r.get(1)), r.integer(2, -1)));
}

Value f_string(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "string", {});
  return v.is_string() ? v : Value(py_str(v));
}

// Markup(value): a string that escapes what is added to it.
Value f_safe(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "safe", {});
  return Value::html(py_str(v));
}

Value f_escape(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "escape", {});
  return to_html(v);
}

Value f_center(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "center", {"width"});
  const int64_t w = r.integer(0, 80);
  in.check_size(size_t(std::max<int64_t>(w, 0)));
  return like(v, py_center(py_str(v), w));
}

// jinja2's do_indent, splitlines() quirks included.
Value f_indent(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "indent", {"width", "first", "blank"});
  std::string ind;
  if (r.has(0) && r.get(0)->is_string()) {
    ind = r.get(0)->str().bytes();
  } else {
    const int64_t w = r.integer(0, 4);
    in.check_size(size_t(std::max<int64_t>(w, 0)));
    ind.assign(size_t(std::max<int64_t>(w, 0)), ' ');
  }
  const bool first = r.boolean(1, false), blank = r.boolean(2, false);
  Str s = py_str(v);
  s.append("\n", false);
  std::vector<Str> lines = py_splitlines(s, false);
  Str out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out.append("\n", false);
      if (blank || !lines[i].empty()) out.append(ind, false);
    }
    out.append(lines[i]);
    in.check_size(out.size());
  }
  if (first) {
    Str pre(ind, false);
    pre.append(out);
    out = std::move(pre);
  }
  return like(v, std::move(out));
}

Value f_wordcount(Interpreter& in, const Value& v, Args& a) {
  ArgReader(in, a, "wordcount", {});
  const Str s = py_str(v);
  const std::string& b = s.bytes();
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < b.size(); i = utf8_next(b, i)) {
    const UChar32 c = UChar32(utf8_at(b, i));
    const bool w = c == '_' || u_isalnum(c) || u_charType(c) == U_NON_SPACING_MARK ||
                   u_charType(c) == U_COMBINING_SPACING_MARK;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

// "%s, %s"|format(a, b): Python's % formatting.
Value f_format(Interpreter& in, const Value& v, Args& a) {
  if (!a.pos.empty() && !a.kw.empty())
    in.fail("format() takes positional or keyword arguments, not both");
  Value args;
  if (!a.kw.empty()) {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, x] : a.kw) d->set(Str::markup(k), x);
    args = Value::dict(std::move(d));
  } else {
    args = Value::list(a.pos, true);
  }
  return percent_format(in, v.is_html() ? v : Value(py_str(v)), args);
}

// transformers: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(in, a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = r.boolean(0, false);
  if (const Value* ind = r.get(1); ind && !ind->is_none()) {
    if (ind->is_string()) {
      o.indent = ind->str().bytes();
    } else {
      const int64_t n = r.integer(1, 0);
      if (n > 1000) in.fail("tojson(): indent too large");
      o.indent = std::string(size_t(std::max<int64_t>(n, 0)), ' ');
    }
  }
  if (const Value* sep = r.get(2); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->items().size() != 2 || !sep->items()[0].is_string() ||
        !sep->items()[1].is_string())
      in.fail("tojson(): separators must be a pair of strings");
    o.item_sep = sep->items()[0].str().bytes();
    o.key_sep = sep->items()[1].str().bytes();
  }
  o.sort_keys = r.boolean(3, false);
  Str out = to_json(v, o);
  in.check_size(out.size());
  in.step(out.size() / 256);
  return Value(std::move(out));
}

}  // namespace

void text_filters(FilterTable& t) {
  t.insert(t.end(), {
                        {"trim", f_trim},
                        {"upper", f_upper},
                        {"lower", f_lower},
                        {"title", f_title},
                        {"capitalize", f_capitalize},
                        {"replace", f_replace},
                        {"string", f_string},
                        {"safe", f_safe},
                        {"escape", f_escape},
                        {"e", f_escape},
                        {"center", f_center},
                        {"indent", f_indent},
                        {"wordcount", f_wordcount},
                        {"format", f_format},
                        {"tojson", f_tojson},
                    });
}

}  // namespace kvasir::jinja
