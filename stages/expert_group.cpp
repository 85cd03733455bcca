// stages/expert_group.cpp — see expert_group.h.
#include "stages/expert_group.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/check.h"
#include "base/log.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_file.h"
#include "stages/preload.h"
#include "stages/slice.h"

namespace kvasir {

// ---- the leader's side ------------------------------------------------------

namespace {

// Requests of at most this many rows are waited for awake (spin_until).
constexpr int32_t kSpinRows = 4;

// Spins up to 300 µs for `done` before a caller sleeps on a bell, when the
// request at hand has at most kSpinRows rows. For one or a few decodes the
// leader's next request comes, and a member's answer, a fraction of a
// millisecond apart (a layer's attention, its experts): a futex sleep and
// wake-up per layer on each side cost about a quarter of the group's
// per-token time. Bigger batches are longer per layer and come when the
// ring is busy, where a spinning process takes a core another needs and
// costs throughput (bench/moe; docs/measurements/2026-12-02.md has the
// figures). Env KVASIR_GROUP_SPIN_US
// overrides the 300 (0: never spin).
template <class Done>
bool spin_until(int32_t rows, Done done) {
  static const int64_t spin_ns = [] {
    const char* e = std::getenv("KVASIR_GROUP_SPIN_US");
    return e ? std::clamp<int64_t>(std::atoll(e), 0, 100'000) * 1000 : int64_t(300'000);
  }();
  if (spin_ns == 0 || rows > kSpinRows) return done();
  const int64_t end = ipc::now_ns() + spin_ns;
  for (int i = 0;; ++i) {
    if (done()) return true;
    __builtin_ia32_pause();
    if ((i & 63) == 63 && ipc::now_ns() > end) return false;
  }
}

}  // namespace

SegmentPeers::SegmentPeers(ipc::Segment& seg, int stage, int32_t top_k)
    : seg_(seg), me_(seg.stage(stage)), top_k_(top_k) {
  const ipc::SegmentParams& p = seg.params();
  KV_CHECK(top_k == p.moe_top_k, "expert group: the model's top {} is not the plan's {}", top_k,
           p.moe_top_k);
  int32_t next = p.stages[stage].experts_last + 1;
  for (int m = 0; m < p.n_members; ++m) {
    const ipc::MemberPlan& mp = p.members[m];
    if (mp.position != stage) continue;
    KV_CHECK(mp.plan.experts_first == next,
             "expert group of stage {}: member {} starts at expert {}, expected {}", stage, m,
             mp.plan.experts_first, next);
    Member mem;
    mem.index = m;
    mem.area = seg.member_area(m);
    mem.first = mp.plan.experts_first;
    mem.held = mp.plan.experts_last - mp.plan.experts_first + 1;
    next += mem.held;
    members_.push_back(mem);
  }
}

void SegmentPeers::post(int m, int layer, const float* x, int64_t n, const int32_t* ids) {
  Member& mem = members_.at(size_t(m));
  KV_CHECK(n >= 0 && n <= seg_.dims().max_tokens, "expert group: {} rows, at most {}", n,
           seg_.dims().max_tokens);
  ipc::MemberCall& call = *mem.area.call;
  std::memcpy(mem.area.x, x, size_t(n) * size_t(seg_.dims().hidden) * sizeof(float));
  std::memcpy(mem.area.ids, ids, size_t(n) * size_t(top_k_) * sizeof(int32_t));
  call.layer.store(layer, std::memory_order_relaxed);
  call.n.store(int32_t(n), std::memory_order_relaxed);
  call.posted_ns.store(ipc::now_ns(), std::memory_order_relaxed);
  // From the segment, not a count of our own: a restarted leader goes on
  // from where its predecessor left the member.
  mem.want = call.req_seq.load(std::memory_order_relaxed) + 1;
  call.req_seq.store(mem.want, std::memory_order_release);
  call.request.ring();
}

const float* SegmentPeers::wait(int m) {
  Member& mem = members_.at(size_t(m));
  ipc::MemberCall& call = *mem.area.call;
  if (call.ans_seq.load(std::memory_order_acquire) != mem.want) {
    ipc::enter_phase(me_, ipc::kPhaseBlocked, ipc::now_ns());
    spin_until(call.n.load(std::memory_order_relaxed),
               [&] { return call.ans_seq.load(std::memory_order_acquire) == mem.want; });
    for (;;) {
      const uint32_t seen = call.answer.seen();
      if (call.ans_seq.load(std::memory_order_acquire) == mem.want) break;
      if (seg_.stopping()) {
        ipc::enter_phase(me_, ipc::kPhaseBusy, ipc::now_ns());
        KV_FAIL("expert group: shutting down while member {} computes", mem.index);
      }
      call.answer.wait(seen, 100'000'000);
    }
    ipc::enter_phase(me_, ipc::kPhaseBusy, ipc::now_ns());
  }
  call.posted_ns.store(0, std::memory_order_relaxed);
  if (call.ans_failed.load(std::memory_order_relaxed) != 0) {
    const ipc::StageShared& st = seg_.member(mem.index);
    KV_FAIL("expert group member {}: {}", mem.index,
            std::string(st.error, strnlen(st.error, sizeof st.error)));
  }
  return mem.area.y;
}

void choose_expert_kernels(const std::string& model_path, int first_layer, int last_layer) {
  auto model = ModelFile::open(model_path);
  for (int il = first_layer; il <= last_layer; ++il)
    for (const std::string& name : layer_tensor_names(il).expert_stacks()) {
      const auto& stack = model->get_experts(name);
      if (stack.empty()) continue;
      for (cpu::RowsClass rows : {cpu::RowsClass::kDecode, cpu::RowsClass::kBatch})
        cpu::simd_kernel_choice(stack[0].type, rows, stack[0].cols());
    }
}

// ---- the member's side ------------------------------------------------------

namespace {

class Member {
 public:
  Member(ipc::Segment& seg, int m)
      : seg_(seg),
        m_(m),
        plan_(seg.params().members[m]),
        me_(seg.member(m)),
        area_(seg.member_area(m)) {}

