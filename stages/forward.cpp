#include "stages/forward.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/norm.h"

namespace kvasir {

namespace {

// A zero-filled allocation that is not touched up front: large callocs are
// served by mmap, so a KV pool costs memory only where blocks are written.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Buffer alloc_zeroed(uint64_t bytes) {
  void* p = std::calloc(bytes ? bytes : 1, 1);
  KV_CHECK(p != nullptr, "out of memory allocating {} bytes of KV cache (lower kv.memory)", bytes);
  return Buffer(static_cast<uint8_t*>(p));
}

const float* f32_data(const TensorView* t, const char* what, int64_t n) {
  if (!t) return nullptr;
  KV_CHECK(t->type == DType::F32, "{} must be F32 (got {})", what, dtype_name(t->type));
  KV_CHECK(t->ne[0] == n && t->rows() == 1, "{} must have {} elements (got {})", what, n, t->ne[0]);
  return static_cast<const float*>(t->data);
}

void add_bias(float* y, const float* bias, int64_t n_tokens, int64_t width) {
  if (!bias) return;
  for (int64_t t = 0; t < n_tokens; ++t) cpu::add_inplace(y + t * width, bias, width);
}

}  // namespace

// A mixture-of-experts FFN (ModelConfig::moe()): the router, the experts
// this executor holds (all of the layer's), Qwen2-MoE's shared expert.
struct SliceExecutor::Moe {
  int layer = 0;                       // the model's layer index (an expert group's request)
  const TensorView* router = nullptr;  // [hidden] -> [n_experts]
  const float* router_bias = nullptr;  // [n_experts] gpt-oss, else null
  cpu::MoeExperts experts;             // views of the model's stacks
  const TensorView* sh_gate_inp = nullptr;  // [hidden] -> [1], null without a shared expert
  const TensorView* sh_gate = nullptr;      // [hidden] -> [shared_expert_ffn]
  const TensorView* sh_up = nullptr;
  const TensorView* sh_down = nullptr;  // [shared_expert_ffn] -> [hidden]
};

struct SliceExecutor::Layer {
  const float* attn_norm = nullptr;  // [hidden]
  const float* ffn_norm = nullptr;   // [hidden]
  const TensorView* wq = nullptr;    // [hidden] -> [n_heads * head_dim]
  const TensorView* wk = nullptr;    // [hidden] -> [n_kv_heads * head_dim]
  const TensorView* wv = nullptr;
  const TensorView* wo = nullptr;  // [n_heads * head_dim] -> [hidden]
  const float* bq = nullptr;       // Qwen2 biases, else null
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* bo = nullptr;           // [hidden] gpt-oss's output bias, else null
  const float* sinks = nullptr;        // [n_heads] gpt-oss's attention sinks, else null
  const TensorView* w_gate = nullptr;  // [hidden] -> [ffn]
  const TensorView* w_up = nullptr;
  const TensorView* w_down = nullptr;  // [ffn] -> [hidden]
  const float* q_norm = nullptr;       // [head_dim] Qwen3's / Gemma's per-head norms, else null
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;  // [hidden] Gemma's norms of the blocks' outputs, else null
  const float* post_ffn_norm = nullptr;
  int32_t window = 0;                     // > 0: a sliding-window layer
  const RopeTable* rope = nullptr;        // this layer's rotation (local or global)
  Moe moe;                             // a MoE layer's FFN (w_gate/up/down null)
  Buffer k_cache, v_cache;             // [n_blocks][n_kv_heads][block_size][head_dim]
  cpu::KvLayerView kv;
};

