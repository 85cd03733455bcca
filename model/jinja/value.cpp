// model/jinja/value.cpp — construction, access, truthiness of values.
#include "model/jinja/value.h"

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

Value::Value(Str s) : kind_(Kind::kString), p_(std::make_shared<Str>(std::move(s))) {}

Value Value::list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->tuple = tuple;
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

bool Value::is_tuple() const {
  return is_list() && static_cast<const List*>(p_.get())->tuple;
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
      return !items().empty();
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
      return is_tuple() ? "tuple" : "list";
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

const Value* Dict::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void Dict::set(const Str& key, Value v) {
  auto [it, fresh] = index_.emplace(key.bytes(), items_.size());
  if (fresh)
    items_.emplace_back(key, std::move(v));
  else
    items_[it->second].second = std::move(v);
}

}  // namespace kvasir::jinja
