#include "daemon/engine/bridge.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <tuple>

#include "base/check.h"
#include "base/log.h"
#include "ipc/batch.h"

namespace kvasir {

namespace {
// The scheduler's limits with the ring's depth: the balance of micro-batches
// needs to know how many can be in the ring at once.
SchedLimits with_inflight(SchedLimits l, const ipc::Segment& seg) {
  l.inflight = int32_t(seg.dims().inflight);
  l.n_stages = seg.n_stages();
  return l;
}

const char* phase_name(const ipc::StageTime& t) {
  if (!t.serving) return "down";
  switch (t.phase) {
    case ipc::kPhaseBusy:
      return "busy";
    case ipc::kPhaseBlocked:
      return "blocked";
    default:
      return "starved";
  }
}
}  // namespace

Bridge::Bridge(ipc::Segment& seg, BridgeConfig cfg, std::function<RingHealth()> health)
    : seg_(seg),
      cfg_(std::move(cfg)),
      health_(std::move(health)),
      sched_(with_inflight(cfg_.limits, seg), cfg_.n_blocks, cfg_.block_size, cfg_.eos_ids,
             cfg_.sliding),
      specs_(seg.grammar_table()) {
  KV_CHECK(cfg_.limits.max_rows <= seg_.dims().max_rows &&
               cfg_.limits.max_tokens <= seg_.dims().max_tokens,
           "bridge: limits exceed the segment's widths");
  const bool sliding = cfg_.sliding.window > 0 && cfg_.sliding.n_blocks > 0;
  KV_CHECK((seg_.dims().tables == 2) == sliding,
           "bridge: the segment carries {} tables a row, the sliding group is {}",
           seg_.dims().tables, sliding ? "on" : "off");
  slots_.resize(size_t(seg_.dims().inflight));
  seed_base_ = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  {
    std::lock_guard lk(stats_mu_);
    stats_.blocks_total = stats_.blocks_free = cfg_.n_blocks;
    stats_.blocks_swa_total = stats_.blocks_swa_free = sched_.stats().blocks_swa_total;
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

// ---- the inbox (any thread) -----------------------------------------------------

// Runs on the caller's thread: reads only the configuration.
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
  if (r.n < 1 || r.n > kMaxChoices)
    return error_status(kInvalidArgument, "n: must be in 1..{} (got {})", kMaxChoices, r.n);
  if (r.cache_salt.size() > kMaxCacheSalt)
    return error_status(kInvalidArgument, "cache_salt: longer than {} bytes", kMaxCacheSalt);
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > kMaxLogprobs)
    return error_status(kInvalidArgument, "prompt_logprobs: must be in 0..{} (got {})",
                        kMaxLogprobs, r.prompt_logprobs);
  KV_RETURN_IF_ERROR(validate_sampling(r.sampling));
  if (r.logit_bias) KV_RETURN_IF_ERROR(validate_logit_bias(*r.logit_bias, cfg_.vocab));
  KV_RETURN_IF_ERROR(check_grammar(r));
  const int64_t need = int64_t(r.prompt.size()) + r.max_tokens;
  if (cfg_.context_length > 0 && need > cfg_.context_length)
    return error_status(kContextLength,
                        "prompt ({} tokens) + max_tokens ({}) exceed the model's context of {}",
                        r.prompt.size(), r.max_tokens, cfg_.context_length);
  // A lone sequence must always fit the pool: then preemption always makes
  // progress and nothing waits forever.
  const int64_t blocks = BlockManager::blocks_for(need, cfg_.block_size);
  if (blocks > cfg_.n_blocks || blocks > seg_.dims().max_table)
    return error_status(
        kContextLength,
        "prompt ({} tokens) + max_tokens ({}) need {} KV blocks; the cache holds {}",
        r.prompt.size(), r.max_tokens, blocks,
        std::min<int64_t>(cfg_.n_blocks, seg_.dims().max_table));
  // Its sliding group holds its window and its widest row at most.
  if (cfg_.sliding.window > 0 && cfg_.sliding.n_blocks > 0) {
    const int64_t swa = std::min<int64_t>(
        blocks, SlidingGroup::max_held(cfg_.sliding.window, cfg_.block_size, cfg_.limits.max_tokens));
    if (swa > cfg_.sliding.n_blocks)
      return error_status(kContextLength,
                          "prompt ({} tokens) + max_tokens ({}) need {} sliding-window KV blocks; "
                          "the cache holds {}",
                          r.prompt.size(), r.max_tokens, swa, cfg_.sliding.n_blocks);
  }
  return Status();
}

int32_t Bridge::max_sequence_tokens() const {
  const int64_t blocks = std::min<int64_t>(cfg_.n_blocks, seg_.dims().max_table);
  int64_t n = blocks * cfg_.block_size;
  if (cfg_.context_length > 0) n = std::min<int64_t>(n, cfg_.context_length);
  return int32_t(std::min<int64_t>(n, INT32_MAX));
}

// A structured-output spec must fit an entry of the segment's grammar table
// (one with no table: this instance serves no structured outputs).
Status Bridge::check_grammar(const GenRequest& r) const {
  if (!r.grammar) return Status();
  if (!specs_.enabled())
    return Status(ErrorCode::kInvalidArgument,
                  "structured outputs are not available on this instance (no grammar table)");
  if (r.grammar->size() > specs_.capacity())
    return error_status(ErrorCode::kInvalidArgument,
                        "the structured-output spec is {} bytes; this instance takes at most {}",
                        r.grammar->size(), specs_.capacity());
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
  if (!req.sampling.has_seed) {
    // Reproducible per request, independent of batching (stages/sampler.h).
    req.sampling.seed = seed_base_ + 0x9E3779B97F4A7C15ull * ++seed_counter_;
    req.sampling.has_seed = 1;
  }
  RequestId id;
  {
    std::lock_guard lk(inbox_mu_);
    // queued_ counts this request from now until the engine thread sees it
    // leave the queue, so concurrent submissions can never overshoot the
    // bound (a count read from the stats lagged the inbox -> queue move).
    if (queued_ >= size_t(std::max(cfg_.max_queue, 0)))
      return refuse(
          error_status(ErrorCode::kQueueFull, "queue full ({} requests waiting)", cfg_.max_queue));
    id = next_id_++;
    inbox_.push_back(Pending{id, std::move(req), std::move(sink)});
    queued_++;
  }
  seg_.ring(seg_.n_stages()).not_empty.ring();
  return id;
}

void Bridge::cancel(RequestId id) {
  {
    std::lock_guard lk(inbox_mu_);
    cancels_.push_back(Cancel{id, -1});
  }
  seg_.ring(seg_.n_stages()).not_empty.ring();
}

void Bridge::stop_choice(RequestId id, int32_t index) {
  {
    std::lock_guard lk(inbox_mu_);
    cancels_.push_back(Cancel{id, index});
  }
  seg_.ring(seg_.n_stages()).not_empty.ring();
}

void Bridge::take_inbox() {
  std::vector<Pending> in;
  std::vector<Cancel> cancels;
  {
    std::lock_guard lk(inbox_mu_);
    in.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (Pending& p : in) sched_.add(p.id, std::move(p.req), std::move(p.sink));
  for (const Cancel& c : cancels) {
    if (c.index < 0)
      sched_.abort(c.id);
    else
      sched_.abort_choice(c.id, c.index);
  }
}

// ---- stats --------------------------------------------------------------------

EngineStats Bridge::stats() const {
  std::lock_guard lk(stats_mu_);
  return stats_;
}

void Bridge::publish_stats() {
  const SchedulerStats s = sched_.stats();
  {
    std::lock_guard lk(inbox_mu_);
    queued_ = inbox_.size() + size_t(s.waiting);
  }
  std::lock_guard lk(stats_mu_);
  stats_.waiting = s.waiting;
  stats_.running = s.running;
  stats_.blocks_free = s.blocks_free;
  stats_.blocks_swa_total = s.blocks_swa_total;
  stats_.blocks_swa_free = s.blocks_swa_free;
  stats_.kv_slots_used = s.kv_slots_used;
  stats_.kv_waste = s.kv_waste;
  stats_.preemptions = s.preemptions;
  stats_.requeued = s.requeued;
  stats_.tokens_generated = s.tokens_generated;
  stats_.tokens_prompt = s.tokens_prompt;
  stats_.timing = s.timing;
  cost_ = s.cost;
  stats_.prefix_caching = cfg_.limits.prefix_caching;
  stats_.blocks_cached = s.blocks_cached;
  stats_.blocks_evictable = s.blocks_evictable;
  stats_.blocks_swa_cached = s.blocks_swa_cached;
  stats_.blocks_swa_evictable = s.blocks_swa_evictable;
  stats_.prefix_queries = s.prefix_queries;
  stats_.prefix_hits = s.prefix_hits;
  stats_.prefix_resets = s.prefix_resets;
  stats_.spec_method = s.spec_method;
  stats_.spec_drafts = s.spec.drafts;
  stats_.spec_proposed = s.spec.proposed;
  stats_.spec_accepted = s.spec.accepted;
  stats_.spec_zero_by_acceptance = s.spec.zero_by_acceptance;
  stats_.spec_zero_by_cost = s.spec.zero_by_cost;
  stats_.spec_probes = s.spec.probes;
  stats_.spec_forced_drafts = s.spec.forced_drafts;
  stats_.spec_forced_proposed = s.spec.forced_proposed;
  stats_.spec_forced_accepted = s.spec.forced_accepted;
}

namespace {

// One process's counters as of now (ipc::read_stage_time: the running part
// of its phase included).
StageReport stage_report(const ipc::StageShared& sh, const ipc::StagePlan& plan) {
  const ipc::StageTime t = ipc::read_stage_time(sh);
  StageReport one;
  one.first_layer = plan.first;
  one.last_layer = plan.last;
  one.device = std::string(plan.device, strnlen(plan.device, sizeof plan.device));
  one.simd = ipc::read_stage_simd(sh);
  one.busy_s = double(t.busy_ns) / 1e9;
  one.starved_s = double(t.starved_ns) / 1e9;
  one.blocked_s = double(t.blocked_ns) / 1e9;
  one.state = phase_name(t);
  one.state_s = double(t.in_phase_ns) / 1e9;
  one.batches = sh.stats.batches.load();
  one.tokens = sh.stats.tokens.load();
  one.refused = sh.stats.refused.load();
  one.handoff_s = double(sh.stats.handoff_ns.load()) / 1e9;
  one.handoffs = sh.stats.handoffs.load();
  ipc::ExpertLoad load = ipc::read_stage_experts(sh);
  one.n_experts = load.n_experts;
  one.experts_per_slot = load.per_slot;
  one.routed = std::move(load.routed);
  return one;
}

}  // namespace

RingReport Bridge::ring_report() const {
  RingReport r;
  r.inflight = int32_t(seg_.dims().inflight);
  r.in_ring = in_ring_.load(std::memory_order_relaxed);
  r.return_s = double(return_ns_.load()) / 1e9;
  r.returns = returns_.load();
  const ipc::SegmentParams& p = seg_.params();
  std::vector<StageCost> cost;
  {
    std::lock_guard lk(stats_mu_);
    cost = cost_;
  }
  // Each stage as of the instant it is read, the running part of its phase
  // included: its shares partition the time whatever a batch's length.
  // Then the expert groups' members, each with its position and index.
  for (int s = 0; s < seg_.n_stages() + seg_.n_members(); ++s) {
    const bool member = s >= seg_.n_stages();
    const ipc::StagePlan& plan = member ? p.members[s - seg_.n_stages()].plan : p.stages[s];
    StageReport one = stage_report(member ? seg_.member(s - seg_.n_stages()) : seg_.stage(s), plan);
    one.index = s;
    one.position = member ? p.members[s - seg_.n_stages()].position : s;
    one.member = member ? p.members[s - seg_.n_stages()].index : 0;
    if (!member && size_t(s) < cost.size()) one.cost = cost[size_t(s)];
    if (!member && plan.experts_first >= 0) {
      one.group_firsts.push_back(plan.experts_first);
      for (int m = 0; m < seg_.n_members(); ++m)
        if (p.members[m].position == s) one.group_firsts.push_back(p.members[m].plan.experts_first);
    }
    r.stages.push_back(std::move(one));
  }
  return r;
}

// ---- the head: batches in -------------------------------------------------------

bool Bridge::submit_batch() {
  auto slot_it = std::find_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.busy; });
  if (slot_it == slots_.end()) return false;
  RingLoad load;
  for (const Slot& s : slots_) {
    if (s.busy)
      load.tokens_in_flight += s.out.n_tokens();
    else
      load.free_slots++;
  }
  SchedulerOutput out = sched_.schedule(load);
  if (out.empty()) return false;
  const uint32_t k = uint32_t(slot_it - slots_.begin());
  const uint64_t batch_id = next_batch_id_++;
  encode(k, batch_id, out);
  ipc::BatchMsg m;
  m.batch_id = batch_id;
  m.slot = k;
  m.n_rows = int32_t(out.rows.size());
  m.n_tokens = int32_t(out.n_tokens());
  slot_it->busy = true;
  in_ring_.fetch_add(1, std::memory_order_relaxed);
  slot_it->batch_id = batch_id;
  slot_it->out = std::move(out);
  slot_it->submit_ns = ipc::now_ns();
  m.sent_ns = slot_it->submit_ns;
  // Never full: at most `inflight` batches exist and the ring holds that many.
  return seg_.ring(0).push(m, [&] { return stopping_.load(); });
}