struct SliceExecutor::Scratch {
  std::vector<float> x;      // [max_tokens, hidden]  residual stream
  std::vector<float> xn;     // [max_tokens, hidden]  normalised
  std::vector<float> q;      // [max_tokens, n_heads * head_dim]
  std::vector<float> k;      // [max_tokens, n_kv_heads * head_dim]
  std::vector<float> v;      // [max_tokens, n_kv_heads * head_dim]
  std::vector<float> att;    // [max_tokens, n_heads * head_dim]
  std::vector<float> gate;   // [max_tokens, ffn]
  std::vector<float> up;     // [max_tokens, ffn]
  std::vector<float> tmp;    // [max_tokens, hidden]
  std::vector<int32_t> pos;  // [max_tokens]
  std::vector<float> last;   // [max_rows, hidden]  tail: last tokens of sampled rows
  // MoE layers (empty otherwise); gate/up above serve the shared expert.
  std::vector<float> router;          // [max_tokens, n_experts]  router logits
  std::vector<int32_t> expert_ids;    // [max_tokens, n_experts_used]
  std::vector<float> expert_weights;  // [max_tokens, n_experts_used]
  std::vector<float> shared_gate;     // [max_tokens]  shared expert's gate logit
  std::vector<float> shared_out;      // [max_tokens, hidden]
  cpu::MoeScratch moe;
  std::vector<uint64_t> routed;  // [n_experts]  this batch's (token, choice) pairs per expert
};

SliceExecutor::SliceExecutor(const ModelFile& model, const SliceSpec& slice, const KvSpec& kv,
                             int threads, int64_t max_tokens)
    : cfg_(model.config()), slice_(slice), kv_(kv), max_tokens_(max_tokens) {
  check_args(threads);
  pool_ = std::make_unique<cpu::ThreadPool>(threads);
  map_ends(model);
  layers_.resize(size_t(slice.last_layer - slice.first_layer + 1));
  for (int il = slice.first_layer; il <= slice.last_layer; ++il)
    map_layer(model, il, layers_[size_t(il - slice.first_layer)]);
  rope_ = rope_table(model);
  rope_local_ = local_rope_table(model);
  for (int il = slice.first_layer; il <= slice.last_layer; ++il) {
    Layer& L = layers_[size_t(il - slice.first_layer)];
    L.window = cfg_.layer_slides(il) ? cfg_.sliding_window : 0;
    L.rope = L.window > 0 ? &rope_local_ : &rope_;
  }
  alloc_scratch();
  keep_rows16(model);
  keep_packed();
}

// Every Q8_0/Q4_0/Q4_1/Q5_0 matrix with rows16_supports is kept repacked 16
// rows a block (kernels/cpu/matmul.h keep_rows16): 2-4x faster products at
// every row count, and bits that do not depend on the row count, the SIMD
// level or the threads. The decision is the type, the shape and
// KVASIR_ROWS16, so every stage process of a ring (and a restarted one)
// decides alike. The originals' pages are dropped (the copy is their size;
// a tied embedding's lookup reads the copy too: dequantize_row).
void SliceExecutor::keep_rows16(const ModelFile& model) {
  auto keep = [&](const TensorView* w) {
    if (!w || std::find(rows16_.begin(), rows16_.end(), w) != rows16_.end()) return;
    if (!cpu::keep_rows16(*w)) return;
    rows16_.push_back(w);
    model.release_pages(*w);
  };
  for (const Layer& L : layers_) {
    for (const TensorView* w : {L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down}) keep(w);
    for (const TensorView* w : {L.moe.router, L.moe.sh_gate, L.moe.sh_up, L.moe.sh_down}) keep(w);
  }
  keep(output_);
}

// Where the AMX tiles run (kernels/cpu/matmul.h keep_packed) and the head
// is not kept repacked (keep_rows16 runs it instead, at every row count),
// the output head is packed once: without it the head's per-call packing costs about
// as much as its products (kernels/cpu/amx.cpp), and below 16 rows it would
// not use the tiles at all — so two micro-batches of 12 rows cost more than
// one of 24 (docs/kernels.md, "Weights kept packed"). Only the head: kept packed,
// the layers' matrices would run on the tiles from ~7 rows, and a layer's
// f32 order then depends on its batch's row count, which the slice-parity,
// prefix-cache and stage-restart tests require it not to (docs/kernels.md,
// "Weights kept packed"); the head's rounding reaches the logits alone.
void SliceExecutor::keep_packed() {
  constexpr uint64_t kPackBudget = uint64_t(512) << 20;
  const bool repacked = std::find(rows16_.begin(), rows16_.end(), output_) != rows16_.end();
  if (output_ && !repacked && cpu::keep_packed(*output_, kPackBudget)) packed_.push_back(output_);
}

