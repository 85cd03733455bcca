#include "daemon/engine/bridge.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "base/check.h"
#include "base/log.h"
#include "ipc/batch.h"

namespace kvasir {

Bridge::Bridge(ipc::Segment& seg, BridgeConfig cfg, std::function<RingHealth()> health)
    : seg_(seg),
      cfg_(std::move(cfg)),
      health_(std::move(health)),
      blocks_(cfg_.n_blocks, cfg_.block_size),
      sched_([&] {
        // The row cap that balances the ring needs to know how many
        // micro-batches can be in it at once.
        SchedLimits l = cfg_.limits;
        l.inflight = int32_t(seg.dims().inflight);
        return l;
      }()) {
  KV_CHECK(cfg_.limits.max_rows <= seg_.dims().max_rows &&
               cfg_.limits.max_tokens <= seg_.dims().max_tokens,
           "bridge: limits exceed the segment's widths");
  slots_.resize(size_t(seg_.dims().inflight));
  eos_.insert(cfg_.eos_ids.begin(), cfg_.eos_ids.end());
  seed_base_ = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  {
    std::lock_guard lk(stats_mu_);
    stats_.blocks_total = stats_.blocks_free = cfg_.n_blocks;
  }
  thread_ = std::thread([this] { loop(); });
}

Bridge::~Bridge() {
  shutdown();
}

void Bridge::shutdown() {
  if (stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  seg_.ring(seg_.n_stages()).not_empty.ring();
  if (thread_.joinable()) thread_.join();
}

std::string Bridge::failure() const {
  std::lock_guard lk(stats_mu_);
  return failure_;
}

Status Bridge::check_request(const GenRequest& r) const {
  using enum ErrorCode;
  if (r.prompt.empty()) return Status(kInvalidArgument, "prompt: empty");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= cfg_.vocab)
      return error_status(kInvalidArgument,
                          "prompt[{}]: token id {} is outside the vocabulary [0, {})", i,
                          r.prompt[i], cfg_.vocab);
  if (r.max_tokens < 1)
    return error_status(kInvalidArgument, "max_tokens: must be >= 1 (got {})", r.max_tokens);
  KV_RETURN_IF_ERROR(validate_sampling(r.sampling));
  const int64_t need = int64_t(r.prompt.size()) + r.max_tokens;
  if (cfg_.context_length > 0 && need > cfg_.context_length)
    return error_status(kContextLength,
                        "prompt ({} tokens) + max_tokens ({}) exceed the model's context of {}",
                        r.prompt.size(), r.max_tokens, cfg_.context_length);
  const int64_t blocks = blocks_.blocks_for(need);
  if (blocks > blocks_.total() || blocks > seg_.dims().max_table)
    return error_status(
        kContextLength,
        "prompt ({} tokens) + max_tokens ({}) need {} KV blocks; the cache holds {}",
        r.prompt.size(), r.max_tokens, blocks,
        std::min<int64_t>(blocks_.total(), seg_.dims().max_table));
  return Status();
}

RequestId Bridge::submit(GenRequest req, EventSink sink) {
  auto refuse = [&](Status why) {
    TokenEvent ev;
    ev.finish = FinishReason::kError;
    ev.error = std::move(why);
    if (sink) sink(ev);
    return RequestId(0);
  };
  if (!ready())
    return refuse(failed_ ? Status(ErrorCode::kUnavailable, "engine failed: " + failure())
                          : Status(ErrorCode::kStopping, "engine is stopping"));
  if (Status why = check_request(req); !why.ok()) return refuse(std::move(why));
  auto s = std::make_unique<Sequence>();
  if (!req.sampling.has_seed) {
    // Reproducible per request, independent of batching (stages/sampler.h).
    req.sampling.seed = seed_base_ + 0x9E3779B97F4A7C15ull * ++seed_counter_;
    req.sampling.has_seed = 1;
  }
  s->tokens = req.prompt;
  s->n_prompt = int32_t(req.prompt.size());
  s->req = std::move(req);
  s->sink = std::move(sink);
  RequestId id;
  {
    std::lock_guard lk(inbox_mu_);
    // queued_ counts this request from now until reap sees it leave the
    // queue, so concurrent submissions can never overshoot the bound (a
    // count read from the stats lagged the inbox -> waiting move).
    if (queued_ >= size_t(std::max(cfg_.max_queue, 0))) {
      sink = std::move(s->sink);  // the refusal must reach the caller (the API answers 429)
      return refuse(
          error_status(ErrorCode::kQueueFull, "queue full ({} requests waiting)", cfg_.max_queue));
    }
    id = next_id_++;
    s->id = id;
    inbox_.push_back(std::move(s));
    queued_++;
  }
  seg_.ring(seg_.n_stages()).not_empty.ring();
  return id;
}

void Bridge::cancel(RequestId id) {
  {
    std::lock_guard lk(inbox_mu_);
    cancels_.push_back(id);
  }
  seg_.ring(seg_.n_stages()).not_empty.ring();
}

EngineStats Bridge::stats() const {
  std::lock_guard lk(stats_mu_);
  return stats_;
}

RingReport Bridge::ring_report() const {
  RingReport r;
  r.inflight = int32_t(seg_.dims().inflight);
  const ipc::SegmentParams& p = seg_.params();
  for (int s = 0; s < seg_.n_stages(); ++s) {
    const ipc::StageStats& st = seg_.stage(s).stats;
    StageReport one;
    one.index = s;
    one.first_layer = p.stages[s].first;
    one.last_layer = p.stages[s].last;
    one.device =
        std::string(p.stages[s].device, strnlen(p.stages[s].device, sizeof p.stages[s].device));
    one.busy_s = double(st.busy_ns.load()) / 1e9;
    one.starved_s = double(st.starved_ns.load()) / 1e9;
    one.blocked_s = double(st.blocked_ns.load()) / 1e9;
    one.batches = st.batches.load();
    one.tokens = st.tokens.load();
    one.refused = st.refused.load();
    r.stages.push_back(std::move(one));
  }
  return r;
}

std::vector<StageSnapshot> Bridge::stage_stats() const {
  std::vector<StageSnapshot> v;
  for (int s = 0; s < seg_.n_stages(); ++s) {
    auto& st = seg_.stage(s);
    v.push_back(StageSnapshot{st.status.load(), st.stats.busy_ns.load(), st.stats.starved_ns.load(),
                              st.stats.blocked_ns.load(), st.stats.batches.load(),
                              st.stats.tokens.load(), st.stats.refused.load()});
  }
  return v;
}

void Bridge::take_inbox() {
  std::vector<std::unique_ptr<Sequence>> in;
  std::vector<RequestId> cancels;
  {
    std::lock_guard lk(inbox_mu_);
    in.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& s : in) {
    waiting_.push_back(s.get());
    seqs_[s->id] = std::move(s);
  }
  for (RequestId id : cancels) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || it->second->done) continue;
    it->second->cancelled = true;
    finish(it->second.get(), FinishReason::kAbort);
  }
}

