#include "stages/agent.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/log.h"
#include "stages/tail_prompt.h"
#include "stages/tail_sampler.h"

namespace kvasir {
namespace {

void set_error(char* dst, size_t cap, const std::string& msg) {
  std::snprintf(dst, cap, "%s", msg.c_str());
}

// One stage's loop over its inbound ring (see agent.h), in named steps.
class Agent {
 public:
  Agent(ipc::Segment& seg, const AgentConfig& cfg, const StageForward& forward);
  int run();

 private:
  // Whether m goes on: a message that fails its checks fails its batch
  // downstream when its slot and id are usable, and is dropped (false)
  // when nothing about it is safe to touch.
  bool check_message(ipc::BatchMsg& m);
  // Copies and checks the descriptor of m's slot into batch_.
  void read_descriptor(ipc::BatchMsg& m, const ipc::ResultView& result);
  // The forward pass, and at the tail the sampling; a failure fails the batch.
  void run_batch(ipc::BatchMsg& m, const ipc::ResultView& result);
  ForwardBatch forward_batch(const ipc::BatchMsg& m);
  void fail_batch(ipc::BatchMsg& m, ErrorCode code, const std::string& why,
                  const ipc::ResultView& result) const;
  // Records the batch's busy time (the counters and its result slot's
  // stage_busy_ns) and pushes m on; false when the stage is stopping.
  bool hand_on(const ipc::BatchMsg& m, int64_t t_busy, const ipc::ResultView& result);
  // Whatever happens to a message, `passed` counts it once we are done
  // with it (pushed on or dropped): the bridge's drain check relies on it.
  void pass() { me_.passed.fetch_add(1, std::memory_order_release); }
  // The handoff of a batch pushed at sent (the producer's clock, untrusted)
  // to this stage, free to take it since t_free, holding it at t_held.
  void count_handoff(int64_t sent, int64_t t_free, int64_t t_held);
  // Writes cfg_.kernels() to the segment when it differs from the last written.
  void publish_kernels();