  void load();
  int serve();

 private:
  void answer(uint32_t req);
  void adopt_leader_kernels();

  ipc::Segment& seg_;
  int m_;
  ipc::MemberPlan plan_;
  ipc::StageShared& me_;
  ipc::MemberArea area_;
  std::unique_ptr<ModelFile> model_;
  std::vector<cpu::MoeExperts> layers_;  // [last - first + 1]
  std::unique_ptr<cpu::ThreadPool> pool_;
  cpu::MoeScratch scratch_;
  int32_t top_k_ = 0;
  std::string adopted_;  // the leader's kernels text adopted last
};

// Maps only this member's experts of the group's layers: no attention, no
// router, no KV (docs/expert-groups.md, "Where the work runs").
void Member::load() {
  const ipc::SegmentParams& p = seg_.params();
  model_ = ModelFile::open(p.model_path);
  const ModelConfig& c = model_->config();
  const ipc::StagePlan& sp = plan_.plan;
  KV_CHECK(c.moe(), "expert group member: the model has no experts");
  KV_CHECK(c.hidden == p.dims.hidden, "the model's hidden size {} is not the plan's {}", c.hidden,
           p.dims.hidden);
  KV_CHECK(c.n_experts_used == p.moe_top_k, "the model's top {} is not the plan's {}",
           c.n_experts_used, p.moe_top_k);
  KV_CHECK(sp.last < c.n_layers && sp.experts_last < c.n_experts,
           "layers {}-{} / experts {}-{} outside the model's {} layers / {} experts", sp.first,
           sp.last, sp.experts_first, sp.experts_last, c.n_layers, c.n_experts);
  top_k_ = c.n_experts_used;
  const size_t first = size_t(sp.experts_first),
               held = size_t(sp.experts_last - sp.experts_first + 1);
  for (int il = sp.first; il <= sp.last; ++il) {
    const LayerTensorNames n = layer_tensor_names(il);
    cpu::MoeExperts e;
    e.n_total = c.n_experts;
    e.first = sp.experts_first;
    e.gate = std::span(model_->get_experts(n.ffn_gate_exps)).subspan(first, held);
    e.up = std::span(model_->get_experts(n.ffn_up_exps)).subspan(first, held);
    e.down = std::span(model_->get_experts(n.ffn_down_exps)).subspan(first, held);
    map_expert_extras(*model_, n, e);
    layers_.push_back(e);
  }
  pool_ = std::make_unique<cpu::ThreadPool>(sp.threads);
  // Page its experts in now, with progress for the daemon's log and
  // `kvasir status`, as a stage does.
  PreloadConfig pc;
  pc.progress = [this](const PreloadProgress& pr) {
    me_.load_bytes_total.store(pr.bytes_total);
    me_.load_bytes_done.store(pr.bytes_done);
    me_.load_layers_done.store(pr.layers_done);
    return !seg_.stopping();
  };
  const SliceSpec experts{sp.first, sp.last, false, false, sp.experts_first, sp.experts_last, true};
  preload_slice(*model_, experts, pc);
}

// The leader's CPU kernel choices, whenever its kernels text changed: the
// member computes its experts' rows with the same kernels, so the leader's
// combine continues the unsharded stage's bits (choose_expert_kernels).
void Member::adopt_leader_kernels() {
  std::string text = ipc::read_stage_simd(seg_.stage(plan_.position));
  if (text.empty() || text == adopted_) return;
  const int n = cpu::simd_adopt_choices(text);
  if (n > 0) KV_LOG_DEBUG("member", "adopted {} kernel choices of the leader", n);
  adopted_ = std::move(text);
}

void Member::answer(uint32_t req) {
  ipc::MemberCall& call = *area_.call;
  const int64_t t0 = ipc::now_ns();
  ipc::enter_phase(me_, ipc::kPhaseBusy, t0);
  adopt_leader_kernels();
  const int32_t layer = call.layer.load(std::memory_order_relaxed);
  const int32_t n = call.n.load(std::memory_order_relaxed);
  uint32_t failed = 0;
  try {
    KV_CHECK(layer >= plan_.plan.first && layer <= plan_.plan.last,
             "request for layer {}, this member holds {}-{}", layer, plan_.plan.first,
             plan_.plan.last);
    KV_CHECK(n >= 0 && n <= seg_.dims().max_tokens, "request of {} rows, at most {}", n,
             seg_.dims().max_tokens);
    cpu::moe_expert_rows(layers_[size_t(layer - plan_.plan.first)], area_.x, n, top_k_, area_.ids,
                         area_.y, scratch_, pool_.get());
  } catch (const Error& e) {
    std::snprintf(me_.error, sizeof me_.error, "%s", e.message().c_str());
    KV_LOG_ERROR("member", "{}", e.message());
    failed = 1;
  }
  const int64_t t1 = ipc::now_ns();
  me_.stats.batches.fetch_add(1, std::memory_order_relaxed);
  me_.stats.tokens.fetch_add(uint64_t(std::max(n, 0)), std::memory_order_relaxed);
  me_.last_busy_ns.store(uint64_t(t1 - t0), std::memory_order_relaxed);
  call.ans_failed.store(failed, std::memory_order_relaxed);
  call.ans_seq.store(req, std::memory_order_release);
  call.answer.ring();
  ipc::enter_phase(me_, ipc::kPhaseIdle, t1);
}

int Member::serve() {
  ipc::MemberCall& call = *area_.call;
  ipc::begin_accounting(me_, ipc::now_ns());
  while (!seg_.stopping()) {
    const uint32_t seen = call.request.seen();
    const uint32_t req = call.req_seq.load(std::memory_order_acquire);
    if (req != call.ans_seq.load(std::memory_order_relaxed)) {
      answer(req);
      ipc::write_stage_simd(me_, cpu::simd_summary(ipc::kStageSimdBytes - 1));
      // The next layer's request follows soon within a token: wait for it
      // awake first.
      spin_until(call.n.load(std::memory_order_relaxed), [&] {
        return call.req_seq.load(std::memory_order_acquire) !=
                   call.ans_seq.load(std::memory_order_relaxed) ||
               seg_.stopping();
      });
      continue;
    }
    call.request.wait(seen, 100'000'000);
  }
  return 0;
}

}  // namespace

int run_member(ipc::Segment& seg, int member) {
  Member mem(seg, member);
  ipc::StageShared& me = seg.member(member);
  mem.load();
  me.capacity_blocks.store(0);  // holds no KV: not in the daemon's block count
  me.status.store(ipc::kStageReady);
  seg.header().state.ring();
  const int rc = mem.serve();
  me.status.store(ipc::kStageStopped);
  seg.header().state.ring();
  return rc;
}

}  // namespace kvasir
