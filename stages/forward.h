// stages/forward.h — runs one contiguous slice of a model's layers on the CPU.
//
// A stage holds layers [first, last]. The head also embeds token ids; the
// tail also applies the final norm and the output head. A whole model in one
// process (kvasir-local) is the slice [0, n_layers-1] with head and tail.
//
// A batch is a list of rows, one per sequence: n_tokens new tokens starting
// at position pos0, whose keys and values live in the blocks of its block
// table (kernels/cpu/paged_kv.h). Rows are laid out back to back in every
// per-token buffer: token t of row r is at index sum(n_tokens of rows < r) + t.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/dtype.h"
#include "ipc/sampling.h"
#include "kernels/cpu/paged_kv.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_file.h"
#include "stages/slice.h"

namespace kvasir {

struct ForwardRow {
  int32_t pos0 = 0;
  int32_t n_tokens = 0;
  const int32_t* block_table = nullptr;
  int32_t n_table = 0;
  bool want_logits = false;  // tail: return logits of this row's last token
  // Tail, with want_logits: the logits of the row's last 1 + n_draft tokens
  // (speculative decoding verifies a draft at each, docs/speculative.md).
  int32_t n_draft = 0;
  // With a sliding group (KvSpec::n_blocks_swa > 0), required: the sliding
  // layers' table, n_table entries of their own pool, -1 (unmapped) before
  // the window of pos0.
  const int32_t* block_table_swa = nullptr;
};

struct ForwardBatch {
  const ForwardRow* rows = nullptr;
  int32_t n_rows = 0;
  const int32_t* tokens = nullptr;  // [n_tokens] — head only
  int64_t n_tokens = 0;             // sum of rows' n_tokens
  bool all_logits = false;          // tail: logits of every token, not only sampled rows' last
  // The ring's slot and batch id: GPU stages key their device boundaries and
  // credits by them (ipc/cuda_boundary.h); the CPU executor ignores them.
  uint32_t slot = 0;
  uint64_t batch_id = 0;
  // Tail, optional: each row's sampling controls (with the sampled position
  // pos0 + n_tokens). A backend that samples on its device (a GPU stage)
  // writes the chosen id and its raw logprob for the rows it sampled and
  // leaves -1 in sampled_token where the host samples from `logits`; the
  // CPU executor samples nothing (the agent's sampler does).
  const SamplingParams* sampling = nullptr;  // [n_rows]
  int32_t* sampled_token = nullptr;          // [n_rows] -1 on entry
  float* sampled_logprob = nullptr;          // [n_rows]
  // Block copies (ipc/batch.h BlockCopy: copy-on-write of a parallel-sampling
  // request's shared block), applied to every layer of the slice before the
  // forward: K and V of block copy_src[i] → block copy_dst[i].
  const int32_t* copy_src = nullptr;  // [n_copies]
  const int32_t* copy_dst = nullptr;  // [n_copies]
  int32_t n_copies = 0;
  // Tail, optional: structured outputs' token masks, [n_rows] pointers to
  // mask_words words each (bit id%32 of word id/32: id may come next), null
  // where a row is unconstrained. A device sampler applies them to its rows
  // (every other logit -inf before it samples); the CPU executor ignores
  // them (the agent's sampler applies them on the host).
  const uint32_t* const* token_masks = nullptr;
  int32_t mask_words = 0;
};

// The members of an expert group as its leader's executor sees them
// (docs/expert-groups.md): each holds a consecutive range of every MoE
// layer's experts above the leader's, in ascending order. post() hands
// member m one layer's normalised rows and router choices; wait() returns
// its rows of that request, y [n * top_k, hidden] at token * top_k + j
// (kernels/cpu/moe.h moe_expert_rows), or throws kvasir::Error if it cannot
// be had (the member failed on it, shutdown). stages/expert_group.h
// implements it over the segment.
class ExpertPeers {
 public:
  virtual ~ExpertPeers() = default;
  virtual int count() const = 0;
  virtual int32_t first(int m) const = 0;  // member m's experts [first, first + held)
  virtual int32_t held(int m) const = 0;
  virtual void post(int m, int layer, const float* x, int64_t n, const int32_t* ids) = 0;
  virtual const float* wait(int m) = 0;
};

class SliceExecutor {
 public:
  // Maps (looks up) only the tensors of its slice. max_tokens bounds a
  // batch's total token count (the plan's max_tokens); buffers are allocated
  // once here.
  SliceExecutor(const ModelFile& model, const SliceSpec& slice, const KvSpec& kv, int threads,
                int64_t max_tokens);
  ~SliceExecutor();

