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
//
// With prefix caching (lim.prefix_caching) rows may share blocks, so a cell
// holds what determines a real model's KV there instead: a hash of the
// token prefix [0, p]. A row must read its own prefix's hash at every
// position: a hit on a block of another prefix, or on one never written,
// fails the check. Maps are keyed by sequence_key (a request's id for its
// first choice, so tests of n = 1 read sim.out[id] as before).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "daemon/engine/scheduler.h"
#include "stages/sampler.h"
#include "stages/tail_sequences.h"

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
// What a failed batch leaves in its positions (some stages never wrote them).
constexpr int64_t kPoison = -3;
// The cells of positions [0, end) of a sequence with these tokens: each a
// hash of the token prefix up to it.
inline std::vector<int64_t> prefix_cells(const std::vector<int32_t>& toks, int64_t end) {
  std::vector<int64_t> c(size_t(std::max<int64_t>(end, 0)));
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < end; ++i) {
    h = (h ^ uint64_t(uint32_t(toks[size_t(i)]))) * 1099511628211ull;
    c[size_t(i)] = int64_t(h >> 2);  // never negative: never unwritten, filler or poison
  }
  return c;
}

struct Sim {
  // sliding: a sliding-window group (its rows also write and read the
  // window's positions through their sliding table, in a cache of its own;
  // with caching its cells hold their prefix's hash too, so a sliding hit
  // on another prefix's block, or an unwritten one, reads a bad window).
  Sim(SchedLimits lim, int32_t n_blocks, int32_t block_size = 4, std::vector<int32_t> eos = {},
      SlidingKv sliding = {})
      : sch(lim, n_blocks, block_size, std::move(eos), sliding),
        bs(block_size),
        inflight(lim.inflight),
        caching(lim.prefix_caching),
        window(sliding.window),
        cache(size_t(n_blocks) * size_t(block_size), kUnwritten),
        swa_cache(size_t(sliding.n_blocks) * size_t(block_size), kUnwritten) {}

