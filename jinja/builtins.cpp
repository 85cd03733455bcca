// jinja/builtins.cpp — the filter and test tables; argument binding.
#include "jinja/builtins.h"

#include <algorithm>
#include <unordered_map>

#include "jinja/interpreter.h"

namespace kvasir::jinja {
namespace {

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const auto* t = [] {
    FilterTable v;
    text_filters(v);
    seq_filters(v);
    return new std::unordered_map<std::string_view, FilterFn>(v.begin(), v.end());
  }();
  return *t;
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const auto* t = [] {
    TestTable v;
    all_tests(v);
    return new std::unordered_map<std::string_view, TestFn>(v.begin(), v.end());
  }();
  return *t;
}

}  // namespace

bool has_filter(std::string_view name) {
  return find_filter(name) != nullptr;
}
bool has_test(std::string_view name) {
  return find_test(name) != nullptr;
}

FilterFn find_filter(std::string_view name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

TestFn find_test(std::string_view name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

ArgReader::ArgReader(Interpreter& in, const Args& args, std::string_view fn,
                     std::initializer_list<std::string_view> names)
    : in_(in), fn_(fn), names_(names), bound_(names.size(), nullptr) {
  if (args.pos.size() > names_.size())
    in.fail(fmt::format("{}() takes at most {} arguments ({} given)", fn, names_.size(),
                        args.pos.size()));
  for (size_t i = 0; i < args.pos.size(); ++i) bound_[i] = &args.pos[i];
  for (const auto& [k, v] : args.kw) {
    auto it = std::find(names_.begin(), names_.end(), k);
    if (it == names_.end())
      in.fail(fmt::format("{}() got an unexpected keyword argument '{}'", fn, k));
    const size_t i = size_t(it - names_.begin());
    if (bound_[i]) in.fail(fmt::format("{}() got multiple values for argument '{}'", fn, k));
    bound_[i] = &v;
  }
}

int64_t ArgReader::integer(size_t i, int64_t def) const {
  const Value* v = get(i);
  if (!v || v->is_none()) return def;
  if (!v->is_int() && !v->is_bool())
    in_.fail(fmt::format("{}(): '{}' must be an integer, not {}", fn_, names_[i], v->type_name()));
  return v->integer();
}

bool ArgReader::boolean(size_t i, bool def) const {
  const Value* v = get(i);
  return v ? v->truthy() : def;
}

std::string ArgReader::string(size_t i, std::string def) const {
  const Value* v = get(i);
  if (!v || v->is_none()) return def;
  if (!v->is_string())
    in_.fail(fmt::format("{}(): '{}' must be a string, not {}", fn_, names_[i], v->type_name()));
  return v->str().bytes();
}

}  // namespace kvasir::jinja