// Sends the final event; the sequence's blocks go back once no batch in
// flight still names them (reap).
void Bridge::finish(Sequence* s, FinishReason why, Status error) {
  if (s->done) return;
  s->done = true;
  if (why != FinishReason::kNone && s->sink) {
    TokenEvent ev;
    ev.finish = why;
    ev.error = std::move(error);
    s->sink(ev);
  }
}

void Bridge::reap() {
  waiting_.erase(
      std::remove_if(waiting_.begin(), waiting_.end(), [](Sequence* s) { return s->done; }),
      waiting_.end());
  for (auto it = running_.begin(); it != running_.end();) {
    Sequence* s = *it;
    if (s->done && s->batches_in_flight == 0) {
      blocks_.release(s->table);
      s->running = false;
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    Sequence* s = it->second.get();
    bool in_running = std::find(running_.begin(), running_.end(), s) != running_.end();
    if (s->done && !in_running && s->batches_in_flight == 0) {
      if (!s->table.empty()) blocks_.release(s->table);  // a waiter with no blocks
      it = seqs_.erase(it);
    } else {
      ++it;
    }
  }
  // Live KV accounting: slots allocated vs positions written (or being
  // written); the difference is the unused tail of each last block.
  int64_t slots = 0, used = 0;
  for (const Sequence* s : running_) {
    const int64_t n = int64_t(s->table.size()) * blocks_.block_size();
    slots += n;
    used += std::min<int64_t>(n, s->n_scheduled);
  }
  for (const Sequence* s : waiting_) slots += int64_t(s->table.size()) * blocks_.block_size();
  {
    std::lock_guard lk(inbox_mu_);
    queued_ = inbox_.size() + waiting_.size();
  }
  std::lock_guard lk(stats_mu_);
  stats_.waiting = int32_t(waiting_.size());
  stats_.running = int32_t(running_.size());
  stats_.blocks_free = blocks_.free();
  stats_.kv_slots_used = used;
  stats_.kv_waste = slots - used;
  stats_.preemptions = sched_.preemptions();
}

bool Bridge::submit_batch() {
  auto slot_it = std::find_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.busy; });
  if (slot_it == slots_.end()) return false;
  RingLoad load;
  for (const Slot& s : slots_) {
    if (!s.busy) {
      load.free_slots++;
      continue;
    }
    for (const SchedRow& r : s.rows) load.tokens_in_flight += r.n_tokens;
  }
  std::vector<SchedRow> rows = sched_.next(waiting_, running_, blocks_, load);
  if (rows.empty()) return false;
  const uint32_t k = uint32_t(slot_it - slots_.begin());
  const ipc::SlotDims& d = seg_.dims();
  ipc::Batch b;
  b.batch_id = next_batch_id_++;
  b.tables.assign(size_t(rows.size()) * size_t(d.max_table), 0);
  int64_t prompt_tokens = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const SchedRow& row = rows[r];
    Sequence* s = row.seq;
    ipc::DescRow dr;
    dr.seq_id = s->id;
    dr.pos0 = row.pos0;
    dr.n_tokens = row.n_tokens;
    dr.n_table = int32_t(s->table.size());
    dr.sample = row.sample;
    dr.pad = row.pad;
    dr.n_prompt = s->n_prompt;  // the tail's penalties tell prompt from output by it
    b.rows.push_back(dr);
    if (row.pad)  // `static` padding's filler (docs/scheduler.md): any valid id will do
      b.tokens.insert(b.tokens.end(), size_t(row.n_tokens), s->tokens.back());
    else
      b.tokens.insert(b.tokens.end(), s->tokens.begin() + row.pos0,
                      s->tokens.begin() + row.pos0 + row.n_tokens);
    std::copy(s->table.begin(), s->table.end(), b.tables.begin() + int64_t(r) * d.max_table);
    b.sampling.push_back(s->req.sampling);
    s->batches_in_flight++;
    if (!row.pad && row.pos0 < s->n_prompt)
      prompt_tokens += std::min(row.n_tokens, s->n_prompt - row.pos0);
  }
  b.n_tokens = int32_t(b.tokens.size());
  ipc::write_desc(seg_.desc(k), b, d);
  ipc::BatchMsg m;
  m.batch_id = b.batch_id;
  m.slot = k;
  m.n_rows = int32_t(b.rows.size());
  m.n_tokens = b.n_tokens;
  slot_it->busy = true;
  slot_it->batch_id = b.batch_id;
  slot_it->rows = std::move(rows);
  // Never full: at most `inflight` batches exist and the ring holds that many.
  if (!seg_.ring(0).push(m, [&] { return stopping_.load(); })) return false;
  std::lock_guard lk(stats_mu_);
  stats_.tokens_prompt += prompt_tokens;
  return true;
}

