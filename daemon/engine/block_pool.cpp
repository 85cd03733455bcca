#include "daemon/engine/block_pool.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace kvasir {

namespace {
// splitmix64's finalizer: a cheap, well-mixed step. The hash only locates a
// candidate (equality decides a hit), so it needs spread, not strength.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t chain_hash(uint64_t parent, const int32_t* tokens, int32_t n) {
  uint64_t h = mix(parent ^ 0x6B76617A6972ull);
  for (int32_t i = 0; i < n; ++i) h = mix(h ^ uint32_t(tokens[i]));
  return h;
}

uint64_t salt_hash(std::string_view salt) {
  uint64_t h = mix(salt.size());
  for (unsigned char c : salt) h = mix(h ^ c);
  return h;
}

BlockPool::BlockPool(int32_t n_blocks, int32_t block_size)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      meta_(size_t(std::max(n_blocks, 0))),
      tokens_(size_t(std::max(n_blocks, 0)) * size_t(std::max(block_size, 0))) {
  KV_CHECK(n_blocks >= 0 && block_size > 0, "block pool: {} blocks of {}", n_blocks, block_size);
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

// ---- holding --------------------------------------------------------------------

int32_t BlockPool::take() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
    meta_[size_t(b)].ref = 1;
  } else if (lru_head_ >= 0) {
    b = lru_head_;  // the least recently released: a leaf before its parents
    lru_remove(b);
    meta_[size_t(b)].ref = 1;
    uncache(b);
  }
  return b;
}

void BlockPool::ref(int32_t b) {
  Meta& m = meta_[size_t(b)];
  KV_CHECK(m.cached || m.ref > 0, "block pool: a hit on block {}, which holds nothing", b);
  if (m.ref++ == 0) lru_remove(b);
}

void BlockPool::unref(int32_t b) {
  KV_CHECK(b >= 0 && b < n_blocks_ && meta_[size_t(b)].ref > 0,
           "block pool: releasing block {} twice or out of range", b);
  Meta& m = meta_[size_t(b)];
  if (--m.ref > 0) return;
  if (m.cached)
    lru_push(b);
  else
    free_.push_back(b);
}

// ---- the evictable list -----------------------------------------------------------

void BlockPool::lru_push(int32_t b) {
  Meta& m = meta_[size_t(b)];
  m.prev = lru_tail_;
  m.next = -1;
  if (lru_tail_ >= 0)
    meta_[size_t(lru_tail_)].next = b;
  else
    lru_head_ = b;
  lru_tail_ = b;
  n_evictable_++;
}

void BlockPool::lru_remove(int32_t b) {
  Meta& m = meta_[size_t(b)];
  (m.prev >= 0 ? meta_[size_t(m.prev)].next : lru_head_) = m.next;
  (m.next >= 0 ? meta_[size_t(m.next)].prev : lru_tail_) = m.prev;
  m.prev = m.next = -1;
  n_evictable_--;
}

// ---- the cache --------------------------------------------------------------------

bool BlockPool::valid(const Link& l) const {
  if (l.block < 0 || l.block >= n_blocks_) return false;
  const Meta& m = meta_[size_t(l.block)];
  return m.cached && m.gen == l.gen && m.hash == l.hash;
}

std::optional<BlockPool::Link> BlockPool::find(const Link* parent, std::string_view salt,
                                               const int32_t* tokens) const {
  if (parent && !valid(*parent)) return std::nullopt;
  const uint64_t h = chain_hash(parent ? parent->hash : salt_hash(salt), tokens, block_size_);
  auto it = index_.find(h);
  if (it == index_.end()) return std::nullopt;
  const int32_t b = it->second;
  const Meta& m = meta_[size_t(b)];
  // Equality decides, not the hash: the same parent link, the same ids,
  // and for a first block the same salt.
  if (std::memcmp(tokens_of(b), tokens, sizeof(int32_t) * size_t(block_size_)) != 0)
    return std::nullopt;
  if (parent) {
    if (m.parent != parent->block || m.parent_gen != parent->gen) return std::nullopt;
  } else {
    auto s = salts_.find(b);
    if (m.parent != -1 || (s == salts_.end() ? !salt.empty() : s->second != salt))
      return std::nullopt;
  }
  return Link{h, b, m.gen};
}

