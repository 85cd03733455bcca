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

namespace {
SchedLimits checked(SchedLimits lim) {
  // `static` models a padded batcher, whose every member computes the
  // batch's longest prompt; reusing cached blocks would make it something
  // else. The config refuses the pair (daemon/config); this is the backstop.
  KV_CHECK_CODE(!(lim.prefix_caching && lim.policy == Policy::kStatic), ErrorCode::kInvalidArgument,
                "scheduler: prefix caching does not apply to the static policy");
  return lim;
}
}  // namespace

Scheduler::Scheduler(SchedLimits lim, int32_t n_blocks, int32_t block_size,
                     std::vector<int32_t> eos_ids, SlidingKv sliding)
    : lim_(checked(lim)),
      // Both groups cache; a hit needs both (hybrid_cache.h).
      blocks_(n_blocks, block_size, lim_.prefix_caching),
      swa_(sliding.window, sliding.n_blocks, block_size, lim_.prefix_caching),
      cache_(blocks_, swa_),
      eos_(eos_ids.begin(), eos_ids.end()),
      cap_(lim_, q_, blocks_, swa_, cache_),
      time_(lim_),
      form_(lim_, time_.cost()),
      drafter_(lim_.spec.enabled() ? make_drafter(lim_.spec) : nullptr) {}

// ---- requests in and out ------------------------------------------------------

void Scheduler::add(RequestId id, GenRequest req, EventSink sink) {
  const int32_t n = std::clamp(req.n, 1, kMaxChoices);
  for (int32_t i = 0; i < n; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = id;
    s->index = i;
    s->tokens = req.prompt;
    s->n_prompt = int32_t(req.prompt.size());
    s->req = i + 1 < n ? req : std::move(req);
    s->req.sampling.seed += uint64_t(i);  // choice i: the single request with seed + i
    s->sink = sink;
    q_.waiting.push_back(s.get());
    const bool fresh = seqs_.emplace(s->key(), std::move(s)).second;
    KV_CHECK(fresh, "scheduler: request {} added twice", id);
  }
}

void Scheduler::abort(RequestId id) {
  for (int32_t i = 0; i < kMaxChoices; ++i) {
    auto it = seqs_.find(sequence_key(id, i));
    if (it != seqs_.end()) finish(it->second.get(), FinishReason::kAbort);
  }
  reap();
}

void Scheduler::abort_choice(RequestId id, int32_t index) {
  if (index < 0 || index >= kMaxChoices) return;
  auto it = seqs_.find(sequence_key(id, index));
  if (it == seqs_.end()) return;
  finish(it->second.get(), FinishReason::kAbort);
  reap();
}

// Every event names its choice and what its first lookup found in the cache.
void Scheduler::send(Sequence* s, TokenEvent ev) {
  if (!s->sink) return;
  ev.index = s->index;
  ev.cached_tokens = std::max(s->cached_tokens, 0);
  s->sink(ev);
}

// Sends the final event (none for kNone: the last token's event carried it).
// The sequence's blocks go back once no batch in flight still names them
// (reap): a stage may still be writing them.
void Scheduler::finish(Sequence* s, FinishReason why, Status error) {
  if (s->finished()) return;
  end(s, why);
  if (why != FinishReason::kNone) {
    TokenEvent ev;
    ev.finish = why;
    ev.error = std::move(error);
    send(s, std::move(ev));
  }
}