bool Bridge::read_results() {
  bool any = false;
  ipc::BatchMsg m;
  ipc::Ring& ring = seg_.ring(seg_.n_stages());
  while (ring.try_pop(m)) {
    any = true;
    if (seg_.stale(m.batch_id)) {  // of a dead epoch: its slot was freed at the loss
      stale_results_++;
      continue;
    }
    if (m.kind != ipc::kMsgBatch || m.version != ipc::kMsgVersion ||
        m.slot >= uint32_t(slots_.size()) || !slots_[m.slot].busy ||
        slots_[m.slot].batch_id != m.batch_id || m.n_rows != int32_t(slots_[m.slot].rows.size())) {
      refused_results_++;
      KV_LOG_WARN("bridge", "refused a result (batch {}, slot {})", m.batch_id, m.slot);
      continue;
    }
    Slot& slot = slots_[m.slot];
    ipc::ResultView res = seg_.result(m.slot);
    ipc::ResultHeader hdr;
    std::memcpy(&hdr, res.hdr, sizeof hdr);
    Status status;
    if (m.status == int32_t(ErrorCode::kOk) &&
        (hdr.batch_id != m.batch_id || hdr.n_rows != m.n_rows)) {
      status = Status(ErrorCode::kBadResult, "result slot does not match its message");
    } else if (m.status != int32_t(ErrorCode::kOk)) {
      std::string text(hdr.error, strnlen(hdr.error, sizeof hdr.error));
      status = Status(error_code_from_int(m.status), text.empty() ? "batch failed" : text);
    }
    int64_t generated = 0;
    for (size_t r = 0; r < slot.rows.size(); ++r) {
      const SchedRow& row = slot.rows[r];
      Sequence* s = row.seq;
      s->batches_in_flight--;
      if (!status.ok()) {
        finish(s, FinishReason::kError, status);
        continue;
      }
      if (!row.sample) continue;
      s->awaiting = false;
      if (s->done) continue;  // cancelled while in flight
      const int32_t tok = res.token[r];
      if (tok < 0 || tok >= cfg_.vocab) {
        finish(s, FinishReason::kError,
               error_status(ErrorCode::kBadResult, "the tail returned token id {}", tok));
        continue;
      }
      TokenEvent ev;
      ev.token = tok;
      ev.logprob = res.logprob[r];
      const int32_t n_top = std::clamp(res.n_top[r], 0, int32_t(kMaxLogprobs));
      for (int32_t i = 0; i < n_top && i < s->req.sampling.logprobs; ++i)
        ev.top_logprobs.emplace_back(res.top[r * kMaxLogprobs + i].token,
                                     res.top[r * kMaxLogprobs + i].logprob);
      s->tokens.push_back(tok);
      s->n_generated++;
      generated++;
      const bool stop =
          (!s->req.ignore_eos && eos_.count(tok)) ||
          std::find(s->req.stop_ids.begin(), s->req.stop_ids.end(), tok) != s->req.stop_ids.end();
      if (stop)
        ev.finish = FinishReason::kStop;
      else if (s->n_generated >= s->req.max_tokens)
        ev.finish = FinishReason::kLength;
      if (s->sink) s->sink(ev);
      if (ev.finish != FinishReason::kNone) finish(s, FinishReason::kNone);
    }
    slot.busy = false;
    slot.rows.clear();
    std::lock_guard lk(stats_mu_);
    stats_.tokens_generated += generated;
  }
  return any;
}

