// jinja/operators.cpp — Python's operator semantics on values.
#include "jinja/operators.h"

#include <cmath>
#include <limits>

#include "jinja/interpreter.h"
#include "jinja/text_ops.h"
#include "jinja/value_format.h"

namespace kvasir::jinja {
namespace {

int sign(double d) {
  return d < 0 ? -1 : d > 0 ? 1 : 0;
}

bool both_int(const Value& a, const Value& b) {
  return (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
}

[[noreturn]] void unsupported(Interpreter& in, std::string_view op, const Value& a,
                              const Value& b) {
  if (a.is_undefined()) in.undefined_error(a);
  if (b.is_undefined()) in.undefined_error(b);
  if (op == "+" && a.is_string())
    in.fail(fmt::format("can only concatenate str (not \"{}\") to str", b.type_name()));
  in.fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                      b.type_name()));
}

// x op y on int64, failing on overflow (Python's ints are unbounded; ours are not).
int64_t checked(Interpreter& in, char op, int64_t x, int64_t y) {
  int64_t r = 0;
  const bool overflow = op == '+'   ? __builtin_add_overflow(x, y, &r)
                        : op == '-' ? __builtin_sub_overflow(x, y, &r)
                                    : __builtin_mul_overflow(x, y, &r);
  if (overflow) in.fail("integer overflow");
  return r;
}

// Python's floor division and modulo on integers.
int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t pymod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value arithmetic(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (both_int(a, b)) {
    const int64_t x = a.integer(), y = b.integer();
    if (op == "+" || op == "-" || op == "*") return Value(checked(in, op[0], x, y));
    if (op == "/") {
      if (y == 0) in.fail("division by zero");
      return Value(double(x) / double(y));
    }
    if (op == "//" || op == "%") {
      if (y == 0) in.fail("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) in.fail("integer overflow");
      return Value(op == "//" ? floordiv(x, y) : pymod(x, y));
    }
    if (op == "**") {
      if (y < 0) return Value(std::pow(double(x), double(y)));
      int64_t acc = 1;
      for (int64_t i = 0; i < y; ++i) {
        acc = checked(in, '*', acc, x);
        if (acc == 0 || acc == 1) break;
        if (acc == -1) {
          acc = (y - i - 1) % 2 == 0 ? -1 : 1;
          break;
        }
      }
      return Value(acc);
    }
  }
  const double x = a.real(), y = b.real();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) in.fail(op == "/" ? "float division by zero" : "float modulo");
  if (op == "/") return Value(x / y);
  if (op == "//") return Value(std::floor(x / y));
  double m = std::fmod(x, y);
  if (m != 0 && (sign(m) != sign(y))) m += y;
  return Value(m);
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.is_tuple());
  if (seq.is_string()) {
    in.check_size(seq.str().size() * size_t(n));
    Str out;
    for (int64_t i = 0; i < n; ++i) out.append(seq.str());
    in.step(out.size() / 256);
    return seq.is_html() ? Value::html(std::move(out)) : Value(std::move(out));
  }
  in.check_items(seq.items().size() * size_t(n));
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  in.step(out.size());
  return Value::list(std::move(out), seq.is_tuple());
}

}  // namespace