void SliceExecutor::check_args(int threads) const {
  const ModelConfig& c = cfg_;
  KV_CHECK_CODE(!c.fp8_weights, ErrorCode::kModelFormat,
                "model {}: its weights are FP8 (config.json's quantization_config), which the CPU "
                "backend does not read; run it on GPU stages (cuda:N)",
                c.name);
  KV_CHECK(slice_.first_layer >= 0 && slice_.first_layer <= slice_.last_layer &&
               slice_.last_layer < c.n_layers,
           "slice layers {}-{} outside the model's 0-{}", slice_.first_layer, slice_.last_layer,
           c.n_layers - 1);
  KV_CHECK(max_tokens_ > 0 && max_tokens_ <= (1 << 20), "max_tokens must be in 1..2^20 (got {})",
           max_tokens_);
  KV_CHECK(kv_.block_size > 0 && kv_.n_blocks >= 0 && kv_.n_blocks_swa >= 0,
           "kv: block_size {} / n_blocks {} / n_blocks_swa {} invalid", kv_.block_size,
           kv_.n_blocks, kv_.n_blocks_swa);
  KV_CHECK(kv_.n_blocks_swa == 0 || c.sliding_window > 0,
           "kv: a sliding group's pool for model {}, which has no sliding window", c.name);
  KV_CHECK(threads >= 1 && threads <= 1024, "threads must be in 1..1024 (got {})", threads);
  kv_elem_bytes(kv_.type);  // F16 or F32
  KV_CHECK(
      slice_.experts_first < 0 || (c.moe() && slice_.experts_first == 0 &&
                                   slice_.experts_last >= 0 && slice_.experts_last < c.n_experts),
      "slice experts {}-{}: a group's leader holds experts from 0, of the model's {}",
      slice_.experts_first, slice_.experts_last, c.n_experts);
}

void SliceExecutor::set_peers(ExpertPeers* peers) {
  const int32_t own = slice_.experts_first < 0 ? cfg_.n_experts : slice_.experts_last + 1;
  int32_t next = own;
  for (int m = 0; peers && m < peers->count(); ++m) {
    KV_CHECK(peers->first(m) == next && peers->held(m) >= 1,
             "expert group: member {} holds {}+{}, expected to start at expert {}", m,
             peers->first(m), peers->held(m), next);
    next += peers->held(m);
  }
  KV_CHECK(next == cfg_.n_experts || (!peers && own == cfg_.n_experts),
           "expert group: the leader and its members hold experts 0-{} of {}", next - 1,
           cfg_.n_experts);
  peers_ = peers;
}

// The head's embeddings; the tail's final norm and output head.
void SliceExecutor::map_ends(const ModelFile& model) {
  if (slice_.head) embed_ = &model.get(kTokenEmbdTensor);
  if (slice_.tail) {
    out_norm_ = &model.get(kOutputNormTensor);
    f32_data(out_norm_, kOutputNormTensor, cfg_.hidden);
    output_ = &model.get(output_tensor_name(cfg_));
  }
}

