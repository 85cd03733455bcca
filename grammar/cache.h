// grammar/cache.h — a bounded, thread-safe LRU map from a string key to a
// value: the compile cache of GrammarCompiler (private to grammar/; the tests
// use it directly).
#pragma once

#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "grammar/grammar.h"

namespace kvasir::grammar {

template <typename V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  // Returns {the value for key, true} and makes the entry the most recent
  // (a hit); or {make(), false} after inserting it as the most recent and
  // evicting the least recent entries beyond capacity (a miss). make() runs
  // under the cache's lock: it must be cheap and must not use the cache.
  // With capacity 0 nothing is kept: every call is a miss.
  template <typename Make>
  std::pair<V, bool> find_or_insert(const std::string& key, Make&& make) {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      ++stats_.hits;
      order_.splice(order_.begin(), order_, it->second);
      return {it->second->second, true};
    }
    ++stats_.misses;
    V value = make();
    if (capacity_ == 0) return {std::move(value), false};
    order_.emplace_front(key, value);
    index_.emplace(order_.front().first, order_.begin());
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++stats_.evictions;
    }
    return {std::move(value), false};
  }

  // Drops every entry (values still held elsewhere live on).
  void clear() {
    std::lock_guard lock(mu_);
    index_.clear();
    order_.clear();
  }

  CacheStats stats() const {
    std::lock_guard lock(mu_);
    CacheStats s = stats_;
    s.entries = order_.size();
    return s;
  }

 private:
  mutable std::mutex mu_;
  const size_t capacity_;
  // Most recent first; the index's keys view the list's strings (list nodes
  // never move).
  std::list<std::pair<std::string, V>> order_;
  std::unordered_map<std::string_view, typename std::list<std::pair<std::string, V>>::iterator>
      index_;
  CacheStats stats_;
};

}  // namespace kvasir::grammar