std::optional<BlockPool::Link> BlockPool::cache(int32_t b, const Link* parent,
                                                std::string_view salt, const int32_t* tokens,
                                                uint64_t writer) {
  Meta& m = meta_[size_t(b)];
  KV_CHECK(m.ref > 0 && !m.cached, "block pool: caching block {}, not held or cached already", b);
  if (parent && !valid(*parent)) return std::nullopt;
  if (auto same = find(parent, salt, tokens)) return same;
  const uint64_t h = chain_hash(parent ? parent->hash : salt_hash(salt), tokens, block_size_);
  if (index_.count(h)) return std::nullopt;  // a collision: leave the other one be
  if (!parent && !salt.empty()) salts_[b] = std::string(salt);
  return insert(b, h, parent ? parent->block : -1, parent ? parent->gen : 0, tokens, writer);
}

BlockPool::Link BlockPool::insert(int32_t b, uint64_t h, int32_t parent, uint32_t parent_gen,
                                  const int32_t* tokens, uint64_t writer) {
  Meta& m = meta_[size_t(b)];
  m.cached = true;
  m.gen++;
  m.hash = h;
  m.parent = parent;
  m.parent_gen = parent_gen;
  m.writer = writer;
  std::memcpy(tokens_.data() + int64_t(b) * block_size_, tokens,
              sizeof(int32_t) * size_t(block_size_));
  index_[h] = b;
  const Link l{h, b, m.gen};
  if (writer != 0) pending_.push_back(l);
  return l;
}

std::optional<BlockPool::Link> BlockPool::find_keyed(const Link& key, const int32_t* tokens) const {
  auto it = index_.find(key.hash);
  if (it == index_.end()) return std::nullopt;
  const int32_t b = it->second;
  const Meta& m = meta_[size_t(b)];
  if (m.parent != key.block || m.parent_gen != key.gen ||
      std::memcmp(tokens_of(b), tokens, sizeof(int32_t) * size_t(block_size_)) != 0)
    return std::nullopt;
  return Link{key.hash, b, m.gen};
}

std::optional<BlockPool::Link> BlockPool::cache_keyed(int32_t b, const Link& key,
                                                      const int32_t* tokens, uint64_t writer) {
  Meta& m = meta_[size_t(b)];
  KV_CHECK(m.ref > 0 && !m.cached, "block pool: caching block {}, not held or cached already", b);
  auto it = index_.find(key.hash);
  if (it != index_.end()) {
    if (auto same = find_keyed(key, tokens)) return same;  // another sequence's copy
    uncache(it->second);  // keyed by a link that no longer holds: stale
  }
  return insert(b, key.hash, key.block, key.gen, tokens, writer);
}

void BlockPool::uncache(int32_t b) {
  Meta& m = meta_[size_t(b)];
  if (!m.cached) return;
  index_.erase(m.hash);
  salts_.erase(b);
  m.cached = false;
  m.writer = 0;
  if (m.ref == 0) {  // evictable → free
    lru_remove(b);
    free_.push_back(b);
  }
}

void BlockPool::confirm(uint64_t batch) {
  while (!pending_.empty()) {
    const Link& l = pending_.front();
    if (valid(l)) {
      Meta& m = meta_[size_t(l.block)];
      if (m.writer > batch) break;
      m.writer = 0;
    }
    pending_.pop_front();
  }
}

bool BlockPool::pending(int32_t b, uint64_t from) const {
  const Meta& m = meta_[size_t(b)];
  return m.cached && m.writer != 0 && m.writer >= from;
}

int32_t BlockPool::drop_pending(uint64_t from) {
  int32_t n = 0;
  std::deque<Link> keep;
  for (const Link& l : pending_) {
    if (!valid(l)) continue;
    if (meta_[size_t(l.block)].writer >= from) {
      uncache(l.block);
      n++;
    } else {
      keep.push_back(l);
    }
  }
  pending_.swap(keep);
  return n;
}

int32_t BlockPool::drop_all() {
  const int32_t n = cached();
  for (int32_t b = 0; b < n_blocks_; ++b) uncache(b);
  pending_.clear();
  return n;
}

}  // namespace kvasir
