// daemon/engine/block_pool.h — the KV block ids, their reference counts and
// the prefix cache's index (docs/scheduler.md, "Prefix caching").
//
// The lower half of the shape vLLM v1 gives its KV cache manager (the
// BlockPool under the KVCacheManager): this class knows blocks, not
// sequences; BlockManager (block_manager.h) is the face the scheduler uses.
//
// Every block is in exactly one state:
//
//   free       no reader, no cached content: the free stack
//   held       ref > 0 (one or more sequences' tables name it); it may be
//              cached (a full block others can reuse) or not (a sequence's
//              partial last block, or a full one whose content is cached
//              elsewhere already)
//   evictable  ref == 0 but cached: its KV stays valid and a later prompt
//              with the same prefix reuses it. It is taken for new data only
//              when the free stack is empty, least recently released first.
//
// A cached block is a link of a hash chain: hash(parent's hash, its token
// ids), the root's parent hash being the request's cache salt's. The hash
// only *locates* a candidate; a hit is decided by equality: the candidate's
// token ids, its parent link (block id and generation, so a parent evicted
// and reused for other content breaks the link) and, at the root, the salt
// string must all match. A hash collision, accidental or crafted, can
// therefore never hand one prompt another's KV.
//
// A block cached by a batch still in the ring is *pending* until that
// batch's result is back: hits on it are allowed (stages run batches in
// order, so the writer's batch writes it before any later batch reads it),
// and if the writer's batch fails, every pending block of it and of later
// batches is uncached (drop_pending) and the scheduler recomputes whoever
// read one.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvasir {

// The hash of a chain link. `parent` is the parent link's hash, or
// salt_hash(salt) for a chain's first block.
uint64_t chain_hash(uint64_t parent, const int32_t* tokens, int32_t n);
uint64_t salt_hash(std::string_view salt);

class BlockPool {
 public:
  // A cached block as a chain link: valid while the block still holds that
  // content (its generation is bumped whenever it is cached anew).
  struct Link {
    uint64_t hash = 0;
    int32_t block = -1;
    uint32_t gen = 0;
  };

  BlockPool(int32_t n_blocks, int32_t block_size);

  int32_t total() const { return n_blocks_; }
  int32_t block_size() const { return block_size_; }
  // Blocks a new allocation can take: free plus evictable.
  int32_t available() const { return int32_t(free_.size()) + n_evictable_; }
  int32_t evictable() const { return n_evictable_; }
  int32_t cached() const { return int32_t(index_.size()); }
  int32_t refs(int32_t b) const { return meta_[size_t(b)].ref; }
  bool is_cached(int32_t b) const { return meta_[size_t(b)].cached; }

  // A block for new data, held once (ref 1): the free stack first (the
  // most recently freed), then the least recently released evictable block,
  // uncached. -1 when none is left.
  int32_t take();
  // One more holder of a cached block (a prefix hit); an evictable block
  // leaves the evictable list.
  void ref(int32_t b);
  // One holder fewer. At zero a cached block becomes evictable (as the most
  // recently used), any other block free.
  void unref(int32_t b);

  // The cached child of `parent` (nullptr: a chain's first block, under
  // `salt`) holding exactly these block_size token ids, or nothing.
  std::optional<Link> find(const Link* parent, std::string_view salt, const int32_t* tokens) const;
  // Caches held block b as the child of `parent` with these token ids,
  // written by batch `writer` (pending until confirm). When an equal link
  // is cached already (another sequence computed the same block), b stays
  // uncached and that link is returned: the chain goes on through it. An
  // invalid parent or a hash already taken by other content: nothing.
  std::optional<Link> cache(int32_t b, const Link* parent, std::string_view salt,
                            const int32_t* tokens, uint64_t writer);
  bool valid(const Link& l) const;

  // Keyed caching, for a group whose blocks are not a chain of their own
  // (the sliding-window group: the blocks before its window are gone, so
  // no link to them can hold). Block b is cached under `key`, a valid link
  // of another pool (the full group's for the same positions), which
  // already decides by equality which prefix it holds; b's own token ids
  // must match too. An entry under an older key with the same hash is
  // stale (the key's pool holds one block per hash) and is replaced.
  std::optional<Link> find_keyed(const Link& key, const int32_t* tokens) const;
  std::optional<Link> cache_keyed(int32_t b, const Link& key, const int32_t* tokens,
                                  uint64_t writer);
  // The batch still writing cached block b (0: written, or not cached).
  uint64_t writer(int32_t b) const { return meta_[size_t(b)].cached ? meta_[size_t(b)].writer : 0; }

  // Batch `batch` came back: the blocks it wrote are no longer pending.
  // Batches come back in order, so every writer <= batch is done.
  void confirm(uint64_t batch);
  // Whether b is cached and pending on a batch >= from.
  bool pending(int32_t b, uint64_t from) const;
  // Uncaches every block pending on a batch >= from (a failed batch, and
  // the later ones that may have read it). Returns how many.
  int32_t drop_pending(uint64_t from);
  // Uncaches everything (a new epoch: a restarted stage's KV is empty).
  // Returns how many were cached.
  int32_t drop_all();

 private:
  struct Meta {
    int32_t ref = 0;
    bool cached = false;
    uint32_t gen = 0;
    uint64_t hash = 0;
    int32_t parent = -1;  // parent link's block (-1: a chain's first block)
    uint32_t parent_gen = 0;
    uint64_t writer = 0;           // batch still writing it (0: written)
    int32_t prev = -1, next = -1;  // evictable list (only while evictable)
  };
  void uncache(int32_t b);
  Link insert(int32_t b, uint64_t h, int32_t parent, uint32_t parent_gen, const int32_t* tokens,
              uint64_t writer);
  void lru_push(int32_t b);
  void lru_remove(int32_t b);
  const int32_t* tokens_of(int32_t b) const { return tokens_.data() + int64_t(b) * block_size_; }

  int32_t n_blocks_, block_size_;
  std::vector<Meta> meta_;
  std::vector<int32_t> tokens_;  // [n_blocks, block_size]: a cached block's token ids
  std::unordered_map<int32_t, std::string> salts_;  // a cached first block's salt, if any
  std::vector<int32_t> free_;                       // a stack: recently freed blocks first
  int32_t lru_head_ = -1, lru_tail_ = -1;           // evictable, oldest first
  int32_t n_evictable_ = 0;
  std::unordered_map<uint64_t, int32_t> index_;  // hash → cached block
  std::deque<Link> pending_;                     // cached blocks by writer batch, oldest first
};

}  // namespace kvasir