// One layer's tensors (mapped, not copied) and its KV pool.
void SliceExecutor::map_layer(const ModelFile& model, int il, Layer& L) {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden, QD = int64_t(c.n_heads) * c.head_dim,
                KD = int64_t(c.n_kv_heads) * c.head_dim;
  const LayerTensorNames n = layer_tensor_names(il);
  L.attn_norm = f32_data(&model.get(n.attn_norm), "attn_norm.weight", H);
  // gpt-oss's pre-FFN norm is stored as post_attention_norm (its
  // checkpoint's name for it); it normalises the FFN's input all the same.
  L.ffn_norm = c.gpt_oss ? f32_data(&model.get(n.post_attn_norm), "post_attention_norm.weight", H)
                         : f32_data(&model.get(n.ffn_norm), "ffn_norm.weight", H);
  L.wq = &model.get(n.attn_q);
  L.wk = &model.get(n.attn_k);
  L.wv = &model.get(n.attn_v);
  L.wo = &model.get(n.attn_output);
  map_ffn(model, n, il, L);
  if (c.qk_norm) {
    L.q_norm = f32_data(&model.get(n.attn_q_norm), "attn_q_norm.weight", c.head_dim);
    L.k_norm = f32_data(&model.get(n.attn_k_norm), "attn_k_norm.weight", c.head_dim);
  }
  if (c.post_norms) {
    L.post_attn_norm = f32_data(&model.get(n.post_attn_norm), "post_attention_norm.weight", H);
    L.post_ffn_norm = f32_data(&model.get(n.post_ffn_norm), "post_ffw_norm.weight", H);
  }
  if (c.gpt_oss) {
    L.bo = f32_data(&model.get(n.attn_output_bias), "attn_output.bias", H);
    L.sinks = f32_data(&model.get(n.attn_sinks), "attn_sinks.weight", c.n_heads);
  }
  if (c.qkv_bias) {
    L.bq = f32_data(&model.get(n.attn_q_bias), "attn_q.bias", QD);
    L.bk = f32_data(&model.get(n.attn_k_bias), "attn_k.bias", KD);
    L.bv = f32_data(&model.get(n.attn_v_bias), "attn_v.bias", KD);
  }
  // A sliding layer of a sliding group holds that group's pool: the memory saved.
  const int32_t n_blocks = kv_.n_blocks_swa > 0 && c.layer_slides(il) ? kv_.n_blocks_swa : kv_.n_blocks;
  const uint64_t per_layer = uint64_t(n_blocks) * uint64_t(c.n_kv_heads) *
                             uint64_t(kv_.block_size) * uint64_t(c.head_dim) *
                             kv_elem_bytes(kv_.type);
  L.k_cache = alloc_zeroed(per_layer);
  L.v_cache = alloc_zeroed(per_layer);
  L.kv = cpu::KvLayerView{L.k_cache.get(), L.v_cache.get(), kv_.type,  n_blocks,
                          kv_.block_size,  c.n_kv_heads,    c.head_dim};
}

// A layer's FFN: dense (ffn_gate/up/down) or a mixture of experts (the
// router, every expert of the three stacks, the shared expert if any).
void SliceExecutor::map_ffn(const ModelFile& model, const LayerTensorNames& n, int layer,
                            Layer& L) {
  const ModelConfig& c = cfg_;
  if (!c.moe()) {
    L.w_gate = &model.get(n.ffn_gate);
    L.w_up = &model.get(n.ffn_up);
    L.w_down = &model.get(n.ffn_down);
    return;
  }
  Moe& m = L.moe;
  m.layer = layer;
  m.router = &model.get(n.ffn_gate_inp);
  m.experts.n_total = c.n_experts;
  // An expert group's leader holds [0, experts_last] (checked in check_args).
  const size_t held = size_t(slice_.experts_first < 0 ? c.n_experts : slice_.experts_last + 1);
  m.experts.first = 0;
  m.experts.gate = std::span(model.get_experts(n.ffn_gate_exps)).subspan(0, held);
  m.experts.up = std::span(model.get_experts(n.ffn_up_exps)).subspan(0, held);
  m.experts.down = std::span(model.get_experts(n.ffn_down_exps)).subspan(0, held);
  map_expert_extras(model, n, m.experts);
  if (c.gpt_oss)
    m.router_bias = f32_data(&model.get(n.ffn_gate_inp_bias), "ffn_gate_inp.bias", c.n_experts);
  if (c.shared_expert_ffn > 0) {
    m.sh_gate_inp = &model.get(n.ffn_gate_inp_shexp);
    m.sh_gate = &model.get(n.ffn_gate_shexp);
    m.sh_up = &model.get(n.ffn_up_shexp);
    m.sh_down = &model.get(n.ffn_down_shexp);
  }
}

