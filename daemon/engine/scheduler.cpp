#include "daemon/engine/scheduler.h"

#include <algorithm>

#include "base/check.h"
#include "base/log.h"

namespace kvasir {

std::optional<Policy> parse_policy(std::string_view name) {
  if (name == "naive") return Policy::kNaive;
  if (name == "static") return Policy::kStatic;
  if (name == "continuous") return Policy::kContinuous;
  if (name == "continuous+chunked") return Policy::kChunked;
  return std::nullopt;
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kNaive:
      return "naive";
    case Policy::kStatic:
      return "static";
    case Policy::kContinuous:
      return "continuous";
    case Policy::kChunked:
      return "continuous+chunked";
  }
  return "?";
}

Scheduler::Scheduler(SchedLimits lim, int32_t n_blocks, int32_t block_size,
                     std::vector<int32_t> eos_ids)
    : lim_(lim),
      blocks_(n_blocks, block_size),
      eos_(eos_ids.begin(), eos_ids.end()),
      cap_(lim_, q_, blocks_),
      form_(lim_) {}

// ---- requests in and out ------------------------------------------------------

void Scheduler::add(RequestId id, GenRequest req, EventSink sink) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->tokens = req.prompt;
  s->n_prompt = int32_t(req.prompt.size());
  s->req = std::move(req);
  s->sink = std::move(sink);
  q_.waiting.push_back(s.get());
  const bool fresh = seqs_.emplace(id, std::move(s)).second;
  KV_CHECK(fresh, "scheduler: request {} added twice", id);
}

void Scheduler::abort(RequestId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second->done) return;
  finish(it->second.get(), FinishReason::kAbort);
  reap();
}

// Sends the final event (none for kNone: the last token's event carried it).
// The sequence's blocks go back once no batch in flight still names them
// (reap): a stage may still be writing them.
void Scheduler::finish(Sequence* s, FinishReason why, Status error) {
  if (s->done) return;
  s->done = true;
  if (why != FinishReason::kNone && s->sink) {
    TokenEvent ev;
    ev.finish = why;
    ev.error = std::move(error);
    s->sink(ev);
  }
}