// Frees what finished sequences held, once nothing in flight names them:
// finished waiters leave the queue, finished running sequences give their
// blocks back (in admission order), and both are forgotten.
void Scheduler::reap() {
  std::erase_if(q_.waiting, [](const Sequence* s) { return s->finished(); });
  for (auto it = q_.running.begin(); it != q_.running.end();) {
    Sequence* s = *it;
    if (s->finished() && s->batches_in_flight == 0) {
      cap_.release(s);
      it = q_.running.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(seqs_, [&](const auto& kv) {
    const Sequence& s = *kv.second;
    // (A finished sequence still in the running set has a batch in flight.)
    if (!s.finished() || s.batches_in_flight > 0) return false;
    if (!s.table.empty()) cap_.release(kv.second.get());  // never: a waiter holds none
    return true;
  });
}

void Scheduler::end_all(FinishReason why, const Status& error) {
  for (auto& [id, s] : seqs_) {
    finish(s.get(), why, error);
    cap_.release(s.get());
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
  // Someone waits though the policy and max_num_seqs would let more in: no
  // KV room. What kvasir diagnose reads as admission waits.
  if ((lim_.policy == Policy::kContinuous || lim_.policy == Policy::kChunked) &&
      !q_.waiting.empty() && q_.running.size() < size_t(lim_.max_num_seqs))
    admission_waits_++;
  begin_batch(load);
  std::vector<SchedRow> rows;
  // Decodes first: their latency is what users feel, and chunked prefill
  // fills the rest of the budget. A copy: preemption edits the running set.
  const std::vector<Sequence*> order = q_.running;
  for (Sequence* s : order)
    if (s->running() && s->remaining() == 1 && s->padding() == 0) take(rows, s);
  // Their drafts, once every decode is in: each row's k is weighed against
  // the batch it is in (docs/speculative.md).
  add_drafts(rows);
  // Then prefill (whole or chunks), oldest admission first.
  for (Sequence* s : order)
    if (s->running() && (s->remaining() > 1 || s->padding() > 0)) take(rows, s);
  return emit(std::move(rows));
}

// The work at hand: every token the running sequences could send now (a
// prefill chunk may follow its predecessor through the ring, so a whole
// remaining prompt counts). Whole-prefill policies cannot cut a prompt that
// fits a micro-batch: the largest such is the budget's floor.
// A sequence about to start counts only what its cached prefix leaves: a
// whole prefill that fits once the hit is taken must find a budget that
// holds it.
void Scheduler::begin_batch(RingLoad load) {
  int64_t work = 0, floor = 0;
  RunningSet set;
  for (Sequence* s : q_.running) {
    if (s->finished()) continue;
    set.running++;
    set.positions += int64_t(s->tokens.size());
    if (s->decoding()) set.decoding++;
    if (!s->schedulable()) continue;
    const int64_t rem = s->remaining() - cap_.reusable(s);
    work += rem + s->padding();
    // A decode may carry drafts; none are reserved in the share. A
    // reservation the rows mostly leave unused (a compute-bound batch drafts
    // little) would make the share larger than the decodes, and the first
    // micro-batch would take them all and leave the next slot empty (16
    // concurrent ran at 0.93x without speculation so); and a lone decode's
    // share, split over the micro-batches in flight, held a fixed length to
    // half of it. Drafts go on top of the share, within max_tokens and the
    // step budget (add_drafts).
    if (lim_.policy != Policy::kChunked && rem <= lim_.max_tokens) floor = std::max(floor, rem);
  }
  form_.begin(set.running, work, load, floor, time_.step_budget(set));
  if (set.decoding == 0) form_.cap_tokens(time_.pipeline_piece(work));
}

// One row for s, if the batch and the pool have room. A sequence about to
// start (nothing held) first takes its cached prefix, so it asks only for
// the rest; if it cannot go after all, it gives the prefix back. The blocks
// its row fills are cached at once, pending on this batch (next_batch_):
// a later row, even of this batch, may reuse them (docs/scheduler.md).
bool Scheduler::take(std::vector<SchedRow>& rows, Sequence* s) {
  if (form_.full(rows) || waits_for_leader(s)) return false;
  const bool starting = s->table.empty() && s->n_scheduled == 0 && s->padding() == 0;
  const int64_t hit = starting ? cap_.reuse_prefix(s) : 0;
  const Fork fork = starting ? fork_from_leader(s) : Fork{};
  if (fork.src >= 0) s->n_scheduled = s->n_prompt - 1;  // the copy holds the rest but the last
  const int32_t n = form_.want(*s);
  const int64_t end = s->padding() > 0 ? s->pad_next + n : s->n_scheduled + n;
  if (n <= 0 || !cap_.grow(s, end, rows)) {
    if (starting && s->running()) cap_.undo_reuse(s);
    return false;
  }
  if (starting) cap_.count_lookup(s, hit);
  form_.add(rows, s, n);
  if (fork.src >= 0) {
    rows.back().copy_src = fork.src;
    rows.back().copy_dst = s->table[size_t(fork.index)];
    s->copy_writer = fork.writer;
  }
  if (s->prompt_batch == 0 && s->n_scheduled >= s->n_prompt) s->prompt_batch = next_batch_;
  cap_.cache_written(s, next_batch_);  // accepted positions only: drafts are not in n_scheduled
  return true;
}

// Speculative decoding (docs/speculative.md): a plain decode row (the
// sequence's last token alone, its next unknown) carries up to k drafts
// after it: k at most max_draft, the token budget, max_tokens (no draft
// could be emitted past it) and the blocks the pool has free now (a guess
// never preempts anyone). A constrained row drafts the grammar-forced
// tokens its last result brought, if any, else what the drafter proposes
// (the tail verifies both under the grammar). The rows are weighed in the
// batch's order, each against the batch as the rows before it left it:
// what it emits (expected) and what its step costs. Where the batch holds
// more than one decode, the drafts together may lengthen its step by
// max_step_growth at most (the ceiling, by step_cost): the rows that do not
// draft wait for the verified positions of those that do.
void Scheduler::add_drafts(std::vector<SchedRow>& rows) {
  if (!drafter_) return;
  double emitted = double(form_.shape().sampled);
  const double ceiling = form_.shape().decode_rows > 1
                             ? step_cost(form_.shape()) * (1 + lim_.spec.max_step_growth)
                             : 0;  // none
  for (SchedRow& row : rows) add_drafts(row, row.seq, emitted, ceiling);
}

void Scheduler::add_drafts(SchedRow& row, Sequence* s, double& emitted, double ceiling) {
  if (!s->req.speculative || !row.sample || row.pad || row.n_tokens != 1 ||
      row.pos0 < s->n_prompt || int64_t(row.pos0) + 1 != int64_t(s->tokens.size()))
    return;
  const bool forced = s->req.grammar && lim_.spec.grammar_forced && !s->forced.empty() &&
                      s->forced_at == s->tokens.size();
  DraftEstimate& e = forced ? s->forced_draft : s->draft;
  if (lim_.spec.adaptive && e.resting()) {
    // Before the budget: its rest counts down whatever room the batch has.
    e.rest_step();
    spec_.zero_by_acceptance++;
    return;
  }
  const int64_t own_end = int64_t(row.pos0) + 1;
  const int64_t room = cap_.room(s, own_end);
  const int64_t budget = form_.draft_room();
  const int64_t k_max = std::min<int64_t>(
      {lim_.spec.max_draft, budget, int64_t(s->req.max_tokens) - s->n_generated - 1, room});
  if (k_max <= 0) return;
  const int32_t k =
      lim_.spec.adaptive ? draft_length(row, e, k_max, emitted, ceiling) : int32_t(k_max);
  if (k <= 0) return;
  std::vector<int32_t> d =
      forced
          ? std::vector<int32_t>(s->forced.begin(),
                                 s->forced.begin() + std::min<size_t>(size_t(k), s->forced.size()))
          : drafter_->propose(s->tokens, k, s->req.cache_salt);
  if (d.empty() || !cap_.ensure(s, own_end + int64_t(d.size()))) return;
  if (lim_.spec.adaptive && e.probing()) spec_.probes++;
  form_.add_drafts(row, int32_t(d.size()));
  emitted += expected_accepted(e.acceptance(), int32_t(d.size()));
  row.draft = std::move(d);
  row.forced = forced;
}

// The adaptive k (draft_length.h): the length that maximises the batch's
// expected tokens per second of its step, by the cost model (a prior
// while it cannot tell yet), within the step budget. A sequence whose
// acceptance would turn its drafts down even in a batch of its own rests,
// then probes with one draft; one turned down only by this batch (a
// compute-bound one) tries again next step. `ceiling` (> 0) bounds the
// step of the batch with this row's drafts (step_cost), not the row alone.
int32_t Scheduler::draft_length(const SchedRow& row, DraftEstimate& e, int64_t k_max,
                                double emitted, double ceiling) {
  const int64_t at = int64_t(row.pos0) + row.n_tokens;  // the first draft's position
  const double limit = form_.step_limit();
  // [k_max + 1]: what k drafts add to the step of `base` (past the step
  // budget or the ceiling, a draft is worth no gain).
  auto extra = [&](const BatchShape& base, double cap) {
    std::vector<double> x(size_t(k_max) + 1, 0.0);
    const double t0 = step_cost(base);
    for (int64_t k = 1; k <= k_max; ++k) {
      BatchShape b = base;
      b.add_drafts(at, k);
      const double t = step_cost(b);
      const bool over = (limit > 0 && time_.cost().ready() && time_.cost().step(b) > limit) ||
                        (cap > 0 && t > cap);
      x[size_t(k)] = over ? 1e30 : t - t0;
    }
    return x;
  };
  BatchShape alone;
  alone.add_row(row.pos0, row.n_tokens, true, true);
  const double a = e.probing() ? 1.0 : e.acceptance();
  if (best_draft_length(a, 1.0, step_cost(alone), extra(alone, 0)) == 0) {
    e.rest(lim_.spec.probe_interval);
    spec_.zero_by_acceptance++;
    return 0;
  }
  const BatchShape& now = form_.shape();
  const int32_t k = best_draft_length(a, emitted, step_cost(now), extra(now, ceiling));
  if (k == 0) spec_.zero_by_cost++;
  return e.probing() ? std::min(k, 1) : k;
}

// A batch of decodes' step as the draft length weighs it: the cost
// model's fit over decode-only batches (cost_model.h: the whole fit's
// per-token cost is a prefill position's, several times a draft's on a
// memory-bound stage) once it has seen two batch sizes; before, a prior
// in units of one position: a position and an output head cost one each,
// the fixed part of a step four, so a lone decode's step is worth three
// drafts (the CPU stages measured ~0.25-0.33 of a step a draft).
double Scheduler::step_cost(const BatchShape& shape) const {
  if (time_.cost().decode_ready()) return time_.cost().decode_step(shape);
  return 4.0 + double(shape.tokens) + double(shape.sampled);
}

// Copy-on-write for parallel sampling: a choice > 0 starting afresh, which
// reused every whole block of the prompt but the one holding its last
// token, copies that block from choice 0 (which must hold it, its prompt
// finished in an earlier batch: the copy runs before this batch's forward)
// and computes the last token alone, instead of recomputing the block's
// positions (up to block_size - 1 of them; docs/scheduler.md). Not with a
// sliding group: a copy carries one block id, and the sliding layers would
// need their own group's block copied too.
Scheduler::Fork Scheduler::fork_from_leader(Sequence* s) const {
  const int32_t bs = blocks_.block_size();
  const int64_t L = s->n_prompt;
  if (s->index == 0 || swa_.on() || s->preempted > 0 || int64_t(s->tokens.size()) != L ||
      !cap_.may_reuse(s) || (L - 1) % bs == 0)
    return {};
  const int32_t q = int32_t((L - 1) / bs);  // the block of the last prompt token
  if (s->n_shared != q || s->n_scheduled != int64_t(q) * bs) return {};
  auto it = seqs_.find(sequence_key(s->id, 0));
  if (it == seqs_.end()) return {};
  const Sequence& lead = *it->second;
  if (!lead.running() || lead.tainted || lead.prompt_batch == 0 ||
      lead.prompt_batch >= next_batch_ || int32_t(lead.table.size()) <= q)
    return {};
  return Fork{lead.table[size_t(q)], q, lead.prompt_batch};
}

// Parallel sampling with caching: choices 1..n-1 start only once choice 0
// has sent its whole prompt to the ring, so they reuse all its full blocks;
// and when its last prompt block holds more than the last token, only
// once that went in an earlier batch, so they can copy the block (the copy
// runs before the batch's forward) and compute the last token alone
// (docs/scheduler.md: n). They do not wait for a leader that is not
// running (preempted, or finished).
bool Scheduler::waits_for_leader(const Sequence* s) const {
  if (s->index == 0 || !s->table.empty() || s->n_scheduled != 0 || !cap_.may_reuse(s)) return false;
  auto it = seqs_.find(sequence_key(s->id, 0));
  if (it == seqs_.end()) return false;
  const Sequence& lead = *it->second;
  if (!lead.running() || lead.tainted) return false;
  if (lead.n_scheduled < lead.n_prompt) return true;
  const bool copyable =
      s->preempted == 0 && !swa_.on() && (s->n_prompt - 1) % blocks_.block_size() != 0;
  return copyable && (lead.prompt_batch == 0 || lead.prompt_batch >= next_batch_);
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
  InFlight batch{{}, form_.shape()};
  for (const SchedRow& r : rows) {
    Sequence* s = r.seq;
    ScheduledRow o;
    o.id = s->id;
    o.index = s->index;
    o.pos0 = r.pos0;
    o.n_tokens = r.n_tokens;
    o.sample = r.sample;
    o.pad = r.pad;
    o.n_prompt = s->n_prompt;
    o.copy_src = r.copy_src;
    o.copy_dst = r.copy_dst;
    if (r.pad) {  // the filler: any valid id will do
      o.tokens.assign(size_t(r.n_tokens), s->tokens.back());
    } else {
      const int32_t own = r.n_tokens - int32_t(r.draft.size());
      o.tokens.assign(s->tokens.begin() + r.pos0, s->tokens.begin() + r.pos0 + own);
      o.tokens.insert(o.tokens.end(), r.draft.begin(), r.draft.end());
      o.n_draft = int32_t(r.draft.size());
    }
    o.table = s->table;
    o.swa_table = s->swa_table;
    if (!r.pad) {  // the filler samples nothing and keeps no state at the tail
      o.sampling = s->req.sampling;
      o.grammar = s->req.grammar;
      o.logit_bias = s->req.logit_bias;
    }
    mark_prompt_logprobs(*s, o);
    s->batches_in_flight++;
    if (!r.pad && r.pos0 < s->n_prompt)
      tokens_prompt_ += std::min(r.n_tokens, s->n_prompt - r.pos0);
    out.rows.push_back(std::move(o));
  }
  batch.rows = std::move(rows);
  inflight_.emplace(out.id, std::move(batch));
  return out;
}

// ---- results ------------------------------------------------------------------

void Scheduler::update(const BatchResult& result) {
  auto it = inflight_.find(result.batch);
  if (it == inflight_.end()) {
    KV_LOG_WARN("scheduler", "result for batch {}, which is not in flight: ignored", result.batch);
    return;
  }
  const InFlight batch = std::move(it->second);
  const std::vector<SchedRow>& rows = batch.rows;
  inflight_.erase(it);
  if (result.status.ok()) learn_from(batch, result);
  KV_CHECK(!result.status.ok() || result.rows.size() == rows.size(),
           "scheduler: batch {} has {} rows, its result {}", result.batch, rows.size(),
           result.rows.size());
  if (result.status.ok())
    cache_.confirm(result.batch);  // the KV it wrote is there in every stage
  else
    lose_pending_blocks(result.batch);
  for (size_t r = 0; r < rows.size(); ++r) {
    if (result.status.ok()) {
      apply_row(rows[r], result.rows[r]);
      continue;
    }
    rows[r].seq->batches_in_flight--;
    finish(rows[r].seq, FinishReason::kError, result.status);
  }
  requeue_tainted();
  reap();
}

// The rows that hold a prompt position followed by a prompt token ask the
// tail for prompt logprobs (each choice its own: none shares a cached
// prefix); the positions a row scores end with the prompt (the sampled
// row's last logits choose a generated token). A recompute past the first
// token does not ask again: that token's batch carried the last records,
// ahead of it.
void Scheduler::mark_prompt_logprobs(const Sequence& s, ScheduledRow& o) {
  if (s.req.prompt_logprobs < 0 || s.n_generated > 0 || o.pad || o.pos0 + 1 >= s.n_prompt) return;
  o.prompt_logprobs = s.req.prompt_logprobs;
  const int32_t end = o.pos0 + o.n_tokens;
  o.next_token = end < s.n_prompt ? s.tokens[size_t(end)] : -1;
}

void Scheduler::apply_row(const SchedRow& row, const RowResult& res) {
  Sequence* s = row.seq;
  s->batches_in_flight--;
  if (s->finished() || s->tainted) return;  // aborted while in flight; or read lost KV
  if (!res.prompt.empty()) {
    TokenEvent ev;
    ev.prompt_logprobs = res.prompt;
    send(s, std::move(ev));
  }
  if (!row.sample) return;
  if (!res.error.ok()) {
    finish(s, FinishReason::kError, res.error);
    return;
  }
  FinishReason f = append_token(s, SampledToken{res.token, res.logprob, res.top_logprobs});
  if (!row.draft.empty()) {
    // A drafting row: its accepted drafts' tokens, then the target's own,
    // each through the stop rules as if it had come alone.
    count_drafts(row, res);
    for (size_t j = 0; j < res.more.size() && f == FinishReason::kNone; ++j)
      f = append_token(s, res.more[j]);
    if (f != FinishReason::kNone) return;
    // The KV at the accepted drafts' positions is the sequence's own now
    // (the row computed them from the same tokens); past them it is
    // garbage the next row overwrites, and the blocks only rejected drafts
    // reached go back.
    s->n_scheduled += int64_t(res.more.size());
    cap_.trim(s, int64_t(s->tokens.size()));
  }
  if (f != FinishReason::kNone) return;
  s->forced = res.forced;  // for the tokens as they stand now
  s->forced_at = s->tokens.size();
}

void Scheduler::count_drafts(const SchedRow& row, const RowResult& res) {
  const auto proposed = int64_t(row.draft.size()), accepted = int64_t(res.more.size());
  spec_.drafts++;
  spec_.proposed += proposed;
  spec_.accepted += accepted;
  if (row.forced) {
    spec_.forced_drafts++;
    spec_.forced_proposed += proposed;
    spec_.forced_accepted += accepted;
  }
  (row.forced ? row.seq->forced_draft : row.seq->draft)
      .observe(int32_t(proposed), int32_t(accepted));
}

// One generated token: appended, counted, sent; the stop rules (an EOS id
// unless ignore_eos, a stop id: kStop; max_tokens: kLength) end s.
FinishReason Scheduler::append_token(Sequence* s, const SampledToken& t) {
  TokenEvent ev;
  ev.token = t.token;
  ev.logprob = t.logprob;
  ev.top_logprobs = t.top_logprobs;
  s->tokens.push_back(t.token);
  s->n_generated++;
  tokens_generated_++;
  const std::vector<int32_t>& stop = s->req.stop_ids;
  if ((!s->req.ignore_eos && eos_.count(t.token)) ||
      std::find(stop.begin(), stop.end(), t.token) != stop.end())
    ev.finish = FinishReason::kStop;
  else if (s->n_generated >= s->req.max_tokens)
    ev.finish = FinishReason::kLength;
  const FinishReason f = ev.finish;
  send(s, std::move(ev));
  if (f != FinishReason::kNone) end(s, f);  // the event said it
  return f;
}

// s ends; a drafter that learns from outputs (suffix) keeps its tokens.
void Scheduler::end(Sequence* s, FinishReason why) {
  s->end(why);
  if (drafter_) drafter_->learn(s->tokens, s->n_prompt, s->req.cache_salt);
}

// A failed batch may have left unwritten (in some stages) every block it
// was to write, and a later batch still in the ring may have built on them.
// Its rows' requests fail (update); every block cached by it or a later
// batch is uncached, so no later lookup finds one; and every sequence that
// reused one (read it as given) is tainted: its results in flight are
// dropped and it is recomputed once nothing of it is in the ring.
// Conservative: a block a later, healthy batch wrote is uncached too, and
// its readers recomputed. A failed batch is rare; a wrong hit must never be.
void Scheduler::lose_pending_blocks(uint64_t failed_batch) {
  if (!blocks_.caching()) return;
  for (Sequence* s : q_.running)
    if (!s->finished() && (cache_.reads_pending(s->table, s->n_shared, s->cache, failed_batch) ||
                           (s->copy_writer != 0 && failed_batch <= s->copy_writer)))
      s->tainted = true;
  const int32_t n = cache_.drop_pending(failed_batch);
  if (n > 0) KV_LOG_WARN("scheduler", "batch {} failed: {} cached blocks dropped", failed_batch, n);
}

void Scheduler::requeue_tainted() {
  // Newest first to the head of the queue, as requeue_all does.
  std::vector<Sequence*> ready;
  for (Sequence* s : q_.running)
    if (s->tainted && !s->finished() && s->batches_in_flight == 0) ready.push_back(s);
  std::sort(ready.begin(), ready.end(),
            [](const Sequence* a, const Sequence* b) { return a->admitted > b->admitted; });
  for (Sequence* s : ready) cap_.preempt(s, PreemptCause::kBlockLost);
}

// A batch is back whole: the time budget learns its stages' times and the
// gaps its sampled tokens closed (each row's time since its previous
// token; a row's first token closes none).
void Scheduler::learn_from(const InFlight& batch, const BatchResult& result) {
  time_.observe(batch.shape, result.stage_busy_s, result.cycle_s);
  std::vector<double> gaps;
  for (const SchedRow& r : batch.rows) {
    if (!r.sample || result.done_s <= 0) continue;
    Sequence* s = r.seq;
    if (s->finished()) continue;
    if (s->last_token_s > 0) gaps.push_back(result.done_s - s->last_token_s);
    s->last_token_s = result.done_s;
  }
  time_.learn_gaps(gaps, batch.shape.prefill_tokens() > 0);
}

// ---- a lost stage -------------------------------------------------------------

void Scheduler::requeue_all() {
  // Every batch in the ring is lost with the stage, and every stage's KV is
  // suspect (the restarted one starts empty): nothing in flight will come
  // back, and every running sequence is recomputed, not only those in flight.
  for (auto& [id, batch] : inflight_)
    for (const SchedRow& r : batch.rows) r.seq->batches_in_flight--;
  inflight_.clear();
  std::vector<Sequence*> requeue;
  for (Sequence* s : q_.running)
    if (!s->finished()) requeue.push_back(s);
  // Newest first to the head of the queue: the oldest admission ends first
  // in line, and they keep their order ahead of the requests still waiting.
  std::sort(requeue.begin(), requeue.end(),
            [](const Sequence* a, const Sequence* b) { return a->admitted > b->admitted; });
  for (Sequence* s : requeue) cap_.preempt(s, PreemptCause::kStageLost);
  reap();  // sequences that had finished and only waited for their batches
  // The restarted stage's KV is empty (and a live stage may still write a
  // dead batch's KV into a block): nothing cached survives the epoch. Every
  // sequence has just given its blocks back, so the whole pool is free.
  if (blocks_.caching()) {
    const int32_t n = cache_.drop_cache();
    prefix_resets_++;
    KV_LOG_INFO("scheduler", "new epoch: {} cached blocks dropped", n);
  }
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
  st.timing = time_.timing();
  st.timing.admission_waits = admission_waits_;
  st.timing.prefill_cut = form_.counts().cut;
  st.timing.prefill_aged = form_.counts().aged;
  for (int s = 0; s < time_.cost().n_stages(); ++s) {
    const StageCostFit f = time_.cost().fit(s);
    st.cost.push_back(StageCost{f.fixed_s * 1e3, f.per_token_s * 1e3, f.per_kctx_s * 1e3,
                                f.per_sample_s * 1e3, f.rms_s * 1e3, f.mean_busy_s * 1e3,
                                f.samples});
  }
  st.blocks_swa_total = swa_.total();
  st.blocks_swa_free = swa_.free();
  st.blocks_swa_cached = swa_.on() ? swa_.pool().cached() : 0;
  st.blocks_swa_evictable = swa_.on() ? swa_.pool().evictable() : 0;
  st.blocks_cached = blocks_.cached();
  st.blocks_evictable = blocks_.evictable();
  st.prefix_queries = cap_.prefix_queries();
  st.prefix_hits = cap_.prefix_hits();
  st.prefix_resets = prefix_resets_;
  st.spec_method = drafter_ ? drafter_->name() : "none";
  st.spec = spec_;
  return st;
}

}  // namespace kvasir