// Writes a batch into descriptor `slot`, row by row as the scheduler formed
// it, through enc_ (its buffers reused batch after batch).
void Bridge::encode(uint32_t slot, uint64_t batch_id, const SchedulerOutput& out) {
  const ipc::SlotDims& d = seg_.dims();
  uint64_t oldest = batch_id;  // the oldest batch in the ring: its grammar entries are taken
  for (const Slot& s : slots_)
    if (s.busy) oldest = std::min(oldest, s.batch_id);
  encode_batch(out, batch_id, d.max_table, enc_, d.tables);
  for (size_t r = 0; r < out.rows.size(); ++r)
    if (out.rows[r].grammar)
      std::tie(enc_.sampling[r].grammar_entry, enc_.sampling[r].grammar_id) =
          specs_.place(*out.rows[r].grammar, batch_id, oldest);
  ipc::write_desc(seg_.desc(slot), enc_, d);
}

// ---- the tail: results out ------------------------------------------------------

bool Bridge::read_results() {
  bool any = false;
  ipc::BatchMsg m;
  ipc::Ring& ring = seg_.ring(seg_.n_stages());
  while (ring.try_pop(m)) {
    any = true;
    const int64_t now = ipc::now_ns();
    if (m.sent_ns > 0 && m.sent_ns <= now && now - m.sent_ns < 60'000'000'000) {
      return_ns_.fetch_add(uint64_t(now - m.sent_ns), std::memory_order_relaxed);
      returns_.fetch_add(1, std::memory_order_relaxed);
    }
    if (!accept(m)) continue;
    Slot& slot = slots_[m.slot];
    BatchResult result = decode(m, slot);
    const int64_t done = ipc::now_ns();
    result.cycle_s = double(done - slot.submit_ns) / 1e9;
    result.done_s = double(done) / 1e9;
    if (cfg_.batch_log) {
      BatchRecord rec;
      rec.batch = m.batch_id;
      rec.slot = m.slot;
      rec.submit_s = double(slot.submit_ns) / 1e9;
      rec.done_s = result.done_s;
      rec.counts = count_batch(slot.out);
      rec.stage_busy_s = result.stage_busy_s;
      rec.ok = result.status.ok();
      rec.error = result.status.code();
      cfg_.batch_log->write(rec);
    }
    slot.busy = false;
    in_ring_.fetch_sub(1, std::memory_order_relaxed);
    slot.out = {};
    sched_.update(result);
  }
  return any;
}