void Bridge::fail_all(const std::string& why) {
  {
    std::lock_guard lk(stats_mu_);
    failure_ = why;
  }
  failed_ = true;
  for (auto& [id, s] : seqs_)
    finish(s.get(), FinishReason::kError, Status(ErrorCode::kUnavailable, why));
}

// Every batch in the ring is lost with the stage (and every stage's KV is
// suspect: the restarted one starts empty). A new epoch begins at the next
// batch id: every receiver drops anything older. Each running sequence goes
// back to the head of the queue, oldest first, to be recomputed from its
// prompt plus the tokens already streamed (the scheduler's preemption by
// recompute: nothing is re-sent, and the sampler's draw depends on (seed,
// position) only, so the text continues exactly).
void Bridge::invalidate(uint64_t faults) {
  seg_.header().epoch_first_batch.store(next_batch_id_, std::memory_order_release);
  // The acknowledgement the supervisor waits for before it restarts a stage:
  // a new process must never see a batch of the dead epoch as live.
  seg_.header().epoch.store(uint32_t(faults), std::memory_order_release);
  for (Slot& slot : slots_) {
    for (const SchedRow& row : slot.rows) {
      row.seq->batches_in_flight--;
      row.seq->awaiting = false;
    }
    slot.busy = false;
    slot.rows.clear();
  }
  std::vector<Sequence*> requeue;
  for (Sequence* s : running_)
    if (!s->done) requeue.push_back(s);
  std::sort(requeue.begin(), requeue.end(),
            [](const Sequence* a, const Sequence* b) { return a->admitted < b->admitted; });
  for (auto it = requeue.rbegin(); it != requeue.rend(); ++it) {
    Sequence* s = *it;
    blocks_.release(s->table);
    s->n_scheduled = 0;
    s->running = false;
    waiting_.push_front(s);
  }
  running_.erase(
      std::remove_if(running_.begin(), running_.end(), [](const Sequence* s) { return !s->done; }),
      running_.end());
  std::lock_guard lk(stats_mu_);
  stats_.requeued += int64_t(requeue.size());
}

