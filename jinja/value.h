// jinja/value.h — the values a template computes with: Python's
// None/bool/int/float/str/list/tuple/dict, jinja2's Undefined and
// namespace(), and callables (macros, builtins, bound methods).
//
// Values are cheap to copy: strings, lists and dicts are shared. Lists and
// dicts are immutable once built (transformers renders templates in jinja2's
// ImmutableSandboxedEnvironment, where no template can modify them); only a
// namespace's attributes can be assigned.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jinja/str.h"

namespace kvasir::jinja {

// Containers nested deeper than this are refused when built (and when
// printed, serialised or compared): walking, and destroying, a value is
// recursive.
inline constexpr int kMaxNesting = 200;

class Interpreter;
class Value;
struct List;
class Dict;
struct Args;

using NativeFn = std::function<Value(Interpreter&, Args&)>;

struct Callable {
  std::string name;
  NativeFn fn;
  bool macro = false;  // printed as <Macro 'name'>
};

class Value {
 public:
  // What a kList value is in Python: a list or tuple, or one of the lazy
  // sequences filters and methods return (printed, measured and indexed
  // differently, as in Python).
  enum class Seq : uint8_t {
    kList,
    kTuple,
    kGenerator,    // map/select/reject/selectattr/rejectattr/unique/items filters
    kReverseIter,  // |reverse of a list
    kDictItems,    // d.items()
    kDictKeys,     // d.keys()
    kDictValues,   // d.values()
  };
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // list or tuple
    kDict,
    kNamespace,
    kCallable,
  };

  Value() = default;  // undefined, without a hint
  static Value undefined(std::string hint);
  static Value none();
  Value(bool b) : kind_(Kind::kBool), b_(b) {}  // NOLINT: implicit on purpose
  Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
  Value(int i) : kind_(Kind::kInt), i_(i) {}
  Value(double f) : kind_(Kind::kFloat), f_(f) {}
  Value(Str s);
  static Value string(std::string s, bool data = false) { return Value(Str(std::move(s), data)); }
  // markupsafe's Markup (|safe, |escape): a string that HTML-escapes what
  // is added to it.
  static Value html(Str s);
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value seq(std::vector<Value> items, Seq kind);
  static Value dict(std::shared_ptr<Dict> d);
  static Value ns(std::shared_ptr<Dict> attrs);
  static Value callable(std::string name, NativeFn fn, bool macro = false);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers.Number: bool counts, as in Python.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_html() const { return kind_ == Kind::kString && b_; }
  // Any sequence kind; is_plain_list: a list or tuple (indexable, sized).
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return is_list() && seq_kind() == Seq::kTuple; }
  bool is_plain_list() const { return is_list() && seq_kind() <= Seq::kTuple; }
  // A generator or iterator: no len(), no index, always true, used once.
  bool is_iterator() const {
    return is_list() && (seq_kind() == Seq::kGenerator || seq_kind() == Seq::kReverseIter);
  }
  Seq seq_kind() const;
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool boolean() const { return b_; }
  // int or bool as an integer; float as a double (number kinds only).
  int64_t integer() const { return kind_ == Kind::kBool ? int64_t(b_) : i_; }
  double real() const { return kind_ == Kind::kFloat ? f_ : double(integer()); }
  const Str& str() const;                   // kString
  const std::vector<Value>& items() const;  // kList
  // The items for one walk: an iterator's are gone after the first.
  std::vector<Value> consume() const;
  const Dict& dict() const;    // kDict or kNamespace
  Dict& ns_attrs() const;      // kNamespace
  const Callable& fn() const;  // kCallable
  const std::string& undefined_hint() const;

  // Python truthiness (Undefined is false).
  bool truthy() const;
  // Python's type name for messages: 'str', 'int', 'dict object'...
  std::string type_name() const;
  // Whether the two share the same object (for `sameas`), or are equal
  // scalars of the same kind.
  bool same_as(const Value& o) const;
  // The shared object (list, dict, callable...), for identity.
  const void* identity() const { return p_.get(); }
  // Levels of lists and dicts inside (0 for a scalar; a namespace counts 1:
  // it cannot hold another namespace).
  int depth() const;
  // Whether a namespace is inside (a namespace's attributes cannot hold one:
  // namespaces are the only mutable values, and that keeps values acyclic
  // and their depth bounded).
  bool holds_namespace() const;

 private:
  Kind kind_ = Kind::kUndefined;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<void> p_;  // Str, List, Dict or Callable by kind; Str hint if undefined
};

struct List {
  std::vector<Value> items;
  Value::Seq kind = Value::Seq::kList;
  int depth = 1;
  bool holds_namespace = false;
  mutable bool consumed = false;  // an iterator already walked
};

// Insertion-ordered mapping (Python dicts keep insertion order: tojson
// shows it). Keys are what Python can hash: strings, numbers (1, 1.0 and
// True are the same key), None, Undefined and tuples of those.
class Dict {
 public:
  const Value* find(std::string_view key) const;  // a string key
  // Fails (kvasir::Error) on an unhashable key, as Python does.
  const Value* find(const Value& key) const;
  static bool hashable(const Value& key);
  void set(const Str& key, Value v);
  void set(const Value& key, Value v);
  // Replaces the value of the i-th key (0 <= i < size()).
  void set_at(size_t i, Value v) {
    account(v);
    items_[i].second = std::move(v);
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  int depth() const { return depth_; }
  bool holds_namespace() const { return holds_namespace_; }

 private:
  void account(const Value& v);  // depth and namespaces of a new value
  std::vector<std::pair<Value, Value>> items_;
  int depth_ = 1;
  bool holds_namespace_ = false;
  std::unordered_map<std::string, size_t> index_;  // by hash_key()
};

// Arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

}  // namespace kvasir::jinja