// Whether a message answers the batch outstanding in its slot. Anything else
// is dropped: a result of a dead epoch (its slot was freed at the loss), or
// one that names a slot, batch or row count the bridge did not submit.
bool Bridge::accept(const ipc::BatchMsg& m) {
  if (seg_.stale(m.batch_id)) return false;
  if (m.kind != ipc::kMsgBatch || m.version != ipc::kMsgVersion ||
      m.slot >= uint32_t(slots_.size()) || !slots_[m.slot].busy ||
      slots_[m.slot].batch_id != m.batch_id ||
      m.n_rows != int32_t(slots_[m.slot].out.rows.size())) {
    refused_results_++;
    KV_LOG_WARN("bridge", "refused a result (batch {}, slot {})", m.batch_id, m.slot);
    return false;
  }
  return true;
}

// The result slot of an accepted message, read into a BatchResult. The
// stages are not trusted here either: a result header that disagrees with
// its message fails the batch, a sampled token outside the vocabulary
// fails its request (kBadResult).
BatchResult Bridge::decode(const ipc::BatchMsg& m, const Slot& slot) const {
  BatchResult res;
  res.batch = slot.out.id;
  ipc::ResultView view = seg_.result(m.slot);
  ipc::ResultHeader hdr;
  std::memcpy(&hdr, view.hdr, sizeof hdr);
  if (m.status != int32_t(ErrorCode::kOk)) {
    std::string text(hdr.error, strnlen(hdr.error, sizeof hdr.error));
    res.status = Status(error_code_from_int(m.status), text.empty() ? "batch failed" : text);
    return res;
  }
  if (hdr.batch_id != m.batch_id || hdr.n_rows != m.n_rows) {
    res.status = Status(ErrorCode::kBadResult, "result slot does not match its message");
    return res;
  }
  // The stages' busy times on the batch, for the cost model; a time past an
  // hour is no measurement (0: the model skips it).
  res.stage_busy_s.assign(size_t(seg_.n_stages()), 0.0);
  for (int s = 0; s < seg_.n_stages() && s < ipc::kMaxStageTimes; ++s)
    if (hdr.stage_busy_ns[s] < 3'600'000'000'000ull)
      res.stage_busy_s[size_t(s)] = double(hdr.stage_busy_ns[s]) / 1e9;
  res.rows.resize(slot.out.rows.size());
  int64_t t0 = 0;  // the row's first token index
  for (size_t r = 0; r < slot.out.rows.size(); ++r) {
    const ScheduledRow& row = slot.out.rows[r];
    RowResult& out = res.rows[r];
    if (row.prompt_logprobs >= 0) out.prompt = prompt_records(view, row, t0);
    t0 += row.n_tokens;
    if (!row.sample) continue;
    out.token = view.token[r];
    if (out.token == ipc::kTokenGrammarRefused) {  // the request's spec: a 400, not a 500
      out.error = error_status(ErrorCode::kInvalidArgument,
                               "the structured-output spec allows no continuation of the output "
                               "here (or it could not be compiled within grammar.compile_timeout)");
      continue;
    }
    if (out.token < 0 || out.token >= cfg_.vocab) {
      out.error = error_status(ErrorCode::kBadResult, "the tail returned token id {}", out.token);
      continue;
    }
    out.logprob = view.logprob[r];
    const int32_t n_top = std::clamp(view.n_top[r], 0, int32_t(kMaxLogprobs));
    for (int32_t i = 0; i < n_top && i < row.sampling.logprobs; ++i)
      out.top_logprobs.emplace_back(view.top[r * kMaxLogprobs + i].token,
                                    view.top[r * kMaxLogprobs + i].logprob);
    if (row.n_draft > 0) out.error = draft_records(view, row, t0 - row.n_tokens, out);
    if (row.grammar) out.forced = forced_record(view, int32_t(r));
  }
  return res;
}

