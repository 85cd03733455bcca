// tests/unit/daemon/engine/scheduler_sim.h — a fake model and ring around
// the Scheduler, for its unit tests (test_scheduler.cpp: policies, the ring,
// preemption; test_scheduler_lifecycle.cpp: abort, failures, stop rules, a
// lost stage). It drives the scheduler through its public face only (add,
// abort, schedule, update, requeue_all, stats).
//
// The fake model is a paged KV cache: every row writes its tokens into the
// blocks of its table and reads back positions [0, pos0 + n_tokens)
// through the same table, and the token it answers is a hash of what it
// read. So a token depends on the whole prefix as a real model's does, and
// a recompute that missed or duplicated a position, or a block shared by two
// requests, reads another request's data and changes the output (or fails
// the check that a row reads only its own tokens).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/engine/scheduler.h"
#include "stages/sampler.h"

namespace kvasir::test {

// What a stage does with a row's blocks: a cell holds (request, token), or
// filler, or nothing yet.
constexpr int64_t kUnwritten = -1;
inline int64_t cell(RequestId id, int32_t token) {
  return int64_t(id) << 32 | uint32_t(token);
}
inline int64_t filler(RequestId id) {
  return cell(id, -2);
}

struct Sim {
  Sim(SchedLimits lim, int32_t n_blocks, int32_t block_size = 4, std::vector<int32_t> eos = {})
      : sch(lim, n_blocks, block_size, std::move(eos)),
        bs(block_size),
        inflight(lim.inflight),
        cache(size_t(n_blocks) * size_t(block_size), kUnwritten) {}

  void add(RequestId id, int prompt, int max_new) {
    GenRequest g;
    for (int i = 0; i < prompt; ++i) g.prompt.push_back(int32_t(id * 100 + i));
    g.max_tokens = max_new;
    g.sampling = params;
    add(id, std::move(g));
  }
  void add(RequestId id, GenRequest g) {
    toks[id] = g.prompt;
    n_prompt[id] = int32_t(g.prompt.size());
    sch.add(id, std::move(g), [this, id](const TokenEvent& ev) {
      if (ev.token >= 0) {
        out[id].push_back(ev.token);
        toks[id].push_back(ev.token);
      }
      if (ev.finish != FinishReason::kNone) {
        EXPECT_EQ(finish.count(id), 0u) << "two final events for request " << id;
        finish[id] = ev.finish;
        errors[id] = ev.error;
      }
    });
  }

  // Fills the ring, then completes the oldest batch. Returns the batches
  // formed: compact ("id:n" per row, "p" for padding) or detailed ("A
  // prefill [0,4) + B decode 6"); rows by spaces or " + ", batches by " | ".
  std::string step() {
    std::string formed = fill();
    if (!ring.empty()) complete();
    return formed;
  }
  std::vector<std::string> run(int max_steps = 10000) {
    std::vector<std::string> t;
    for (int i = 0; i < max_steps && !idle(); ++i) t.push_back(step());
    return t;
  }
  bool idle() const {
    const SchedulerStats s = sch.stats();
    return ring.empty() && s.waiting == 0 && s.running == 0;
  }

  std::string fill() {
    std::string formed;
    while (int(ring.size()) < inflight) {
      RingLoad load{inflight - int(ring.size()), 0};
      for (const SchedulerOutput& b : ring) load.tokens_in_flight += b.n_tokens();
      SchedulerOutput b = sch.schedule(load);
      if (b.empty()) break;
      std::string s;
      for (const ScheduledRow& r : b.rows) {
        s += (s.empty() ? "" : detailed ? " + " : " ") + describe(r);
        computed += r.n_tokens;
      }
      formed += (formed.empty() ? "" : " | ") + s;
      ring.push_back(std::move(b));
      check_tables();
    }
    return formed;
  }

  std::string describe(const ScheduledRow& r) {
    if (!detailed)
      return std::to_string(r.id) + ":" + std::to_string(r.n_tokens) + (r.pad ? "p" : "");
    const std::string name(1, char('A' + r.id - 1));
    const std::string range =
        "[" + std::to_string(r.pos0) + "," + std::to_string(r.pos0 + r.n_tokens) + ")";
    if (r.pad) return name + " pad " + range;
    int64_t& high = sent[r.id];
    const bool again = r.pos0 < high;
    high = std::max<int64_t>(high, r.pos0 + r.n_tokens);
    if (again) return name + " recompute " + range;
    if (r.n_tokens == 1 && r.pos0 >= r.n_prompt) return name + " decode " + std::to_string(r.pos0);
    return name + " prefill " + range;
  }

  // Every row's positions are covered by its table; no block is in two
  // requests' tables (a request's latest table in the ring extends its
  // earlier ones).
  void check_tables() {
    std::map<RequestId, std::vector<int32_t>> latest;
    for (const SchedulerOutput& b : ring)
      for (const ScheduledRow& r : b.rows) {
        ASSERT_GE(int64_t(r.table.size()) * bs, r.pos0 + r.n_tokens);
        ASSERT_EQ(int64_t(r.tokens.size()), r.n_tokens);
        if (r.table.size() > latest[r.id].size()) latest[r.id] = r.table;
      }
    std::set<int32_t> ids;
    size_t n = 0;
    for (auto& [id, t] : latest) {
      ids.insert(t.begin(), t.end());
      n += t.size();
    }
    ASSERT_EQ(ids.size(), n) << "a block is in two tables";
  }