  ipc::Segment& seg_;
  const AgentConfig cfg_;
  const StageForward& forward_;
  const int s_;
  const bool head_, tail_;
  const ipc::SlotDims d_;
  ipc::StageShared& me_;
  ipc::Ring& in_;
  ipc::Ring& out_;
  // How the stage waits for its next batch and for room downstream: a
  // bounded spin before the sleep ([plan] spin_us, ipc/futex.h).
  const ipc::WaitPolicy wait_;
  // Tail: [max_rows, vocab]; grown to [max_tokens, vocab] by the first
  // batch that asks for prompt logprobs (every token's logits).
  std::vector<float> logits_;
  bool all_logits_ = false;  // this batch's forward returns every token's logits
  std::vector<ForwardRow> frows_;
  // Rows a GPU tail sampled on its device (ForwardBatch::sampled_token).
  std::vector<int32_t> dev_token_;
  std::vector<float> dev_logprob_;
  std::vector<int32_t> copy_src_, copy_dst_;  // the batch's block copies (ForwardBatch)
  TailSampler sampler_;
  ipc::Batch batch_;
  uint64_t last_id_ = 0;
  std::string kernels_;  // what publish_kernels wrote last
};

Agent::Agent(ipc::Segment& seg, const AgentConfig& cfg, const StageForward& forward)
    : seg_(seg),
      cfg_(cfg),
      forward_(forward),
      s_(cfg.stage),
      head_(cfg.stage == 0),
      tail_(cfg.stage == seg.n_stages() - 1),
      d_(seg.dims()),
      me_(seg.stage(cfg.stage)),
      in_(seg.ring(cfg.stage)),
      out_(seg.ring(cfg.stage + 1)),
      wait_{seg.params().spin_ns},
      frows_(size_t(d_.max_rows)),
      dev_token_(size_t(d_.max_rows)),
      dev_logprob_(size_t(d_.max_rows)) {
  if (tail_) logits_.resize(size_t(d_.max_rows) * size_t(cfg.vocab));
  if (tail_) sampler_.set_grammar(cfg.grammar);
}

int Agent::run() {
  auto stop = [&] { return seg_.stopping(); };
  // From here on the stage's time is accounted: starved until a batch comes.
  ipc::begin_accounting(me_, ipc::now_ns());
  publish_kernels();
  while (!seg_.stopping()) {
    ipc::BatchMsg m;
    const int64_t t_free = ipc::now_ns();
    if (!in_.pop(m, stop, wait_)) break;
    const int64_t t1 = ipc::now_ns();
    ipc::enter_phase(me_, ipc::kPhaseBusy, t1);
    count_handoff(m.sent_ns, t_free, t1);
    // A batch of a dead epoch (a stage died while it was in the ring): its
    // sequences are being recomputed, so nothing downstream wants it and its
    // slot may already carry a new batch. Drop it without touching the slot.
    if (seg_.stale(m.batch_id)) {
      me_.stats.dropped.fetch_add(1, std::memory_order_relaxed);
      pass();
      ipc::enter_phase(me_, ipc::kPhaseIdle, ipc::now_ns());
      continue;
    }
    if (!check_message(m)) continue;
    last_id_ = m.batch_id;
    const ipc::ResultView result = seg_.result(m.slot);
    if (m.status == int32_t(ErrorCode::kOk)) read_descriptor(m, result);
    if (m.status == int32_t(ErrorCode::kOk)) run_batch(m, result);
    publish_kernels();
    if (tail_) {
      result.hdr->batch_id = m.batch_id;
      result.hdr->n_rows = m.n_rows;
      result.hdr->status = m.status;
    }
    if (!hand_on(m, t1, result)) break;
  }
  return 0;
}

void Agent::count_handoff(int64_t sent, int64_t t_free, int64_t t_held) {
  // A timestamp from the future or over a minute old is not a handoff.
  constexpr int64_t kMaxHandoffNs = 60'000'000'000;
  if (sent <= 0 || sent > t_held || t_held - sent > kMaxHandoffNs) return;
  me_.stats.handoff_ns.fetch_add(uint64_t(t_held - std::max(sent, t_free)),
                                 std::memory_order_relaxed);
  me_.stats.handoffs.fetch_add(1, std::memory_order_relaxed);
}

void Agent::publish_kernels() {
  if (!cfg_.kernels) return;
  std::string now = cfg_.kernels();
  if (now == kernels_) return;
  ipc::write_stage_simd(me_, now);
  kernels_ = std::move(now);
}

bool Agent::check_message(ipc::BatchMsg& m) {
  const Status why = ipc::check_msg(m, d_, last_id_);
  if (why.ok()) return true;
  me_.stats.refused.fetch_add(1);
  KV_LOG_WARN("agent", "refused a message: {}", why.message());
  // With a usable slot and id, fail that batch downstream so the bridge
  // hears of it; otherwise there is nothing safe to touch: drop it.
  if (m.slot >= uint32_t(d_.inflight) || m.batch_id <= last_id_) {
    pass();
    ipc::enter_phase(me_, ipc::kPhaseIdle, ipc::now_ns());
    return false;
  }
  m.kind = ipc::kMsgBatch;
  m.version = ipc::kMsgVersion;
  fail_batch(m, why.code(), why.message(), seg_.result(m.slot));
  m.n_rows = std::clamp(m.n_rows, 0, d_.max_rows);
  return true;
}

void Agent::read_descriptor(ipc::BatchMsg& m, const ipc::ResultView& result) {
  const Status why =
      ipc::read_desc(seg_.desc(m.slot), m, d_, cfg_.n_blocks, seg_.params().block_size, batch_,
                     cfg_.n_blocks_swa);
  if (why.ok()) return;
  me_.stats.refused.fetch_add(1);
  fail_batch(m, why.code(), why.message(), result);
}

ForwardBatch Agent::forward_batch(const ipc::BatchMsg& m) {
  for (int32_t r = 0; r < m.n_rows; ++r) {
    const ipc::DescRow& row = batch_.rows[r];
    frows_[r] = ForwardRow{row.pos0, row.n_tokens, batch_.tables.data() + int64_t(r) * d_.max_table,
                           row.n_table, row.sample != 0, row.n_draft};
    if (d_.tables == 2)
      frows_[r].block_table_swa = batch_.swa_tables.data() + int64_t(r) * d_.max_table;
  }
  ForwardBatch fb;
  fb.rows = frows_.data();
  fb.n_rows = m.n_rows;
  fb.tokens = batch_.tokens.data();
  fb.n_tokens = m.n_tokens;
  fb.slot = m.slot;
  fb.batch_id = m.batch_id;
  if (tail_) {
    std::fill_n(dev_token_.begin(), m.n_rows, -1);
    fb.sampling = batch_.sampling.data();
    fb.sampled_token = dev_token_.data();
    fb.sampled_logprob = dev_logprob_.data();
    // Prompt logprobs: every token's logits (no device sampling then: the
    // host samples from the packed rows, pack_sampled_logits).
    all_logits_ = wants_prompt_logprobs(batch_, m.n_rows);
    fb.all_logits = all_logits_;
    if (all_logits_ && logits_.size() < size_t(m.n_tokens) * size_t(cfg_.vocab))
      logits_.resize(size_t(d_.max_tokens) * size_t(cfg_.vocab));
    // Drafting rows (speculative decoding) take 1 + n_draft logits rows
    // each; a backend that cannot select them (CUDA) projects every token,
    // so room for the batch's tokens.
    if (has_drafts(batch_, m.n_rows) && logits_.size() < size_t(m.n_tokens) * size_t(cfg_.vocab))
      logits_.resize(size_t(m.n_tokens) * size_t(cfg_.vocab));
    // Structured outputs: the grammar's records and mask jobs now; the masks
    // themselves before the pass only where the device samples (the host
    // sampler takes them after it, while the jobs ran beside the pass).
    sampler_.prepare(batch_, m.batch_id, m.n_rows);
    if (cfg_.device_masks && sampler_.grammar()) {
      fb.token_masks = sampler_.masks(m.n_rows);
      fb.mask_words = int32_t(sampler_.grammar()->mask_words());
    }
  }
  copy_src_.clear();
  copy_dst_.clear();
  for (const ipc::BlockCopy& c : batch_.copies) {
    copy_src_.push_back(c.src);
    copy_dst_.push_back(c.dst);
  }
  fb.copy_src = copy_src_.data();
  fb.copy_dst = copy_dst_.data();
  fb.n_copies = int32_t(batch_.copies.size());
  return fb;
}

void Agent::run_batch(ipc::BatchMsg& m, const ipc::ResultView& result) {
  try {
    const ForwardBatch fb = forward_batch(m);
    forward_(fb, head_ ? nullptr : seg_.boundary(m.slot, s_ - 1),
             tail_ ? nullptr : seg_.boundary(m.slot, s_), tail_ ? logits_.data() : nullptr);
    if (tail_ && all_logits_) {
      score_prompt(batch_, m.n_rows, logits_.data(), cfg_.vocab, result.prompt);
      pack_sampled_logits(batch_, m.n_rows, logits_.data(), cfg_.vocab);
    }
    if (tail_)
      sampler_.sample(
          batch_, m.batch_id, m.n_rows,
          TailSampler::Logits{logits_.data(), cfg_.vocab, dev_token_.data(), dev_logprob_.data()},
          result);
  } catch (const Error& e) {
    // The code of what failed (kDevice, kOutOfMemory, ...); a check on
    // the batch's own contents is the stage's failure to run it.
    fail_batch(m, e.code() == ErrorCode::kInvalidArgument ? ErrorCode::kStageFailed : e.code(),
               e.message(), result);
  } catch (const std::exception& e) {
    fail_batch(m, ErrorCode::kStageFailed, e.what(), result);
  }
}

void Agent::fail_batch(ipc::BatchMsg& m, ErrorCode code, const std::string& why,
                       const ipc::ResultView& result) const {
  m.status = int32_t(code);
  m.origin = s_;
  set_error(result.hdr->error, sizeof(ipc::ResultHeader::error),
            fmt::format("stage {}: {}", s_, why));
}

bool Agent::hand_on(const ipc::BatchMsg& m, int64_t t_busy, const ipc::ResultView& result) {
  const int64_t t2 = ipc::now_ns();
  // This batch's busy time, for the bridge's cost model: ours, and (the
  // head) the others' cleared, since the slot held an older batch's.
  if (head_) std::fill_n(result.hdr->stage_busy_ns, ipc::kMaxStageTimes, uint64_t(0));
  if (s_ < ipc::kMaxStageTimes) result.hdr->stage_busy_ns[s_] = uint64_t(t2 - t_busy);
  me_.stats.batches.fetch_add(1, std::memory_order_relaxed);
  me_.stats.tokens.fetch_add(uint64_t(m.n_tokens), std::memory_order_relaxed);
  me_.last_busy_ns.store(uint64_t(t2 - t_busy), std::memory_order_relaxed);
  ipc::enter_phase(me_, ipc::kPhaseBlocked, t2);
  ipc::BatchMsg out = m;
  out.sent_ns = ipc::now_ns();
  if (!out_.push(out, [&] { return seg_.stopping(); }, wait_)) return false;
  pass();
  ipc::enter_phase(me_, ipc::kPhaseIdle, ipc::now_ns());
  return true;
}

}  // namespace

int run_agent(ipc::Segment& seg, const AgentConfig& cfg, const StageForward& forward) {
  const int S = seg.n_stages();
  KV_CHECK(cfg.stage >= 0 && cfg.stage < S, "stage {} of {}", cfg.stage, S);
  return Agent(seg, cfg, forward).run();
}

}  // namespace kvasir