// The tokens a drafting row emitted past its first, from the records at
// its drafts' token indices (row from t0). Untrusted: a token is emitted
// only if the one before it equals the draft it verified (the acceptance
// rule), and must lie in the vocabulary; anything else fails the request
// (kBadResult), as a bad first token does.
Status Bridge::draft_records(const ipc::ResultView& view, const ScheduledRow& row, int64_t t0,
                             RowResult& out) const {
  const int32_t first = row.n_tokens - row.n_draft;  // d_1's index in the row
  int32_t prev = out.token;
  for (int32_t j = 0; j < row.n_draft; ++j) {
    ipc::DraftRecord rec;
    std::memcpy(&rec, &view.draft[t0 + first + j], sizeof rec);
    if (rec.token < 0) break;
    if (prev != row.tokens[size_t(first + j)] || rec.token >= cfg_.vocab)
      return error_status(ErrorCode::kBadResult,
                          "the tail emitted token {} after a rejected draft (or outside the "
                          "vocabulary)",
                          rec.token);
    SampledToken t{rec.token, rec.logprob, {}};
    const int32_t n_top = std::clamp(rec.n_top, 0, int32_t(kMaxLogprobs));
    for (int32_t i = 0; i < n_top && i < row.sampling.logprobs; ++i)
      t.top_logprobs.emplace_back(rec.top[i].token, rec.top[i].logprob);
    out.more.push_back(std::move(t));
    prev = rec.token;
  }
  return Status();
}