  int64_t& at(const ScheduledRow& r, int64_t p) {
    return cache[size_t(r.table[size_t(p / bs)]) * size_t(bs) + size_t(p % bs)];
  }

  // The oldest batch runs: each row writes its positions, and a real row
  // reads [0, end) through its table and must find its own tokens there.
  void complete() {
    SchedulerOutput b = std::move(ring.front());
    ring.pop_front();
    BatchResult res;
    res.batch = b.id;
    for (const ScheduledRow& r : b.rows) {
      res.rows.push_back(run_row(r));
      if (::testing::Test::HasFatalFailure()) return;
    }
    if (stage_time) {  // the stages' times, and the clock moves on by the step
      const BatchShape shape = shape_of(b);
      double step = 0;
      for (int s = 0; s < n_stages; ++s) {
        res.stage_busy_s.push_back(stage_time(s, shape));
        step = std::max(step, res.stage_busy_s.back());
      }
      steps.push_back({shape, step});
      clock_s += step;
      res.cycle_s = cycle_steps * step;
    }
    sch.update(res);
  }

  static BatchShape shape_of(const SchedulerOutput& b) {
    BatchShape shape;
    for (const ScheduledRow& r : b.rows)
      shape.add_row(r.pos0, r.n_tokens, r.sample, r.n_tokens == 1 && r.pos0 >= r.n_prompt);
    return shape;
  }

  RowResult run_row(const ScheduledRow& r) {
    RowResult rr;
    const int64_t end = r.pos0 + r.n_tokens;
    for (int64_t p = r.pos0; p < end; ++p)
      at(r, p) = r.pad ? filler(r.id) : cell(r.id, r.tokens[size_t(p - r.pos0)]);
    // The tail's penalty history sees every row, as in stages/agent.cpp.
    const SequenceHistory* hist = nullptr;
    if (penalize) {
      hist = hists.feed(
          r.id, PenaltyHistories::Row{r.pos0, r.n_tokens, r.n_prompt, r.tokens.data(), r.pad},
          ++batch_no);
      EXPECT_NE(hist, nullptr);
    }
    if (r.pad) return rr;  // its output is thrown away: it may read anything
    const std::vector<int32_t>& mine = toks[r.id];
    uint64_t h = 1469598103934665603ull;
    for (int64_t p = 0; p < end; ++p) {
      EXPECT_EQ(at(r, p), cell(r.id, mine[size_t(p)]))
          << "request " << r.id << " reads a bad position " << p;
      h = (h ^ uint64_t(mine[size_t(p)])) * 1099511628211ull;
    }
    if (!r.sample) return rr;
    if (penalize) {
      // A small vocabulary whose logits favour repeating the last token:
      // the penalties decide what comes next, so a history miscounted by a
      // recompute changes the output.
      std::vector<float> logits(kPenVocab);
      for (int32_t v = 0; v < kPenVocab; ++v)
        logits[size_t(v)] = float((h >> (4 * v)) & 15) / 8.0f + (v == mine.back() ? 2.f : 0.f);
      rr.token = sampler.sample(logits.data(), kPenVocab, r.sampling, hist, end).token;
    } else {
      rr.token = int32_t(h % 50000);
    }
    return rr;
  }

  Scheduler sch;
  int32_t bs;
  int inflight;
  bool detailed = false;
  std::vector<int64_t> cache;
  std::deque<SchedulerOutput> ring;
  std::map<RequestId, std::vector<int32_t>> toks, out;  // all tokens; the generated ones
  std::map<RequestId, int32_t> n_prompt;
  std::map<RequestId, FinishReason> finish;
  std::map<RequestId, Status> errors;
  std::map<RequestId, int64_t> sent;  // positions sent so far (detailed timelines)
  int64_t computed = 0;               // tokens sent to the ring, padding included
  // Penalised sampling (the tail's sampler and histories) instead of a hash.
  static constexpr int32_t kPenVocab = 8;
  bool penalize = false;
  SamplingParams params;
  PenaltyHistories hists;
  Sampler sampler;
  uint64_t batch_no = 0;
  // Timed stages (scheduling by time): each stage's busy seconds for a
  // batch of this shape; the batches' shapes and steps as they completed;
  // the clock (seconds) the scheduler is given.
  std::function<double(int, const BatchShape&)> stage_time;
  int n_stages = 2;
  double cycle_steps = 0;  // each batch's time in the ring, in steps (0: not told)
  struct Step {
    BatchShape shape;
    double step_s;
  };
  std::vector<Step> steps;
  double clock_s = 0;
};

// 4 rows, a budget of 8 tokens, chunks of 4.
inline SchedLimits lim(Policy p, int32_t inflight = 1) {
  SchedLimits l{4, 8, 4, 256};
  l.policy = p;
  l.inflight = inflight;
  return l;
}

using T = std::vector<std::string>;

// The generated tokens of every request.
inline std::map<RequestId, std::vector<int32_t>> outputs(const Sim& sim) {
  return sim.out;
}

// A batch of one row per request answered with the given tokens.
inline void answer(Sim& sim, const std::vector<int32_t>& tokens) {
  SchedulerOutput b = std::move(sim.ring.front());
  sim.ring.pop_front();
  BatchResult res;
  res.batch = b.id;
  ASSERT_EQ(b.rows.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    res.rows.emplace_back();
    res.rows.back().token = tokens[i];
  }
  sim.sch.update(res);
}

}  // namespace kvasir::test