// Frees what finished sequences held, once nothing in flight names them:
// finished waiters leave the queue, finished running sequences give their
// blocks back (in admission order), and both are forgotten.
void Scheduler::reap() {
  std::erase_if(q_.waiting, [](const Sequence* s) { return s->done; });
  for (auto it = q_.running.begin(); it != q_.running.end();) {
    Sequence* s = *it;
    if (s->done && s->batches_in_flight == 0) {
      blocks_.release(s->table);
      s->running = false;
      it = q_.running.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(seqs_, [&](const auto& kv) {
    const Sequence& s = *kv.second;
    if (!s.done || s.running || s.batches_in_flight > 0) return false;
    if (!s.table.empty()) blocks_.release(kv.second->table);  // never: a waiter holds none
    return true;
  });
}

void Scheduler::end_all(FinishReason why, const Status& error) {
  for (auto& [id, s] : seqs_) {
    finish(s.get(), why, error);
    blocks_.release(s->table);
  }
  seqs_.clear();
  q_.waiting.clear();
  q_.running.clear();
  inflight_.clear();
}

// ---- the decision -------------------------------------------------------------

SchedulerOutput Scheduler::schedule(RingLoad load) {
  // Admission first, so the row cap sees everyone who wants the ring.
  cap_.admit_waiting();
  begin_batch(load);
  std::vector<SchedRow> rows;
  // Decodes first: their latency is what users feel, and chunked prefill
  // fills the rest of the budget. A copy: preemption edits the running set.
  const std::vector<Sequence*> order = q_.running;
  for (Sequence* s : order)
    if (s->running && s->remaining() == 1 && s->padding() == 0) take(rows, s);
  // Then prefill (whole or chunks), oldest admission first.
  for (Sequence* s : order)
    if (s->running && (s->remaining() > 1 || s->padding() > 0)) take(rows, s);
  return emit(std::move(rows));
}

// The work at hand: every token the running sequences could send now (a
// prefill chunk may follow its predecessor through the ring, so a whole
// remaining prompt counts). Whole-prefill policies cannot cut a prompt that
// fits a micro-batch: the largest such is the budget's floor.
void Scheduler::begin_batch(RingLoad load) {
  int64_t active = 0, work = 0, floor = 0;
  for (const Sequence* s : q_.running) {
    if (s->done) continue;
    active++;
    if (!s->schedulable()) continue;
    work += s->remaining() + s->padding();
    if (lim_.policy != Policy::kChunked && s->remaining() <= lim_.max_tokens)
      floor = std::max(floor, s->remaining());
  }
  form_.begin(active, work, load, floor);
}

bool Scheduler::take(std::vector<SchedRow>& rows, Sequence* s) {
  if (form_.full(rows)) return false;
  const int32_t n = form_.want(*s);
  if (n <= 0) return false;
  const int64_t end = s->padding() > 0 ? s->pad_next + n : s->n_scheduled + n;
  if (!cap_.grow(s, end, rows)) return false;
  form_.add(rows, s, n);
  return true;
}

// The formed batch as plain rows (copies: the bridge keeps them while the
// batch is in the ring), now in flight. Tables are copied once the whole
// batch is formed: a row's sequence is never preempted by a later row of
// its own batch, so its table no longer changes.
SchedulerOutput Scheduler::emit(std::vector<SchedRow> rows) {
  SchedulerOutput out;
  if (rows.empty()) return out;
  out.id = next_batch_++;
  out.rows.reserve(rows.size());
  for (const SchedRow& r : rows) {
    Sequence* s = r.seq;
    ScheduledRow o;
    o.id = s->id;
    o.pos0 = r.pos0;
    o.n_tokens = r.n_tokens;
    o.sample = r.sample;
    o.pad = r.pad;
    o.n_prompt = s->n_prompt;
    if (r.pad)  // the filler: any valid id will do
      o.tokens.assign(size_t(r.n_tokens), s->tokens.back());
    else
      o.tokens.assign(s->tokens.begin() + r.pos0, s->tokens.begin() + r.pos0 + r.n_tokens);
    o.table = s->table;
    o.sampling = s->req.sampling;
    o.grammar = s->req.grammar;
    s->batches_in_flight++;
    if (!r.pad && r.pos0 < s->n_prompt)
      tokens_prompt_ += std::min(r.n_tokens, s->n_prompt - r.pos0);
    out.rows.push_back(std::move(o));
  }
  inflight_.emplace(out.id, std::move(rows));
  return out;
}

// ---- results ------------------------------------------------------------------

void Scheduler::update(const BatchResult& result) {
  auto it = inflight_.find(result.batch);
  if (it == inflight_.end()) {
    KV_LOG_WARN("scheduler", "result for batch {}, which is not in flight: ignored", result.batch);
    return;
  }
  const std::vector<SchedRow> rows = std::move(it->second);
  inflight_.erase(it);
  KV_CHECK(!result.status.ok() || result.rows.size() == rows.size(),
           "scheduler: batch {} has {} rows, its result {}", result.batch, rows.size(),
           result.rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    if (result.status.ok()) {
      apply_row(rows[r], result.rows[r]);
      continue;
    }
    rows[r].seq->batches_in_flight--;
    finish(rows[r].seq, FinishReason::kError, result.status);
  }
  reap();
}

void Scheduler::apply_row(const SchedRow& row, const RowResult& res) {
  Sequence* s = row.seq;
  s->batches_in_flight--;
  if (!row.sample) return;
  s->awaiting = false;
  if (s->done) return;  // aborted while in flight
  if (!res.error.ok()) {
    finish(s, FinishReason::kError, res.error);
    return;
  }
  TokenEvent ev;
  ev.token = res.token;
  ev.logprob = res.logprob;
  ev.top_logprobs = res.top_logprobs;
  s->tokens.push_back(res.token);
  s->n_generated++;
  tokens_generated_++;
  const std::vector<int32_t>& stop = s->req.stop_ids;
  if ((!s->req.ignore_eos && eos_.count(res.token)) ||
      std::find(stop.begin(), stop.end(), res.token) != stop.end())
    ev.finish = FinishReason::kStop;
  else if (s->n_generated >= s->req.max_tokens)
    ev.finish = FinishReason::kLength;
  if (s->sink) s->sink(ev);
  if (ev.finish != FinishReason::kNone) finish(s, FinishReason::kNone);  // the event said it
}

// ---- a lost stage -------------------------------------------------------------

void Scheduler::requeue_all() {
  // Every batch in the ring is lost with the stage, and every stage's KV is
  // suspect (the restarted one starts empty): nothing in flight will come
  // back, and every running sequence is recomputed, not only those in flight.
  for (auto& [id, rows] : inflight_)
    for (const SchedRow& r : rows) {
      r.seq->batches_in_flight--;
      r.seq->awaiting = false;
    }
  inflight_.clear();
  std::vector<Sequence*> requeue;
  for (Sequence* s : q_.running)
    if (!s->done) requeue.push_back(s);
  // Newest first to the head of the queue: the oldest admission ends first
  // in line, and they keep their order ahead of the requests still waiting.
  std::sort(requeue.begin(), requeue.end(),
            [](const Sequence* a, const Sequence* b) { return a->admitted > b->admitted; });
  for (Sequence* s : requeue) cap_.preempt(s, PreemptCause::kStageLost);
  reap();  // sequences that had finished and only waited for their batches
}

// ---- stats --------------------------------------------------------------------

SchedulerStats Scheduler::stats() const {
  SchedulerStats st;
  st.waiting = int32_t(q_.waiting.size());
  st.running = int32_t(q_.running.size());
  st.blocks_total = blocks_.total();
  st.blocks_free = blocks_.free();
  // Live KV accounting: slots allocated vs positions written (or being
  // written); the difference is the unused tail of each last block (and,
  // under `static`, the padding).
  int64_t slots = 0;
  for (const Sequence* s : q_.running) {
    const int64_t n = int64_t(s->table.size()) * blocks_.block_size();
    slots += n;
    st.kv_slots_used += std::min<int64_t>(n, s->n_scheduled);
  }
  for (const Sequence* s : q_.waiting) slots += int64_t(s->table.size()) * blocks_.block_size();
  st.kv_waste = slots - st.kv_slots_used;
  st.preemptions = cap_.preemptions();
  st.requeued = cap_.requeued();
  st.tokens_generated = tokens_generated_;
  st.tokens_prompt = tokens_prompt_;
  return st;
}

}  // namespace kvasir