// A constrained row's grammar-forced tokens. Untrusted, but only drafts:
// the count is clamped and the list cut at the first id outside the
// vocabulary (the tail verifies whatever is drafted).
std::vector<int32_t> Bridge::forced_record(const ipc::ResultView& view, int32_t r) const {
  ipc::ForcedRecord rec;
  std::memcpy(&rec, &view.forced[r], sizeof rec);
  std::vector<int32_t> out;
  for (int32_t i = 0; i < std::clamp(rec.n, 0, int32_t(ipc::kMaxForced)); ++i) {
    if (rec.token[i] < 0 || rec.token[i] >= cfg_.vocab) break;
    out.push_back(rec.token[i]);
  }
  return out;
}

// The prompt logprobs a row asked for, from the records at its token
// indices (from t0). Untrusted: a record must name the position its index
// scores, its token must be the prompt's, and its numbers in range;
// anything else is left out (the API then reports fewer positions).
std::vector<PromptLogprob> Bridge::prompt_records(const ipc::ResultView& view,
                                                  const ScheduledRow& row, int64_t t0) const {
  std::vector<PromptLogprob> out;
  for (int32_t i = 0; i < row.n_tokens; ++i) {
    ipc::PromptRecord rec;
    std::memcpy(&rec, &view.prompt[t0 + i], sizeof rec);
    const int32_t pos = row.pos0 + i + 1;
    if (pos >= row.n_prompt) break;
    const int32_t want = i + 1 < row.n_tokens ? row.tokens[size_t(i) + 1] : row.next_token;
    if (rec.position != pos || rec.token != want || rec.rank < 1 || !(rec.logprob <= 0.f)) continue;
    PromptLogprob p{pos, rec.token, rec.logprob, rec.rank, {}};
    const int32_t n_top =
        std::clamp(rec.n_top, 0, std::min<int32_t>(kMaxLogprobs, row.prompt_logprobs));
    for (int32_t j = 0; j < n_top; ++j)
      if (rec.top[j].token >= 0 && rec.top[j].token < cfg_.vocab)
        p.top.emplace_back(rec.top[j].token, rec.top[j].logprob);
    out.push_back(std::move(p));
  }
  return out;
}

