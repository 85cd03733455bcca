// jinja/globals.cpp — range, dict, namespace (jinja2), and
// raise_exception, strftime_now (transformers).
#include <ctime>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

// jinja2's sandbox refuses longer ranges (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Value g_range(Interpreter& in, Args& a) {
  if (!a.kw.empty() || a.pos.empty() || a.pos.size() > 3)
    in.fail("range() takes 1 to 3 integer arguments");
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < a.pos.size(); ++i) {
    if (a.pos[i].is_undefined()) in.undefined_error(a.pos[i]);
    if (!a.pos[i].is_int() && !a.pos[i].is_bool())
      in.fail(fmt::format("'{}' object cannot be interpreted as an integer", a.pos[i].type_name()));
  }
  if (a.pos.size() == 1) {
    v[1] = a.pos[0].integer();
  } else {
    v[0] = a.pos[0].integer(), v[1] = a.pos[1].integer();
    if (a.pos.size() == 3) v[2] = a.pos[2].integer();
  }
  if (v[2] == 0) in.fail("range() arg 3 must not be zero");
  const __int128 span = __int128(v[1]) - v[0];
  __int128 n = v[2] > 0 ? (span + v[2] - 1) / v[2] : (span + v[2] + 1) / v[2];
  if (n < 0) n = 0;
  if (n > kMaxRange)
    in.fail(fmt::format("range too big: the sandbox allows at most {} items", kMaxRange));
  std::vector<Value> out;
  for (int64_t i = 0; i < int64_t(n); ++i) out.emplace_back(v[0] + i * v[2]);
  in.step(out.size());
  return Value::list(std::move(out));
}

std::shared_ptr<Dict> dict_of(Interpreter& in, Args& a, const char* fn) {
  auto d = std::make_shared<Dict>();
  if (a.pos.size() > 1) in.fail(fmt::format("{}() takes at most one positional argument", fn));
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().items()) d->set(k, v);
    } else if (src.is_list()) {
      for (const Value& pair : src.items()) {
        if (!pair.is_plain_list() || pair.items().size() != 2)
          in.fail(fmt::format("{}(): expected (key, value) pairs", fn));
        d->set(pair.items()[0], pair.items()[1]);
      }
    } else {
      in.fail(fmt::format("{}(): cannot convert {} to a dict", fn, src.type_name()));
    }
  }
  for (const auto& [k, v] : a.kw) d->set(Str::markup(k), v);
  return d;
}

Value g_dict(Interpreter& in, Args& a) {
  return Value::dict(dict_of(in, a, "dict"));
}
Value g_namespace(Interpreter& in, Args& a) {
  auto attrs = dict_of(in, a, "namespace");
  if (attrs->holds_namespace()) in.fail("a namespace attribute cannot hold a namespace");
  return Value::ns(std::move(attrs));
}

[[noreturn]] Value g_raise(Interpreter& in, Args& a) {
  ArgReader r(in, a, "raise_exception", {"message"});
  throw TemplateRaised(__FILE__, __LINE__, ErrorCode::kInvalidArgument,
                       r.has(0) ? py_str(*r.get(0)).bytes() : std::string());
}

// datetime.now().strftime(format), at the clock the rendering was given.
Value g_strftime_now(Interpreter& in, Args& a) {
  ArgReader r(in, a, "strftime_now", {"format"});
  const std::string f = r.string(0, "");
  if (f.empty()) return Value::string("");
  std::string buf(f.size() * 8 + 64, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &in.now());
  if (n == 0) in.fail("strftime_now(): the formatted date is too long");
  buf.resize(n);
  return Value::string(buf);
}

}  // namespace

void add_globals(Scope& s) {
  s.set("range", Value::callable("range", g_range));
  s.set("dict", Value::callable("dict", g_dict));
  s.set("namespace", Value::callable("namespace", g_namespace));
  s.set("raise_exception", Value::callable("raise_exception", g_raise));
  s.set("strftime_now", Value::callable("strftime_now", g_strftime_now));
}

}  // namespace kvasir::jinja
