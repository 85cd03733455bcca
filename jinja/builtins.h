// jinja/builtins.h — the filters, tests, methods and globals a chat
// template can use.
//
// Filters (filters_text.cpp, filters_seq.cpp) are jinja2's, except tojson,
// which is transformers' (json.h). Tests (tests.cpp) are jinja2's. Methods
// (methods.cpp) are the str, dict and list methods the sandbox allows.
// Globals (globals.cpp): range, dict, namespace, and transformers'
// raise_exception and strftime_now. docs/chat-templates.md lists them all.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kvasir::jinja {

class Interpreter;
class Scope;

using FilterFn = Value (*)(Interpreter& in, const Value& input, Args& args);
using TestFn = bool (*)(Interpreter& in, const Value& v, Args& args);

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
FilterFn find_filter(std::string_view name);  // nullptr if none
TestFn find_test(std::string_view name);

// Methods of str, dict and list values: "x".strip(), d.items(), l.index(x).
bool has_method(const Value& self, std::string_view name);
Value call_method(Interpreter& in, const Value& self, std::string_view name, Args& args);

// Defines the globals in `scope`.
void add_globals(Scope& scope);

// Binds a builtin's arguments to its parameter names, positionally or by
// keyword, as Python does; fails on unknown, duplicate or excess ones.
class ArgReader {
 public:
  ArgReader(Interpreter& in, const Args& args, std::string_view fn,
            std::initializer_list<std::string_view> names);
  const Value* get(size_t i) const { return i < bound_.size() ? bound_[i] : nullptr; }
  bool has(size_t i) const { return get(i) != nullptr; }
  Value get_or(size_t i, Value def) const { return has(i) ? *get(i) : std::move(def); }
  // Typed access; fails naming the function and parameter on a wrong type.
  int64_t integer(size_t i, int64_t def) const;
  bool boolean(size_t i, bool def) const;
  std::string string(size_t i, std::string def) const;

 private:
  Interpreter& in_;
  std::string fn_;
  std::vector<std::string_view> names_;
  std::vector<const Value*> bound_;
};

// Registration tables, filled by each builtins file.
using FilterTable = std::vector<std::pair<std::string_view, FilterFn>>;
using TestTable = std::vector<std::pair<std::string_view, TestFn>>;
void text_filters(FilterTable& t);
void seq_filters(FilterTable& t);
void all_tests(TestTable& t);

}  // namespace kvasir::jinja