  // The per-call width rule of the executor's thread pool
  // (kernels/cpu/thread_pool.h); w.ctx must outlive the executor.
  void set_pool_width(cpu::PoolWidth w) { pool_->set_width(w); }

  // An expert group's leader: its members, whose ranges must follow the
  // slice's own experts up to the model's last (checked here). Not owned;
  // must outlive the executor's forwards.
  void set_peers(ExpertPeers* peers);

  // hidden_in:  [n_tokens, hidden] f32 — ignored by the head (it embeds tokens).
  // hidden_out: [n_tokens, hidden] f32 — written by every stage but the tail.
  // logits:     [sum over rows with want_logits of 1 + n_draft, vocab] f32 — written by the
  //             tail only, in row order (a row's positions in order);
  //             with all_logits, [n_tokens, vocab] (teacher forcing, prompt logprobs).
  // Throws kvasir::Error on a malformed batch (token id out of range, too
  // many tokens, a position outside the row's block table, a bad block id).
  void forward(const ForwardBatch& batch, const float* hidden_in, float* hidden_out, float* logits);

  // The last forward's expert load: per expert, the (token, choice) pairs
  // the router sent it, summed over the slice's layers ([n_experts]; empty
  // for a dense model). Real tokens only: a batch carries no padding.
  std::span<const uint64_t> routed() const;

  const ModelConfig& config() const { return cfg_; }
  const SliceSpec& slice() const { return slice_; }

 private:
  struct Moe;
  struct Layer;
  struct Scratch;
  // The constructor's steps.
  void check_args(int threads) const;
  void map_ends(const ModelFile& model);
  void map_layer(const ModelFile& model, int layer, Layer& L);
  void map_ffn(const ModelFile& model, const LayerTensorNames& names, int layer, Layer& L);
  void alloc_scratch();
  void check_rows(const ForwardBatch& b, std::vector<cpu::AttnRow>& rows,
                  std::vector<cpu::AttnRow>& rows_swa);
  void keep_rows16(const ModelFile& model);
  void keep_packed();
  void run_layer(const Layer& L, const ForwardBatch& b, const std::vector<cpu::AttnRow>& rows,
                 const int32_t* pos, float* x);
  void copy_blocks(const ForwardBatch& b);
  void project_logits(const ForwardBatch& b, float* x, float* logits);
  void run_moe(const Moe& m, int64_t T, float* out);

  ModelConfig cfg_;
  SliceSpec slice_;
  KvSpec kv_;
  int64_t max_tokens_;
  std::unique_ptr<cpu::ThreadPool> pool_;
  const TensorView* embed_ = nullptr;
  const TensorView* out_norm_ = nullptr;
  const TensorView* output_ = nullptr;
  std::vector<Layer> layers_;
  std::unique_ptr<Scratch> s_;
  RopeTable rope_;        // stages/slice.h
  RopeTable rope_local_;  // sliding-window layers' (ModelConfig::rope_theta_local)
  ExpertPeers* peers_ = nullptr;
  std::vector<const TensorView*> packed_;  // kept in the AMX layout until the destructor
  std::vector<const TensorView*> rows16_;  // kept repacked 16 rows a block, likewise
};

}  // namespace kvasir