void SliceExecutor::alloc_scratch() {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden, QD = int64_t(c.n_heads) * c.head_dim,
                KD = int64_t(c.n_kv_heads) * c.head_dim;
  s_ = std::make_unique<Scratch>();
  const size_t T = size_t(max_tokens_);
  s_->x.resize(T * H);
  s_->xn.resize(T * H);
  s_->q.resize(T * QD);
  s_->k.resize(T * KD);
  s_->v.resize(T * KD);
  s_->att.resize(T * QD);
  // A MoE layer uses gate/up for its shared expert only.
  const size_t ffn = size_t(c.moe() ? c.shared_expert_ffn : c.ffn);
  s_->gate.resize(T * ffn);
  s_->up.resize(T * ffn);
  s_->tmp.resize(T * H);
  s_->pos.resize(T);
  if (c.moe()) {
    s_->router.resize(T * size_t(c.n_experts));
    s_->expert_ids.resize(T * size_t(c.n_experts_used));
    s_->expert_weights.resize(T * size_t(c.n_experts_used));
    s_->shared_gate.resize(c.shared_expert_ffn > 0 ? T : 0);
    s_->shared_out.resize(c.shared_expert_ffn > 0 ? T * H : 0);
    s_->routed.resize(size_t(c.n_experts));
  }
}

SliceExecutor::~SliceExecutor() {
  for (const TensorView* w : packed_) cpu::drop_packed(*w);
  for (const TensorView* w : rows16_) cpu::drop_rows16(*w);
}

std::span<const uint64_t> SliceExecutor::routed() const {
  return s_->routed;
}

void SliceExecutor::run_layer(const Layer& L, const ForwardBatch& b,
                              const std::vector<cpu::AttnRow>& rows, const int32_t* pos, float* x) {
  const ModelConfig& c = cfg_;
  const int64_t T = b.n_tokens, H = c.hidden;
  const int64_t QD = int64_t(c.n_heads) * c.head_dim, KD = int64_t(c.n_kv_heads) * c.head_dim;
  Scratch& s = *s_;
  cpu::ThreadPool* pool = pool_.get();

  // Attention block: x += Wo · attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x))
  cpu::rmsnorm(x, L.attn_norm, c.rms_eps, T, H, s.xn.data());
  const cpu::MatmulOut qkv[] = {{L.wq, s.q.data()}, {L.wk, s.k.data()}, {L.wv, s.v.data()}};
  cpu::matmul_group(qkv, 3, s.xn.data(), T, pool);  // one join for the three
  add_bias(s.q.data(), L.bq, T, QD);
  add_bias(s.k.data(), L.bk, T, KD);
  add_bias(s.v.data(), L.bv, T, KD);
  if (L.q_norm) {  // Qwen3, Gemma 3: RMSNorm over each head, before RoPE
    cpu::rmsnorm(s.q.data(), L.q_norm, c.rms_eps, T * c.n_heads, c.head_dim, s.q.data());
    cpu::rmsnorm(s.k.data(), L.k_norm, c.rms_eps, T * c.n_kv_heads, c.head_dim, s.k.data());
  }
  const RopeTable& rope = *L.rope;
  cpu::rope(rope.config, rope.inv_freq.data(), pos, T, c.n_heads, s.q.data());
  cpu::rope(rope.config, rope.inv_freq.data(), pos, T, c.n_kv_heads, s.k.data());
  cpu::kv_append(L.kv, rows.data(), int(rows.size()), s.k.data(), s.v.data(), L.window);
  cpu::paged_attention(L.kv, rows.data(), int(rows.size()), s.q.data(), c.n_heads,
                       c.attention_scale(), s.att.data(), pool, L.window, L.sinks);
  cpu::matmul(*L.wo, s.att.data(), T, s.tmp.data(), pool);
  add_bias(s.tmp.data(), L.bo, T, H);
  if (L.post_attn_norm)  // Gemma: the block's output is normalised before the add
    cpu::rmsnorm(s.tmp.data(), L.post_attn_norm, c.rms_eps, T, H, s.tmp.data());
  cpu::add_inplace(x, s.tmp.data(), T * H);

  // Feed-forward block: x += Wdown · (silu(Wgate·n(x)) * Wup·n(x)) (GeGLU:
  // gelu_tanh for Gemma), or the mixture of experts.
  cpu::rmsnorm(x, L.ffn_norm, c.rms_eps, T, H, s.xn.data());
  if (c.moe()) {
    run_moe(L.moe, T, s.tmp.data());
  } else {
    const cpu::MatmulOut gate_up[] = {{L.w_gate, s.gate.data()}, {L.w_up, s.up.data()}};
    cpu::matmul_group(gate_up, 2, s.xn.data(), T, pool);
    if (c.gelu_ffn)
      cpu::geglu(s.gate.data(), s.up.data(), T * c.ffn, s.gate.data());
    else
      cpu::swiglu(s.gate.data(), s.up.data(), T * c.ffn, s.gate.data());
    cpu::matmul(*L.w_down, s.gate.data(), T, s.tmp.data(), pool);
  }
  if (L.post_ffn_norm) cpu::rmsnorm(s.tmp.data(), L.post_ffn_norm, c.rms_eps, T, H, s.tmp.data());
  cpu::add_inplace(x, s.tmp.data(), T * H);
}