// ---- health, epochs, recovery ---------------------------------------------------

// The supervisor gave up: every request fails with its reason, new work is
// refused (ready() turns false) for good.
void Bridge::fail(const std::string& why) {
  {
    std::lock_guard lk(stats_mu_);
    failure_ = why;
  }
  failed_ = true;
  sched_.end_all(FinishReason::kError, Status(ErrorCode::kUnavailable, why));
}

// Every batch in the ring is lost with the stage (and every stage's KV is
// suspect: the restarted one starts empty). A new epoch begins at the next
// batch id: every receiver drops anything older. The scheduler then
// requeues every running sequence by its one preemption rule (recompute
// from prompt plus the tokens already streamed: nothing is re-sent, and the
// sampler's draw depends on (seed, position) only, so the text continues
// exactly).
void Bridge::invalidate(uint64_t faults) {
  seg_.header().epoch_first_batch.store(next_batch_id_, std::memory_order_release);
  // The acknowledgement the supervisor waits for before it restarts a stage:
  // a new process must never see a batch of the dead epoch as live.
  seg_.header().epoch.store(uint32_t(faults), std::memory_order_release);
  for (Slot& slot : slots_) {
    slot.busy = false;
    slot.out = {};
  }
  in_ring_.store(0, std::memory_order_relaxed);
  sched_.requeue_all();
  publish_stats();
}