  void add(RequestId id, int prompt, int max_new) {
    GenRequest g;
    for (int i = 0; i < prompt; ++i) g.prompt.push_back(int32_t(id * 100 + i));
    g.max_tokens = max_new;
    g.sampling = params;
    add(id, std::move(g));
  }
  void add(RequestId id, GenRequest g) {
    for (int32_t i = 0; i < std::max(g.n, 1); ++i) {
      toks[sequence_key(id, i)] = g.prompt;
      n_prompt[sequence_key(id, i)] = int32_t(g.prompt.size());
    }
    sch.add(id, std::move(g), [this, id](const TokenEvent& ev) {
      const uint64_t k = sequence_key(id, ev.index);
      cached[k] = ev.cached_tokens;
      if (ev.token >= 0) {
        out[k].push_back(ev.token);
        toks[k].push_back(ev.token);
      }
      if (ev.finish != FinishReason::kNone) {
        EXPECT_EQ(finish.count(k), 0u) << "two final events for sequence " << k;
        finish[k] = ev.finish;
        errors[k] = ev.error;
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
      if (!balance) load = RingLoad{};  // the ring unknown: whole budgets, rows capped
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

  // "B" for request 2, "B1" for its second choice; with caching, a row that
  // starts after a prefix hit says so: "B cached [0,8) prefill [8,10)".
  std::string describe(const ScheduledRow& r) {
    const uint64_t k = sequence_key(r.id, r.index);
    if (!detailed)
      return std::to_string(r.id) + (r.index ? "." + std::to_string(r.index) : "") + ":" +
             std::to_string(r.n_tokens) + (r.pad ? "p" : "");
    const std::string name =
        std::string(1, char('A' + r.id - 1)) + (r.index ? std::to_string(r.index) : "");
    const std::string range =
        "[" + std::to_string(r.pos0) + "," + std::to_string(r.pos0 + r.n_tokens) + ")";
    if (r.pad) return name + " pad " + range;
    int64_t& high = sent[k];
    int64_t& at_pos = next_pos[k];
    // A row that does not start where the sequence's previous one ended
    // starts anew (first row, or after a preemption) past a cached prefix.
    std::string hit = r.pos0 > 0 && r.pos0 != at_pos ? " cached [0," + std::to_string(r.pos0) + ")"
                                                     : std::string();
    if (r.copy_src >= 0) {  // copy-on-write: the block of pos0 came from another table
      const int64_t b0 = r.pos0 / bs * bs;
      hit = (b0 > 0 ? " cached [0," + std::to_string(b0) + ")" : std::string()) + " copied [" +
            std::to_string(b0) + "," + std::to_string(r.pos0) + ")";
    }
    const bool again = r.pos0 < high;
    high = std::max<int64_t>(high, r.pos0 + r.n_tokens);
    at_pos = r.pos0 + r.n_tokens;
    if (again) return name + hit + " recompute " + range;
    if (r.n_tokens == 1 && r.pos0 >= r.n_prompt && hit.empty())
      return name + " decode " + std::to_string(r.pos0);
    return name + hit + " prefill " + range;
  }

  // Every row's positions are covered by its table; no block is in two
  // sequences' tables (a sequence's latest table in the ring extends its
  // earlier ones) — with caching, unless it is a block both reached with
  // the same token prefix, at the same place in both tables.
  void check_tables() {
    std::map<uint64_t, std::vector<int32_t>> latest;
    for (const SchedulerOutput& b : ring)
      for (const ScheduledRow& r : b.rows) {
        ASSERT_GE(int64_t(r.table.size()) * bs, r.pos0 + r.n_tokens);
        ASSERT_EQ(int64_t(r.tokens.size()), r.n_tokens);
        const uint64_t k = sequence_key(r.id, r.index);
        if (r.table.size() > latest[k].size()) latest[k] = r.table;
        check_swa_table(r);
      }
    for (const SchedulerOutput& b : ring) {  // a sliding block in one row of a batch at most
      std::map<int32_t, std::pair<uint64_t, size_t>> seen;  // (with caching: or a shared prefix's)
      for (const ScheduledRow& r : b.rows)
        for (size_t i = 0; i < r.swa_table.size(); ++i) {
          const uint64_t k = sequence_key(r.id, r.index);
          if (r.swa_table[i] < 0) continue;
          auto [it, fresh] = seen.emplace(r.swa_table[i], std::make_pair(k, i));
          if (fresh) continue;
          ASSERT_TRUE(caching) << "sliding block " << r.swa_table[i] << " twice";
          ASSERT_EQ(i, it->second.second) << "sliding block " << r.swa_table[i] << " at two places";
          const std::vector<int32_t>&x = toks[k], &y = toks[it->second.first];
          const size_t end = (i + 1) * size_t(bs);
          ASSERT_TRUE(x.size() >= end && y.size() >= end &&
                      std::equal(x.begin(), x.begin() + int64_t(end), y.begin()))
              << "sliding block " << r.swa_table[i] << " shared by two prefixes";
        }
    }
    std::map<int32_t, std::pair<uint64_t, size_t>> owner;  // block → (sequence, index)
    for (auto& [k, t] : latest)
      for (size_t i = 0; i < t.size(); ++i) {
        auto [it, fresh] = owner.emplace(t[i], std::make_pair(k, i));
        if (fresh) continue;
        ASSERT_TRUE(caching) << "block " << t[i] << " is in two tables";
        const auto [k2, i2] = it->second;
        ASSERT_EQ(i, i2) << "block " << t[i] << " at two places";
        const std::vector<int32_t>&a = toks[k], &b = toks[k2];
        const size_t end = (i + 1) * size_t(bs);
        ASSERT_TRUE(a.size() >= end && b.size() >= end &&
                    std::equal(a.begin(), a.begin() + int64_t(end), b.begin()))
            << "block " << t[i] << " shared by two prefixes";
      }
  }

  // A sliding table is as long as the full one, mapped from the block of
  // its row's first window on (entries before may be unmapped, never after).
  void check_swa_table(const ScheduledRow& r) {
    if (window == 0) {
      ASSERT_TRUE(r.swa_table.empty());
      return;
    }
    ASSERT_EQ(r.swa_table.size(), r.table.size());
    const int64_t first = std::max<int64_t>(0, r.pos0 - window + 1) / bs;
    for (size_t i = size_t(first); i < r.swa_table.size(); ++i)
      ASSERT_GE(r.swa_table[i], 0) << "sliding entry " << i << " unmapped at pos0 " << r.pos0;
  }
  int64_t& swa_at(const ScheduledRow& r, int64_t p) {
    return swa_cache[size_t(r.swa_table[size_t(p / bs)]) * size_t(bs) + size_t(p % bs)];
  }

  int64_t& at(const ScheduledRow& r, int64_t p) {
    return cache[size_t(r.table[size_t(p / bs)]) * size_t(bs) + size_t(p % bs)];
  }

  // Fails the oldest batch: its positions hold poison (a later stage never
  // wrote them), its result is a kStageFailed status.
  void fail_oldest() {
    SchedulerOutput b = std::move(ring.front());
    ring.pop_front();
    for (const ScheduledRow& r : b.rows) {
      for (int64_t p = r.pos0; p < r.pos0 + r.n_tokens; ++p) {
        at(r, p) = kPoison;
        if (window > 0) swa_at(r, p) = kPoison;
      }
      if (r.copy_dst >= 0) std::fill_n(cache.begin() + int64_t(r.copy_dst) * bs, bs, kPoison);
    }
    BatchResult res;
    res.batch = b.id;
    res.status = Status(ErrorCode::kStageFailed, "stage 1: injected");
    sch.update(res);
  }

  // The oldest batch runs: each row writes its positions, and a real row
  // reads [0, end) through its table and must find its own tokens there.
  void complete() {
    SchedulerOutput b = std::move(ring.front());
    ring.pop_front();
    // Block copies first, as every stage does before the forward.
    for (const ScheduledRow& r : b.rows)
      if (r.copy_src >= 0)
        std::copy_n(cache.begin() + int64_t(r.copy_src) * bs, bs,
                    cache.begin() + int64_t(r.copy_dst) * bs);
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
      if (report_done) res.done_s = clock_s;
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
    const uint64_t k = sequence_key(r.id, r.index);
    const std::vector<int32_t>& mine = toks[k];
    const int64_t end = r.pos0 + r.n_tokens;
    const std::vector<int64_t> own =
        caching && !r.pad ? prefix_cells(mine, end) : std::vector<int64_t>{};
    for (int64_t p = r.pos0; p < end; ++p) {
      if (r.pad)
        at(r, p) = filler(r.id);
      else if (caching)
        at(r, p) = own[size_t(p)];
      else
        at(r, p) = cell(r.id, r.tokens[size_t(p - r.pos0)]);
      if (window > 0)
        swa_at(r, p) = r.pad     ? filler(r.id)
                       : caching ? own[size_t(p)]
                                 : cell(r.id, r.tokens[size_t(p - r.pos0)]);
    }
    // A sliding layer reads the window of each of the row's positions
    // (with caching, a bad read also changes the answer, as a full one does).
    uint64_t swa_bad = 0;
    for (int64_t p = std::max<int64_t>(0, r.pos0 - window + 1); window > 0 && !r.pad && p < end;
         ++p) {
      const int64_t want =
          caching ? own[size_t(p)]
                  : cell(r.id, p >= r.pos0 ? r.tokens[size_t(p - r.pos0)] : mine[size_t(p)]);
      if (swa_at(r, p) != want) swa_bad = swa_bad * 31 + uint64_t(p) + 1;
      if (!caching || strict) {
        EXPECT_EQ(swa_at(r, p), want)
            << "request " << r.id << " reads a bad sliding position " << p;
      }
    }
    // The tail's penalty history sees every row, as in stages/agent.cpp.
    const SequenceHistory* hist = nullptr;
    if (penalize && penalties_active(r.sampling)) {
      const TailSequence& rec = hists.feed(
          k, TailSequences::Row{r.pos0, r.n_tokens, r.n_prompt, r.tokens.data()},
          ++batch_no);
      EXPECT_TRUE(rec.lost.ok()) << rec.lost.to_string();
      hist = &rec.penalties;
    }
    if (r.pad) return rr;  // its output is thrown away: it may read anything
    uint64_t h = 1469598103934665603ull ^ swa_bad;
    for (int64_t p = 0; p < end; ++p) {
      if (caching) {
        // The answer is a hash of what it read, so a bad read changes the
        // output even where it is not checked (rows the scheduler drops).
        if (strict) {
          EXPECT_EQ(at(r, p), own[size_t(p)]) << "sequence " << k << " reads a bad position " << p;
        }
        h = (h ^ uint64_t(at(r, p))) * 1099511628211ull;
        continue;
      }
      EXPECT_EQ(at(r, p), cell(r.id, mine[size_t(p)]))
          << "request " << r.id << " reads a bad position " << p;
    }
    // Without caching every read is checked: the answer is what a correct
    // read gives with caching, so the two modes' outputs compare.
    if (!caching)
      for (int64_t c : prefix_cells(mine, end)) h = (h ^ uint64_t(c)) * 1099511628211ull;
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
  bool caching;
  int32_t window = 0;  // the sliding group's (0: none)
  bool detailed = false;
  // Every read checked (with caching). Off where a failed batch poisons
  // blocks that rows already in the ring read: those rows' results must be
  // dropped by the scheduler, which the outputs then show.
  bool strict = true;
  bool balance = true;  // tell the scheduler the ring's load (else budgets are whole)
  std::vector<int64_t> cache;
  std::vector<int64_t> swa_cache;  // the sliding group's blocks
  std::deque<SchedulerOutput> ring;
  // By sequence_key: all tokens; the generated ones.
  std::map<uint64_t, std::vector<int32_t>> toks, out;
  std::map<uint64_t, int32_t> n_prompt;
  std::map<uint64_t, FinishReason> finish;
  std::map<uint64_t, Status> errors;
  std::map<uint64_t, int32_t> cached;    // cached_tokens its events reported
  std::map<uint64_t, int64_t> sent;      // positions sent so far (detailed timelines)
  std::map<uint64_t, int64_t> next_pos;  // where its next row would start
  int64_t computed = 0;                  // tokens sent to the ring, padding included
  // Penalised sampling (the tail's sampler and histories) instead of a hash.
  static constexpr int32_t kPenVocab = 8;
  bool penalize = false;
  SamplingParams params;
  TailSequences hists;
  Sampler sampler;
  uint64_t batch_no = 0;
  // Timed stages (scheduling by time): each stage's busy seconds for a
  // batch of this shape; the batches' shapes and steps as they completed;
  // the clock (seconds) the scheduler is given.
  std::function<double(int, const BatchShape&)> stage_time;
  int n_stages = 2;
  double cycle_steps = 0;  // each batch's time in the ring, in steps (0: not told)
  bool report_done = false;  // results carry done_s = the clock (the aim learns from gaps)
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

// A random trial of the caches' tests: n_req requests, make(rng, id) each,
// arrive one step in three at random into both `sim` (the scheduler under
// test) and `off` (caching off), while `sim` forms batches and completes the
// oldest one each step, or with `failures` loses it one step in eight.
// `off` then runs to the end. Stops early on a test failure.
template <class Make>
void random_arrivals(Sim& sim, Sim& off, std::mt19937_64& rng, int n_req, bool failures,
                     Make make) {
  int added = 0;
  for (int step = 0; step < 10000 && (added < n_req || !sim.idle()); ++step) {
    while (added < n_req && rng() % 3 == 0) {
      const GenRequest g = make(rng, added + 1);
      sim.add(RequestId(added + 1), g);
      off.add(RequestId(added + 1), g);
      added++;
    }
    sim.fill();
    if (::testing::Test::HasFailure()) return;
    if (sim.ring.empty()) continue;
    if (failures && rng() % 8 == 0)
      sim.fail_oldest();
    else
      sim.complete();
  }
  off.run();
}

// After random_arrivals: every request of `sim` that did not fail has
// `off`'s output. Returns how many failed (FinishReason::kError).
inline int64_t same_outputs_but_errors(const Sim& sim, const Sim& off, int trial) {
  const auto tokens = [](const Sim& s, uint64_t k) {
    const auto it = s.out.find(k);
    return it == s.out.end() ? std::vector<int32_t>{} : it->second;
  };
  int64_t failed = 0;
  for (const auto& [k, f] : sim.finish) {
    if (f == FinishReason::kError) {
      failed++;
      continue;
    }
    EXPECT_EQ(tokens(sim, k), tokens(off, k)) << "trial " << trial << " request " << k;
  }
  return failed;
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