void Bridge::check_health() {
  if (!health_ || failed_) return;
  RingHealth h = health_();
  if (!h.failed.empty()) {
    fail_all(h.failed);
    std::lock_guard lk(stats_mu_);
    stats_.state = EngineState::kFailed;
    stats_.failure = h.failed;
    stats_.degraded = false;
    stats_.restarts = h.restarts;
    stats_.faults = int64_t(h.faults);
    return;
  }
  if (h.faults != faults_seen_) {
    faults_seen_ = h.faults;
    invalidate(h.faults);
    if (!recovering_) fault_ns_ = ipc::now_ns();
    recovering_ = true;
    KV_LOG_WARN("bridge", "recovering: {}", h.last_fault);
  }
  bool resumed = false;
  if (recovering_ && h.serving && seg_.drained()) {
    recovering_ = false;
    resumed = true;
  }
  std::lock_guard lk(stats_mu_);
  stats_.restarts = h.restarts;
  stats_.faults = int64_t(h.faults);
  stats_.degraded = recovering_;
  stats_.state = recovering_ ? EngineState::kRecovering : EngineState::kOk;
  if (resumed) {
    stats_.last_recovery_s = double(ipc::now_ns() - fault_ns_) / 1e9;
    KV_LOG_INFO("bridge", "recovered in {:.3f} s", stats_.last_recovery_s);
  }
}

void Bridge::loop() {
  ipc::Bell& bell = seg_.ring(seg_.n_stages()).not_empty;
  while (!stopping_.load()) {
    uint32_t seen = bell.seen();
    check_health();
    take_inbox();
    if (failed_) {
      for (auto& [id, s] : seqs_)
        finish(s.get(), FinishReason::kError, Status(ErrorCode::kUnavailable, failure()));
      seqs_.clear();
      waiting_.clear();
      running_.clear();
      bell.wait(seen, 100'000'000);
      continue;
    }
    bool progress = read_results();
    reap();
    // While recovering nothing enters the ring: the drain check needs it
    // quiet, and the restarted stage is not ready. Requests wait meanwhile.
    if (!recovering_)
      while (submit_batch()) progress = true;
    // Recovering: re-check the drain soon (stages ring no bell for it).
    if (!progress) bell.wait(seen, recovering_ ? 10'000'000 : 100'000'000);
  }
  for (auto& [id, s] : seqs_) finish(s.get(), FinishReason::kAbort);
}

}  // namespace kvasir