void Bridge::check_health() {
  if (!health_ || failed_) return;
  RingHealth h = health_();
  if (!h.failed.empty()) {
    fail(h.failed);
    std::lock_guard lk(stats_mu_);
    stats_.state = EngineState::kFailed;
    stats_.failure = h.failed;
    stats_.degraded = false;
    stats_.restarts = h.restarts;
    stats_.faults = int64_t(h.faults);
    stats_.last_fault = h.last_fault;
    stats_.links = h.links;
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
  stats_.last_fault = h.last_fault;
  stats_.links = std::move(h.links);
  stats_.degraded = recovering_;
  stats_.state = recovering_ ? EngineState::kRecovering : EngineState::kOk;
  if (resumed) {
    stats_.last_recovery_s = double(ipc::now_ns() - fault_ns_) / 1e9;
    KV_LOG_INFO("bridge", "recovered in {:.3f} s", stats_.last_recovery_s);
  }
}

// ---- the engine thread ----------------------------------------------------------

void Bridge::loop() {
  ipc::Bell& bell = seg_.ring(seg_.n_stages()).not_empty;
  while (!stopping_.load()) {
    uint32_t seen = bell.seen();
    check_health();
    take_inbox();
    if (failed_) {
      sched_.end_all(FinishReason::kError, Status(ErrorCode::kUnavailable, failure()));
      bell.wait(seen, 100'000'000);
      continue;
    }
    bool progress = read_results();
    // While recovering nothing enters the ring: the drain check needs it
    // quiet, and the restarted stage is not ready. Requests wait meanwhile.
    // The next batch goes in before the stats are published: a single
    // stream's tokens wait on this path.
    bool submitted = false;
    if (!recovering_)
      while (submit_batch()) submitted = true;
    publish_stats();
    // Recovering: re-check the drain soon (stages ring no bell for it).
    // Serving, the wait is for the next result: spun as the stages spin for
    // their batches ([plan] spin_us), so that the ring's last hand-off, the
    // tail's result to the next submission, does not wait for a core either.
    if (!progress && !submitted) {
      if (recovering_)
        bell.wait(seen, 10'000'000);
      else
        bell.await(seen, ipc::WaitPolicy{seg_.params().spin_ns, 100'000'000});
    }
  }
  sched_.end_all(FinishReason::kAbort);
}

}  // namespace kvasir