// Copy-on-write: block src's K and V to block dst in every layer, before
// any row of the batch runs (a block is contiguous in both caches).
void SliceExecutor::copy_blocks(const ForwardBatch& b) {
  KV_CHECK(b.n_copies >= 0 && (b.n_copies == 0 || (b.copy_src && b.copy_dst)),
           "batch: bad block copies");
  // Copies come with prefix hits, which a sliding group never has: their
  // ids would name the full group's blocks in the sliding layers too.
  KV_CHECK(b.n_copies == 0 || kv_.n_blocks_swa == 0, "batch: block copies with a sliding group");
  for (int32_t i = 0; i < b.n_copies; ++i)
    KV_CHECK(b.copy_src[i] >= 0 && b.copy_src[i] < kv_.n_blocks && b.copy_dst[i] >= 0 &&
                 b.copy_dst[i] < kv_.n_blocks && b.copy_src[i] != b.copy_dst[i],
             "batch: block copy {} -> {} outside 0..{}", b.copy_src[i], b.copy_dst[i],
             kv_.n_blocks - 1);
  const size_t bytes = size_t(cfg_.n_kv_heads) * size_t(kv_.block_size) * size_t(cfg_.head_dim) *
                       kv_elem_bytes(kv_.type);
  for (const Layer& L : layers_)
    for (int32_t i = 0; i < b.n_copies; ++i)
      for (uint8_t* cache : {L.k_cache.get(), L.v_cache.get()})
        std::memcpy(cache + size_t(b.copy_dst[i]) * bytes, cache + size_t(b.copy_src[i]) * bytes,
                    bytes);
}

// out [T, hidden] = the experts' weighted sum for the normalised tokens s.xn
// (router, top-k, grouped expert FFNs: kernels/cpu/moe.h), plus
// sigmoid(gate · xn) × the shared expert where the model has one.
void SliceExecutor::run_moe(const Moe& m, int64_t T, float* out) {
  const ModelConfig& c = cfg_;
  Scratch& s = *s_;
  cpu::ThreadPool* pool = pool_.get();
  KV_CHECK(slice_.experts_first < 0 || peers_, "expert group: the leader has no members set");
  cpu::matmul(*m.router, s.xn.data(), T, s.router.data(), pool);  // [T, n_experts]
  add_bias(s.router.data(), m.router_bias, T, c.n_experts);
  cpu::moe_route(cpu::MoeRouteConfig{c.n_experts, c.n_experts_used, c.expert_norm_topk},
                 s.router.data(), T, s.expert_ids.data(), s.expert_weights.data());
  cpu::moe_count_routed(s.expert_ids.data(), T, c.n_experts_used, c.n_experts, s.routed.data());
  // An expert group: the members compute their experts' rows while the
  // leader computes its own; their terms then follow the leader's in expert
  // order (moe_combine), the unsharded moe_ffn's sequence of additions.
  const int members = peers_ ? peers_->count() : 0;
  for (int i = 0; i < members; ++i) peers_->post(i, m.layer, s.xn.data(), T, s.expert_ids.data());
  cpu::moe_ffn(m.experts, s.xn.data(), T, c.n_experts_used, s.expert_ids.data(),
               s.expert_weights.data(), out, s.moe, pool);
  for (int i = 0; i < members; ++i)
    cpu::moe_combine(c.n_experts, peers_->first(i), peers_->held(i), T, c.n_experts_used,
                     s.expert_ids.data(), s.expert_weights.data(), peers_->wait(i), c.hidden, out,
                     s.moe);
  if (!m.sh_gate_inp) return;
  cpu::matmul(*m.sh_gate, s.xn.data(), T, s.gate.data(), pool);
  cpu::matmul(*m.sh_up, s.xn.data(), T, s.up.data(), pool);
  cpu::swiglu(s.gate.data(), s.up.data(), T * c.shared_expert_ffn, s.gate.data());
  cpu::matmul(*m.sh_down, s.gate.data(), T, s.shared_out.data(), pool);
  cpu::matmul(*m.sh_gate_inp, s.xn.data(), T, s.shared_gate.data(), pool);  // [T, 1]
  cpu::add_sigmoid_gated(s.shared_out.data(), s.shared_gate.data(), T, c.hidden, out);
}

