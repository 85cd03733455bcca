// jinja/value.cpp — construction, access, truthiness of values.
#include "jinja/value.h"

#include <algorithm>
#include <cstdio>

#include "base/check.h"

namespace kvasir::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  v.p_ = std::make_shared<Str>(std::move(hint), false);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(Str s) : kind_(Kind::kString), p_(std::make_shared<Str>(std::move(s))) {
  b_ = false;
}

Value Value::html(Str s) {
  Value v(std::move(s));
  v.b_ = true;
  return v;
}

Value Value::list(std::vector<Value> items, bool tuple) {
  return seq(std::move(items), tuple ? Seq::kTuple : Seq::kList);
}

Value Value::seq(std::vector<Value> items, Seq kind) {
  Value v;
  v.kind_ = Kind::kList;
  auto l = std::make_shared<List>();
  for (const Value& x : items) {
    l->depth = std::max(l->depth, x.depth() + 1);
    l->holds_namespace = l->holds_namespace || x.holds_namespace();
  }
  KV_CHECK(l->depth <= kMaxNesting, "value nested deeper than {} levels", kMaxNesting);
  l->items = std::move(items);
  l->kind = kind;
  v.p_ = std::move(l);
  return v;
}

Value Value::dict(std::shared_ptr<Dict> d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.p_ = std::move(d);
  return v;
}

Value Value::ns(std::shared_ptr<Dict> attrs) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.p_ = std::move(attrs);
  return v;
}

Value Value::callable(std::string name, NativeFn fn, bool macro) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.p_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn), macro});
  return v;
}

int Value::depth() const {
  switch (kind_) {
    case Kind::kList:
      return static_cast<const List*>(p_.get())->depth;
    case Kind::kDict:
      return dict().depth();
    case Kind::kNamespace:
      return 1;
    default:
      return 0;
  }
}

bool Value::holds_namespace() const {
  switch (kind_) {
    case Kind::kList:
      return static_cast<const List*>(p_.get())->holds_namespace;
    case Kind::kDict:
      return dict().holds_namespace();
    case Kind::kNamespace:
      return true;
    default:
      return false;
  }
}

Value::Seq Value::seq_kind() const {
  return static_cast<const List*>(p_.get())->kind;
}

std::vector<Value> Value::consume() const {
  const List& l = *static_cast<const List*>(p_.get());
  if (!is_iterator()) return l.items;
  if (l.consumed) return {};
  l.consumed = true;
  return l.items;
}

const Str& Value::str() const {
  KV_CHECK(kind_ == Kind::kString, "internal: not a string");
  return *static_cast<const Str*>(p_.get());
}

const std::vector<Value>& Value::items() const {
  KV_CHECK(kind_ == Kind::kList, "internal: not a list");
  return static_cast<const List*>(p_.get())->items;
}

const Dict& Value::dict() const {
  KV_CHECK(kind_ == Kind::kDict || kind_ == Kind::kNamespace, "internal: not a dict");
  return *static_cast<const Dict*>(p_.get());
}

Dict& Value::ns_attrs() const {
  KV_CHECK(kind_ == Kind::kNamespace, "internal: not a namespace");
  return *static_cast<Dict*>(p_.get());
}

const Callable& Value::fn() const {
  KV_CHECK(kind_ == Kind::kCallable, "internal: not callable");
  return *static_cast<const Callable*>(p_.get());
}

const std::string& Value::undefined_hint() const {
  static const std::string kNone;
  if (kind_ != Kind::kUndefined || !p_) return kNone;
  return static_cast<const Str*>(p_.get())->bytes();
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return is_iterator() || !items().empty();
    case Kind::kDict:
      return !dict().empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      switch (seq_kind()) {
        case Seq::kList:
          return "list";
        case Seq::kTuple:
          return "tuple";
        case Seq::kGenerator:
          return "generator";
        case Seq::kReverseIter:
          return "list_reverseiterator";
        case Seq::kDictItems:
          return "dict_items";
        case Seq::kDictKeys:
          return "dict_keys";
        case Seq::kDictValues:
          return "dict_values";
      }
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return fn().macro ? "Macro" : "function";
  }
  return "?";
}

bool Value::same_as(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return b_ == o.b_;
    case Kind::kInt:
      return i_ == o.i_;
    case Kind::kFloat:
      return f_ == o.f_;
    case Kind::kString:
      return p_ == o.p_ || str().bytes() == o.str().bytes();
    default:
      return p_ == o.p_;
  }
}

namespace {

// Python's hash equality as a string: equal keys, equal strings.
bool hash_key(const Value& k, std::string& out, int depth = 0) {
  switch (k.kind()) {
    case Value::Kind::kString:
      out += 's', out += std::to_string(k.str().size()), out += ':', out += k.str().bytes();
      return true;
    case Value::Kind::kNone:
      out += 'N';
      return true;
    case Value::Kind::kUndefined:
      out += 'U';
      return true;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      out += 'i' + std::to_string(k.integer()) + ';';
      return true;
    case Value::Kind::kFloat: {
      const double f = k.real();
      if (f == double(int64_t(f)) && f >= -9.2e18 && f <= 9.2e18) {
        out += 'i' + std::to_string(int64_t(f)) + ';';
      } else {
        char buf[32];
        std::snprintf(buf, sizeof buf, "f%.17g;", f);
        out += buf;
      }
      return true;
    }
    case Value::Kind::kList:
      if (!k.is_tuple() || depth > 100) return false;
      out += '(';
      for (const Value& e : k.items())
        if (!hash_key(e, out, depth + 1)) return false;
      out += ')';
      return true;
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:  // hashable by identity
      out += 'p' + std::to_string(reinterpret_cast<uintptr_t>(k.identity())) + ';';
      return true;
    default:
      return false;
  }
}

std::string checked_hash_key(const Value& k) {
  std::string h;
  KV_CHECK(hash_key(k, h), "unhashable type: '{}'", k.type_name());
  return h;
}

}  // namespace

const Value* Dict::find(std::string_view key) const {
  std::string h = "s" + std::to_string(key.size()) + ":";
  h += key;
  auto it = index_.find(h);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  auto it = index_.find(checked_hash_key(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

bool Dict::hashable(const Value& key) {
  std::string h;
  return hash_key(key, h);
}

void Dict::set(const Str& key, Value v) {
  set(Value(key), std::move(v));
}

void Dict::account(const Value& v) {
  depth_ = std::max(depth_, v.depth() + 1);
  KV_CHECK(depth_ <= kMaxNesting, "value nested deeper than {} levels", kMaxNesting);
  holds_namespace_ = holds_namespace_ || v.holds_namespace();
}

void Dict::set(const Value& key, Value v) {
  account(v);
  auto [it, fresh] = index_.emplace(checked_hash_key(key), items_.size());
  if (fresh)
    items_.emplace_back(key, std::move(v));
  else
    items_[it->second].second = std::move(v);
}

}  // namespace kvasir::jinja