bool equals(const Value& a, const Value& b, int depth) {
  KV_CHECK(depth < kMaxNesting, "value nested deeper than {} levels", kMaxNesting);
  if (a.is_number() && b.is_number()) {
    if (both_int(a, b)) return a.integer() == b.integer();
    return a.real() == b.real();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str().bytes() == b.str().bytes();
    case Value::Kind::kList: {
      if (a.seq_kind() != b.seq_kind() || a.items().size() != b.items().size()) return false;
      if (a.is_iterator()) return a.same_as(b);
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equals(a.items()[i], b.items()[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict().items()) {
        const Value* o = b.dict().find(k);
        if (!o || !equals(v, *o, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.same_as(b);
  }
}

int compare(const Value& a, const Value& b, int depth) {
  KV_CHECK(depth < kMaxNesting, "value nested deeper than {} levels", kMaxNesting);
  if (a.is_number() && b.is_number()) {
    if (both_int(a, b)) return a.integer() < b.integer() ? -1 : a.integer() > b.integer();
    return a.real() < b.real() ? -1 : a.real() > b.real();
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().bytes().compare(b.str().bytes());  // UTF-8 order is codepoint order
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_plain_list() && b.is_plain_list() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i], depth + 1)) return compare(x[i], y[i], depth + 1);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  KV_FAIL("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

bool contains(Interpreter& in, const Value& c, const Value& item) {
  switch (c.kind()) {
    case Value::Kind::kString:
      if (!item.is_string())
        in.fail(
            fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return c.str().bytes().find(item.str().bytes()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : c.consume())
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      return c.dict().find(item) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      in.fail(fmt::format("argument of type '{}' is not iterable", c.type_name()));
  }
}

bool compare_op(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(in, b, a);
  if (op == "notin") return !contains(in, b, a);
  if (a.is_undefined()) in.undefined_error(a);
  if (b.is_undefined()) in.undefined_error(b);
  const int c = compare(a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    Str s = py_str(a);
    const Str t = py_str(b);
    in.check_size(s.size() + t.size());
    s.append(t);
    in.step(s.size() / 256);
    return Value(std::move(s));
  }
  if (a.is_number() && b.is_number()) return arithmetic(in, op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      // Markup + str escapes the str (markupsafe), and so does str + Markup.
      const bool html = a.is_html() || b.is_html();
      Str s = html ? to_html(a).str() : a.str();
      const Str t = html ? to_html(b).str() : b.str();
      in.check_size(s.size() + t.size());
      s.append(t);
      in.step(s.size() / 256);
      return html ? Value::html(std::move(s)) : Value(std::move(s));
    }
    if (a.is_plain_list() && b.is_plain_list() && a.is_tuple() == b.is_tuple()) {
      in.check_items(a.items().size() + b.items().size());
      std::vector<Value> v = a.items();
      v.insert(v.end(), b.items().begin(), b.items().end());
      in.step(v.size());
      return Value::list(std::move(v), a.is_tuple());
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_plain_list()) && (b.is_int() || b.is_bool()))
      return repeat(in, a, b.integer());
    if ((b.is_string() || b.is_plain_list()) && (a.is_int() || a.is_bool()))
      return repeat(in, b, a.integer());
  }
  if (op == "%" && a.is_string()) return percent_format(in, a, b);
  unsupported(in, op, a, b);
}

Value negate(Interpreter& in, const Value& a, bool minus) {
  if (a.is_undefined()) in.undefined_error(a);
  if (!a.is_number())
    in.fail(fmt::format("bad operand type for unary {}: '{}'", minus ? '-' : '+', a.type_name()));
  if (!minus) return a.is_bool() ? Value(a.integer()) : a;
  if (a.is_float()) return Value(-a.real());
  if (a.integer() == std::numeric_limits<int64_t>::min()) in.fail("integer overflow");
  return Value(-a.integer());
}

std::vector<Value> iterate(Interpreter& in, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
      return v.consume();
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kString: {
      std::vector<Value> out;
      const Str& s = v.str();
      for (size_t i = 0; i < s.size(); i = utf8_next(s.bytes(), i))
        out.emplace_back(s.substr(i, utf8_next(s.bytes(), i)));
      return out;
    }
    case Value::Kind::kDict: {
      std::vector<Value> out;
      for (const auto& kv : v.dict().items()) out.push_back(kv.first);
      return out;
    }
    default:
      in.fail(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

std::vector<size_t> slice_indices(Interpreter& in, size_t n, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) in.fail("slice step cannot be zero");
  const int64_t len = int64_t(n);
  const int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? len : len - 1;
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += len;
    return x < lower ? lower : x > upper ? upper : x;
  };
  const int64_t b = adjust(start, st > 0 ? lower : upper);
  const int64_t e = adjust(stop, st > 0 ? upper : lower);
  std::vector<size_t> out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(size_t(i));
  return out;
}

}  // namespace kvasir::jinja