// Validates the rows and lays out positions: every bound is checked here,
// once, before any kernel runs. rows: each row's table; rows_swa (with a
// sliding group) its sliding table.
void SliceExecutor::check_rows(const ForwardBatch& b, std::vector<cpu::AttnRow>& rows,
                               std::vector<cpu::AttnRow>& rows_swa) {
  if (kv_.n_blocks_swa > 0) rows_swa.resize(size_t(b.n_rows));
  int64_t t = 0;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    const ForwardRow& row = b.rows[r];
    KV_CHECK(row.n_tokens >= 1 && row.pos0 >= 0, "batch row {}: pos0 {} / n_tokens {} invalid", r,
             row.pos0, row.n_tokens);
    KV_CHECK(row.n_table >= 0 && (row.n_table == 0 || row.block_table),
             "batch row {}: bad block table", r);
    const int64_t end = int64_t(row.pos0) + row.n_tokens;
    KV_CHECK(end <= int64_t(row.n_table) * kv_.block_size,
             "batch row {}: positions up to {} do not fit its {} blocks of {}", r, end - 1,
             row.n_table, kv_.block_size);
    for (int32_t i = 0; i < row.n_table; ++i)
      KV_CHECK(row.block_table[i] >= 0 && row.block_table[i] < kv_.n_blocks,
               "batch row {}: block id {} outside 0..{}", r, row.block_table[i], kv_.n_blocks - 1);
    KV_CHECK(t + row.n_tokens <= b.n_tokens, "batch: rows hold more tokens than n_tokens {}",
             b.n_tokens);
    for (int32_t i = 0; i < row.n_tokens; ++i) s_->pos[size_t(t + i)] = row.pos0 + i;
    rows[size_t(r)] = cpu::AttnRow{row.pos0, row.n_tokens, row.block_table, row.n_table};
    if (kv_.n_blocks_swa > 0) {
      KV_CHECK(row.block_table_swa != nullptr, "batch row {}: no sliding table", r);
      // Mapped from pos0's window on (the kernels check it per layer), each
      // id in the sliding pool; unmapped (-1) before.
      const int64_t first = std::max<int64_t>(0, row.pos0 - cfg_.sliding_window + 1) / kv_.block_size;
      for (int32_t i = 0; i < row.n_table; ++i)
        KV_CHECK(row.block_table_swa[i] < kv_.n_blocks_swa &&
                     (row.block_table_swa[i] >= 0 || (i < first && row.block_table_swa[i] == -1)),
                 "batch row {}: sliding block id {} at {} outside 0..{}", r, row.block_table_swa[i],
                 i, kv_.n_blocks_swa - 1);
      rows_swa[size_t(r)] = cpu::AttnRow{row.pos0, row.n_tokens, row.block_table_swa, row.n_table};
    }
    t += row.n_tokens;
  }
  KV_CHECK(t == b.n_tokens, "batch: rows hold {} tokens but n_tokens is {}", t, b.n_tokens);
}

void SliceExecutor::forward(const ForwardBatch& b, const float* hidden_in, float* hidden_out,
                            float* logits) {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden;
  std::fill(s_->routed.begin(), s_->routed.end(), uint64_t(0));
  KV_CHECK(b.n_rows >= 0 && (b.n_rows == 0 || b.rows != nullptr), "batch: bad row list");
  KV_CHECK(b.n_tokens >= 0 && b.n_tokens <= max_tokens_,
           "batch: {} tokens exceed the plan's max_tokens {}", b.n_tokens, max_tokens_);

  std::vector<cpu::AttnRow> rows(size_t(b.n_rows)), rows_swa;
  check_rows(b, rows, rows_swa);
  copy_blocks(b);
  if (b.n_tokens == 0) return;

  float* x = s_->x.data();  // [n_tokens, hidden]
  if (slice_.head) {
    KV_CHECK(b.tokens != nullptr, "batch: the head needs token ids");
    for (int64_t i = 0; i < b.n_tokens; ++i) {
      const int32_t id = b.tokens[i];
      KV_CHECK(id >= 0 && id < c.vocab, "token id {} outside the vocabulary 0..{}", id,
               c.vocab - 1);
      cpu::dequantize_row(*embed_, id, x + i * H);
      if (c.embed_scale != 1.f) cpu::scale_inplace(x + i * H, c.embed_scale, H);
    }
  } else {
    KV_CHECK(hidden_in != nullptr, "batch: a non-head stage needs its input boundary");
    std::memcpy(x, hidden_in, size_t(b.n_tokens * H) * sizeof(float));
  }

  for (const Layer& L : layers_)
    run_layer(L, b, L.window > 0 && kv_.n_blocks_swa > 0 ? rows_swa : rows, s_->pos.data(), x);

  if (!slice_.tail) {
    KV_CHECK(hidden_out != nullptr, "batch: a non-tail stage needs an output boundary");
    std::memcpy(hidden_out, x, size_t(b.n_tokens * H) * sizeof(float));
    return;
  }
  project_logits(b, x, logits);
}

// The tail's final norm and output head: every token's (all_logits), or
// the selected rows' (ForwardRow::want_logits, n_draft) into logits; then
// the final logit soft-capping where the model has it (Gemma).
void SliceExecutor::project_logits(const ForwardBatch& b, float* x, float* logits) {
  const ModelConfig& c = cfg_;
  const int64_t H = c.hidden;
  KV_CHECK(logits != nullptr || !b.all_logits, "batch: the tail needs a logits buffer");
  if (b.all_logits) {  // every token: normalise in place and project all of them
    cpu::rmsnorm(x, static_cast<const float*>(out_norm_->data), c.rms_eps, b.n_tokens, H, x);
    cpu::matmul(*output_, x, b.n_tokens, logits, pool_.get());  // [n_tokens, vocab]
    if (c.final_logit_softcap > 0.f)
      cpu::softcap_inplace(logits, c.final_logit_softcap, b.n_tokens * c.vocab);
    return;
  }
  // Tail: final norm and output head on the last token of each sampled row
  // (a drafting row's last 1 + n_draft: only those, never the whole batch).
  int64_t n_sel = 0;
  int64_t t = 0;
  for (int32_t r = 0; r < b.n_rows; ++r)
    if (b.rows[r].want_logits) n_sel += 1 + b.rows[r].n_draft;
  if (s_->last.size() < size_t(n_sel) * size_t(H)) s_->last.resize(size_t(n_sel) * size_t(H));
  n_sel = 0;
  for (int32_t r = 0; r < b.n_rows; ++r) {
    t += b.rows[r].n_tokens;
    if (!b.rows[r].want_logits) continue;
    const int64_t n = 1 + b.rows[r].n_draft;
    KV_CHECK(b.rows[r].n_draft >= 0 && n <= b.rows[r].n_tokens, "row {}: {} drafts in {} tokens",
             r, b.rows[r].n_draft, b.rows[r].n_tokens);
    std::memcpy(s_->last.data() + n_sel * H, x + (t - n) * H, size_t(n * H) * sizeof(float));
    n_sel += n;
  }
  if (n_sel == 0) return;
  KV_CHECK(logits != nullptr, "batch: the tail needs a logits buffer");
  float* last = s_->last.data();  // [n_sel, hidden]
  cpu::rmsnorm(last, static_cast<const float*>(out_norm_->data), c.rms_eps, n_sel, H, last);
  cpu::matmul(*output_, last, n_sel, logits, pool_.get());  // [n_sel, vocab]
  if (c.final_logit_softcap > 0.f)
    cpu::softcap_inplace(logits, c.final_logit_softcap, n_sel * c.vocab);
}

}  // namespace kvasir
