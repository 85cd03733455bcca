// Speculative decoding in the scheduler (docs/speculative.md): decode rows
// carry prompt-lookup drafts, a result's accepted tokens are appended one by
// one, positions and blocks follow the accepted count. Against a scripted
// model: request R's generated token g is script[R][g] whatever was drafted
// (a deterministic target), so the output must be the script, drafts or
// not. The fake ring keeps a paged KV cache: every row writes its tokens
// (drafts included) at its positions through its table, and every row must
// read the sequence's true tokens below its own: a rejected draft's KV that
// was read before being overwritten, or a position that over-advanced,
// fails the check.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "daemon/engine/drafter.h"
#include "daemon/engine/scheduler.h"

namespace kvasir::test {
namespace {

// The mechanics below (positions, blocks, stop rules) at a fixed k: every
// eligible row asks for max_draft. The adaptive length has its own tests
// further down.
SchedLimits spec_limits(DraftMethod m, int32_t max_draft = 3, bool adaptive = false) {
  SchedLimits l{4, 16, 16, 256};
  l.policy = Policy::kChunked;
  l.inflight = 1;
  l.spec.method = m;
  l.spec.max_draft = max_draft;
  l.spec.ngram_min = 2;
  l.spec.ngram_max = 3;
  l.spec.adaptive = adaptive;
  return l;
}

struct SpecSim {
  SpecSim(SchedLimits lim, int32_t n_blocks, int32_t block_size = 4, std::vector<int32_t> eos = {})
      : sch(lim, n_blocks, block_size, std::move(eos)),
        bs(block_size),
        cache(size_t(n_blocks) * size_t(block_size), -1) {}

  void add(RequestId id, std::vector<int32_t> prompt, std::vector<int32_t> out_script,
           int32_t max_tokens, bool speculative = true, bool constrained = false) {
    GenRequest g;
    g.speculative = speculative;
    if (constrained) g.grammar = std::make_shared<const std::string>("spec");
    g.prompt = prompt;
    g.max_tokens = max_tokens;
    toks[id] = prompt;
    n_prompt[id] = int32_t(prompt.size());
    script[id] = std::move(out_script);
    sch.add(id, std::move(g), [this, id](const TokenEvent& ev) {
      if (ev.token >= 0) {
        out[id].push_back(ev.token);
        toks[id].push_back(ev.token);
      }
      if (ev.finish != FinishReason::kNone) finish[id] = ev.finish;
    });
  }

  int64_t& at(const ScheduledRow& r, int64_t p) {
    return cache[size_t(r.table[size_t(p / bs)]) * size_t(bs) + size_t(p % bs)];
  }
  static int64_t cell(RequestId id, int32_t token) { return int64_t(id) << 32 | uint32_t(token); }

  // One batch formed and run; "" when nothing was formed. Rows as
  // "A [11,15) 3 drafts: 2 accepted" or "A [0,11)".
  std::string step() {
    SchedulerOutput b = sch.schedule(load);
    if (b.empty()) return "";
    BatchResult res;
    res.batch = b.id;
    if (busy) res.stage_busy_s = {busy(b)};
    std::string line;
    for (const ScheduledRow& r : b.rows) {
      res.rows.push_back(run_row(r));
      line += (line.empty() ? "" : " + ") + describe(r, res.rows.back());
    }
    sch.update(res);
    return line;
  }
  std::vector<std::string> run(int max_steps = 200) {
    std::vector<std::string> t;
    for (int i = 0; i < max_steps; ++i) {
      std::string s = step();
      if (s.empty()) break;
      t.push_back(s);
    }
    return t;
  }

  RowResult run_row(const ScheduledRow& r) {
    const std::vector<int32_t>& mine = toks[r.id];
    const int64_t end = r.pos0 + r.n_tokens, own_end = end - r.n_draft;
    if (r.sample) {
      EXPECT_EQ(own_end, int64_t(mine.size())) << "a sampled row ends at the last token";
    }
    if (r.n_draft > 0) {
      EXPECT_TRUE(r.sample);
    }
    EXPECT_GE(int64_t(r.table.size()) * bs, end);
    for (int64_t p = r.pos0; p < end; ++p) at(r, p) = cell(r.id, r.tokens[size_t(p - r.pos0)]);
    for (int64_t p = 0; p < own_end; ++p)
      EXPECT_EQ(at(r, p), cell(r.id, mine[size_t(p)])) << "request " << r.id << " position " << p;
    RowResult rr;
    if (!r.sample) return rr;
    // t_0 is generated token g; t_i follows while t_{i-1} equals draft i.
    const size_t g = size_t(own_end - n_prompt[r.id]);
    const std::vector<int32_t>& sc = script[r.id];
    rr.token = sc.at(g);
    for (int32_t i = 1; i <= r.n_draft; ++i) {
      const int32_t prev = i == 1 ? rr.token : rr.more.back().token;
      if (prev != r.tokens[size_t(r.n_tokens - r.n_draft + i - 1)]) break;
      rr.more.push_back(SampledToken{sc.at(g + size_t(i)), 0.f, {}});
    }
    // The tail's grammar-forced tokens after what the row emitted.
    if (auto f = forced.find(r.id); f != forced.end())
      rr.forced = f->second(g + 1 + rr.more.size());
    return rr;
  }

  std::string describe(const ScheduledRow& r, const RowResult& rr) const {
    std::string s = std::string(1, char('A' + r.id - 1)) + " [" + std::to_string(r.pos0) + "," +
                    std::to_string(r.pos0 + r.n_tokens) + ")";
    if (r.n_draft > 0)
      s += " " + std::to_string(r.n_draft) + " drafts: " + std::to_string(rr.more.size()) +
           " accepted";
    return s;
  }

  Scheduler sch;
  // The one stage's busy time on a batch (seconds), for the cost model;
  // unset: none reported (the scheduler's prior then weighs drafts).
  std::function<double(const SchedulerOutput&)> busy;
  RingLoad load;  // what schedule() is told of the ring
  int32_t bs;
  std::vector<int64_t> cache;
  std::map<RequestId, std::vector<int32_t>> toks, out, script;
  std::map<RequestId, int32_t> n_prompt;
  std::map<RequestId, FinishReason> finish;
  // A constrained request's forced tokens after its first g generated ones.
  std::map<RequestId, std::function<std::vector<int32_t>(size_t g)>> forced;
};

// Prompt 1..8 then 1 2 3; the model goes on 4 5 6 9 1 2 3 4 5 6 7 8.
const std::vector<int32_t> kPrompt = {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3};
const std::vector<int32_t> kScript = {4, 5, 6, 9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4};

TEST(SchedulerSpec, DraftsArePartlyAcceptedAndPositionsFollowTheAcceptedCount) {
  SpecSim sim(spec_limits(DraftMethod::kNgram), 64);
  sim.add(1, kPrompt, kScript, 12);
  const std::vector<std::string> want = {
      "A [0,11)",                        // the prompt; samples 4
      "A [11,15) 3 drafts: 2 accepted",  // 4 -> drafts 5 6 7: 5 6 accepted, 9 the model's
      "A [14,15)",                       // ... 6 9: no earlier "6 9", no draft
      "A [15,16)",                       // ... 9 1: none either
      "A [16,20) 3 drafts: 3 accepted",  // ... 1 2: drafts 3 4 5, all taken, then 6
      // ... 4 5 6: max_tokens leaves room for one draft: 9 (after the
      // most recent "4 5 6"), rejected: the model says 7
      "A [20,22) 1 drafts: 0 accepted",
      "A [21,22)",  // position 21 again (its KV held the rejected 9): 8
  };
  EXPECT_EQ(sim.run(), want);
  EXPECT_EQ(sim.out[1], std::vector<int32_t>(kScript.begin(), kScript.begin() + 12));
  EXPECT_EQ(sim.finish[1], FinishReason::kLength);
  const SchedulerStats st = sim.sch.stats();
  EXPECT_STREQ(st.spec_method, "ngram");
  EXPECT_EQ(st.spec.drafts, 3);
  EXPECT_EQ(st.spec.proposed, 7);
  EXPECT_EQ(st.spec.accepted, 5);
  EXPECT_EQ(st.blocks_free, st.blocks_total);  // all back
}

// Structured outputs: a constrained row drafts the grammar-forced tokens
// its last result brought (here the script's next two, then a wrong one
// when the "tokenization" differs), counted apart; with none it drafts
// what prompt lookup proposes, verified the same way.
TEST(SchedulerSpec, AConstrainedRowDraftsItsForcedTokens) {
  SpecSim sim(spec_limits(DraftMethod::kNgram), 64);
  sim.add(1, kPrompt, kScript, 12, true, true);
  sim.forced[1] = [](size_t g) -> std::vector<int32_t> {
    if (g == 1) return {kScript[1], kScript[2]};  // 5 6: both right
    if (g == 4) return {kScript[4], 99};          // 1, then a guess the model refuses
    return {};
  };
  const std::vector<std::string> want = {
      "A [0,11)",                        // the prompt; samples 4, then 5 6 are forced
      "A [11,14) 2 drafts: 2 accepted",  // 4 5 6: the model's own is 9, then 1 99 forced
      "A [14,17) 2 drafts: 1 accepted",  // 9 1 99: 1 taken, the model says 2 (nothing forced)
      "A [16,20) 3 drafts: 3 accepted",  // ... 1 2: prompt lookup drafts 3 4 5, then 6
      "A [20,22) 1 drafts: 0 accepted",  // as without a grammar (the test above)
      "A [21,22)",
  };
  EXPECT_EQ(sim.run(), want);
  EXPECT_EQ(sim.out[1], std::vector<int32_t>(kScript.begin(), kScript.begin() + 12));
  const SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.spec.drafts, 4);
  EXPECT_EQ(st.spec.forced_drafts, 2);
  EXPECT_EQ(st.spec.forced_proposed, 4);
  EXPECT_EQ(st.spec.forced_accepted, 3);
  EXPECT_EQ(st.blocks_free, st.blocks_total);
}

TEST(SchedulerSpec, WithoutADrafterEveryDecodeIsOneToken) {
  SpecSim sim(spec_limits(DraftMethod::kNone), 64);
  sim.add(1, kPrompt, kScript, 12);
  const std::vector<std::string> t = sim.run();
  EXPECT_EQ(t.size(), 12u);  // the prompt, then 11 single decodes
  EXPECT_EQ(sim.out[1], std::vector<int32_t>(kScript.begin(), kScript.begin() + 12));
  EXPECT_EQ(sim.sch.stats().spec.drafts, 0);
}

TEST(SchedulerSpec, ARequestMayTurnItOff) {
  SpecSim sim(spec_limits(DraftMethod::kNgram), 64);
  sim.add(1, kPrompt, kScript, 12, false);
  EXPECT_EQ(sim.run().size(), 12u);  // the prompt, then 11 single decodes
  EXPECT_EQ(sim.out[1], std::vector<int32_t>(kScript.begin(), kScript.begin() + 12));
  EXPECT_EQ(sim.sch.stats().spec.drafts, 0);
}

TEST(SchedulerSpec, NoDraftPastMaxTokensAndStopsInsideAnAcceptedRun) {
  // max_tokens 4: after 4 (g = 0), at most 2 drafts (4 - 1 - 1).
  SpecSim a(spec_limits(DraftMethod::kNgram), 64);
  a.add(1, kPrompt, kScript, 4);
  EXPECT_EQ(a.run(), (std::vector<std::string>{"A [0,11)", "A [11,14) 2 drafts: 2 accepted"}));
  EXPECT_EQ(a.out[1], (std::vector<int32_t>{4, 5, 6, 9}));
  EXPECT_EQ(a.finish[1], FinishReason::kLength);
  // An EOS (6) inside the accepted run ends it there: 9 is never emitted.
  SpecSim b(spec_limits(DraftMethod::kNgram), 64, 4, {6});
  b.add(1, kPrompt, kScript, 12);
  b.run();
  EXPECT_EQ(b.out[1], (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(b.finish[1], FinishReason::kStop);
  EXPECT_EQ(b.sch.stats().blocks_free, b.sch.stats().blocks_total);
}

TEST(SchedulerSpec, BlocksOnlyRejectedDraftsReachedGoBack) {
  // Blocks of one position: the row [7,11) holds 11 blocks; the model
  // rejects the first draft (it says 1, not 8), so the sequence's tokens
  // end at position 8 and the blocks of positions 9 and 10 go back.
  SpecSim sim(spec_limits(DraftMethod::kNgram), 64, 1);
  sim.add(1, {5, 6, 7, 8, 9, 5, 6}, {7, 1, 2, 3, 4}, 5);
  EXPECT_EQ(sim.step(), "A [0,7)");
  EXPECT_EQ(sim.step(), "A [7,11) 3 drafts: 0 accepted");
  const SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.blocks_total - st.blocks_free, 9);  // positions 0..8
  EXPECT_EQ(sim.toks[1].size(), 9u);
  sim.run();
  EXPECT_EQ(sim.out[1], (std::vector<int32_t>{7, 1, 2, 3, 4}));
}

TEST(SchedulerSpec, PreemptionUnderATinyPoolKeepsTheScriptedOutput) {
  // 10 blocks of 4 for two sequences of up to 27 positions each: someone
  // is preempted and recomputed, drafts or not; the output is the script.
  std::vector<int32_t> p2 = {11, 12, 13, 14, 15, 16, 17, 18, 11, 12, 13};
  std::vector<int32_t> s2 = {14, 15, 16, 19, 11, 12, 13, 14, 15, 16, 17, 18, 11, 12, 13, 14};
  SpecSim sim(spec_limits(DraftMethod::kNgram), 10);
  sim.add(1, kPrompt, kScript, 16);
  sim.add(2, p2, s2, 16);
  sim.run();
  EXPECT_EQ(sim.out[1], kScript);
  EXPECT_EQ(sim.out[2], s2);
  EXPECT_GT(sim.sch.stats().preemptions, 0);
  EXPECT_GT(sim.sch.stats().spec.accepted, 0);
}

TEST(SchedulerSpec, RequeueAllDropsTheDraftsInFlight) {
  SpecSim sim(spec_limits(DraftMethod::kNgram), 64);
  sim.add(1, kPrompt, kScript, 12);
  sim.step();                                 // the prompt
  SchedulerOutput lost = sim.sch.schedule();  // the drafting row, lost with a stage
  ASSERT_EQ(lost.rows.size(), 1u);
  EXPECT_EQ(lost.rows[0].n_draft, 3);
  sim.sch.requeue_all();
  sim.run();
  EXPECT_EQ(sim.out[1], std::vector<int32_t>(kScript.begin(), kScript.begin() + 12));
}

// ---- the adaptive draft length (draft_length.h) --------------------------------

// Tokens of {1, 2} where every 2-gram has occurred before, so prompt lookup
// always proposes, and the model always says the other token: every draft
// misses.
const std::vector<int32_t> kMissPrompt = {1, 2, 1, 1, 2, 2, 1, 2};
const std::vector<int32_t> kMissScript = {1, 2, 2, 2, 1, 1, 1, 2, 1, 1, 2, 2, 1, 2,
                                          1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 1, 1, 2, 2};

TEST(SchedulerSpecAdaptive, ADrafterThatAlwaysMissesRestsThenProbes) {
  SchedLimits l = spec_limits(DraftMethod::kNgram, 3, true);
  l.spec.probe_interval = 4;
  SpecSim sim(l, 64);
  sim.add(1, kMissPrompt, kMissScript, 16);
  // Alone in its batches, by the prior (a step's fixed part worth two
  // drafts): a = 0.8 (the seed) asks for 3, one miss leaves a = 0.48 and
  // 1, a second a = 0.31, below what a draft costs: 4 steps of rest (the
  // deciding one included), then a probe of one draft, which misses, and
  // rest again.
  const std::vector<std::string> want = {
      "A [0,8)",
      "A [8,12) 3 drafts: 0 accepted",
      "A [9,11) 1 drafts: 0 accepted",
      "A [10,11)",
      "A [11,12)",
      "A [12,13)",
      "A [13,14)",                       // resting
      "A [14,16) 1 drafts: 0 accepted",  // the probe
      "A [15,16)",
      "A [16,17)",
      "A [17,18)",
      "A [18,19)",                       // resting
      "A [19,21) 1 drafts: 0 accepted",  // the probe
      "A [20,21)",
      "A [21,22)",
      "A [22,23)",
  };
  EXPECT_EQ(sim.run(), want);
  EXPECT_EQ(sim.out[1], std::vector<int32_t>(kMissScript.begin(), kMissScript.begin() + 16));
  const SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.spec.drafts, 4);
  EXPECT_EQ(st.spec.accepted, 0);
  EXPECT_EQ(st.spec.probes, 2);
  EXPECT_EQ(st.spec.zero_by_acceptance, 11);
  EXPECT_EQ(st.spec.zero_by_cost, 0);
}

// At a fixed length too, drafts go on top of the balancing share: a lone
// decode in a ring of two slots (a share of half the work) still carries
// max_draft of them, not half.
TEST(SchedulerSpec, AFixedLengthIsNotHalvedByTheShare) {
  SchedLimits l = spec_limits(DraftMethod::kNgram, 3);
  l.inflight = 2;
  SpecSim sim(l, 64);
  sim.load = RingLoad{1, 0};
  sim.add(1, kPrompt, kScript, 12);
  const std::vector<std::string> t = sim.run();
  auto first = std::find_if(t.begin(), t.end(),
                            [](const std::string& r) { return r.find("drafts") != r.npos; });
  ASSERT_NE(first, t.end());
  EXPECT_EQ(*first, "A [11,15) 3 drafts: 2 accepted");
  EXPECT_EQ(sim.out[1], std::vector<int32_t>(kScript.begin(), kScript.begin() + 12));
}

TEST(SchedulerSpecAdaptive, DraftsGoOnTopOfTheShareAndARestCountsDown) {
  // A ring of two slots, one free: the token budget is half the work. The
  // adaptive length reserves nothing in that share (a reservation its rows
  // leave unused would unbalance the micro-batches): its drafts go on top
  // of it, within max_tokens — 3 at once here. A resting sequence's rest
  // counts down, and it probes again.
  SchedLimits l = spec_limits(DraftMethod::kNgram, 3, true);
  l.inflight = 2;
  l.spec.probe_interval = 3;
  SpecSim sim(l, 64);
  sim.load = RingLoad{1, 0};
  sim.add(1, kMissPrompt, kMissScript, 12);
  const std::vector<std::string> want = {
      "A [0,4)",
      "A [4,6)",
      "A [6,7)",
      "A [7,8)",                        // the prompt, half the work each time
      "A [8,12) 3 drafts: 0 accepted",  // a budget of 1, and 3 drafts past it
      "A [9,11) 1 drafts: 0 accepted",
      "A [10,11)",
      "A [11,12)",
      "A [12,13)",                       // resting, a budget of 1
      "A [13,15) 1 drafts: 0 accepted",  // the probe
      "A [14,15)",
      "A [15,16)",
      "A [16,17)",                       // resting
      "A [17,19) 1 drafts: 0 accepted",  // the probe
      "A [18,19)",
  };
  EXPECT_EQ(sim.run(), want);
  EXPECT_EQ(sim.out[1], std::vector<int32_t>(kMissScript.begin(), kMissScript.begin() + 12));
  EXPECT_EQ(sim.sch.stats().spec.probes, 2);
}

// Prompt lookup on a period of 4: every draft is right.
std::vector<int32_t> periodic(int32_t base, size_t n) {
  std::vector<int32_t> v;
  for (size_t i = 0; i < n; ++i) v.push_back(base + int32_t(i % 4));
  return v;
}

// A request whose text has a period of 4 from `base` (40 tokens): the
// first `prompt` of them its prompt, the rest its output script.
void add_periodic(SpecSim& sim, RequestId id, int32_t base, size_t prompt, int32_t max_tokens) {
  const std::vector<int32_t> all = periodic(base, 40);
  sim.add(id, std::vector<int32_t>(all.begin(), all.begin() + std::ptrdiff_t(prompt)),
          std::vector<int32_t>(all.begin() + std::ptrdiff_t(prompt), all.end()), max_tokens);
}

// The adaptive length under a plan with room: 32 rows, 512 tokens a batch.
SchedLimits roomy_adaptive_limits() {
  SchedLimits l = spec_limits(DraftMethod::kNgram, 3, true);
  l.max_rows = 32;
  l.max_tokens = 512;
  l.chunk_size = 512;
  return l;
}

TEST(SchedulerSpecAdaptive, DraftsLeaveTheMicroBatchesBalanced) {
  // Two free slots: each micro-batch takes half the work ready, here 8
  // sequences of one position each (1-token prompts, then decodes): 4 rows
  // a batch. Drafts are not in that work (the adaptive length reserves
  // none), so the split holds however many they carry; with max_draft
  // reserved per decode the share would grow with the decoders, and a
  // batch would take them all (and the next slot would idle in a ring).
  SchedLimits l = roomy_adaptive_limits();
  l.inflight = 2;
  SpecSim sim(l, 256);
  sim.load = RingLoad{2, 0};
  for (RequestId id = 1; id <= 8; ++id) add_periodic(sim, id, int32_t(id) * 10, 1, 16);
  const std::vector<std::string> t = sim.run();
  bool drafted = false;
  for (const std::string& b : t) {
    EXPECT_LE(std::count(b.begin(), b.end(), '+') + 1, 4) << b;
    drafted = drafted || b.find("drafts") != std::string::npos;
  }
  EXPECT_TRUE(drafted);
  EXPECT_GT(sim.sch.stats().spec.accepted, 0);
}

TEST(SchedulerSpecAdaptive, ADrafterThatAlwaysHitsKeepsMaxDraft) {
  SpecSim sim(spec_limits(DraftMethod::kNgram, 3, true), 64);
  const std::vector<int32_t> all = periodic(1, 40);
  add_periodic(sim, 1, 1, 10, 13);
  const std::vector<std::string> want = {
      "A [0,10)",
      "A [10,14) 3 drafts: 3 accepted",
      "A [14,18) 3 drafts: 3 accepted",
      "A [18,22) 3 drafts: 3 accepted",
  };
  EXPECT_EQ(sim.run(), want);
  EXPECT_EQ(sim.out[1], std::vector<int32_t>(all.begin() + 10, all.begin() + 23));
  EXPECT_EQ(sim.sch.stats().spec.zero_by_acceptance, 0);
}

// A CPU stage's times (the default plan's fitted figures, roughly): 7.5 ms
// a step, 2 ms a position, 1.5 ms an output head (a sampled row, or a draft).
double cpu_stage(const SchedulerOutput& b) {
  double t = 0.0075;
  for (const ScheduledRow& r : b.rows)
    t += 0.002 * r.n_tokens + (r.sample ? 0.0015 : 0) + 0.0015 * r.n_draft;
  return t;
}

TEST(SchedulerSpecAdaptive, ALargeDecodeBatchDraftsNothing) {
  // 16 sequences whose drafts would all be right. In a batch of 16 decodes
  // (63.5 ms a step) a draft costs 3.5 ms for at most 1/16 of a step's
  // tokens: it pays only if a > 0.88, and the seed says 0.8. A, left
  // alone (11 ms a step), drafts max_draft at once.
  SpecSim sim(roomy_adaptive_limits(), 256);
  sim.busy = cpu_stage;
  // The daemon's warm-up (warmup.h), speculation off: prefills of 16 and 64
  // tokens, decodes alone, so the cost model tells a step's fixed part from
  // a position's.
  sim.add(30, periodic(300, 16), periodic(302, 8), 4, false);
  sim.add(31, periodic(400, 64), periodic(400, 8), 1, false);
  sim.run();
  for (RequestId id = 1; id <= 16; ++id) {
    add_periodic(sim, id, int32_t(id) * 10, 10, id == 1 ? 13 : 6);
  }
  const std::vector<std::string> t = sim.run();
  ASSERT_EQ(t.size(), 1u + 5u + 2u);  // the prompts, 5 steps of 16 decodes, A alone
  for (size_t i = 1; i <= 5; ++i) EXPECT_EQ(t[i].find("drafts"), std::string::npos) << t[i];
  EXPECT_EQ(t[6], "A [15,19) 3 drafts: 3 accepted");
  EXPECT_EQ(t[7], "A [19,22) 2 drafts: 2 accepted");  // max_tokens leaves room for 2
  const SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.spec.zero_by_cost, 16 * 5 - 15);  // the last step's 15 are a token from max_tokens
  EXPECT_EQ(st.spec.zero_by_acceptance, 0);
  for (RequestId id = 1; id <= 16; ++id) {
    const std::vector<int32_t> all = periodic(int32_t(id) * 10, 40);
    EXPECT_EQ(sim.out[id],
              std::vector<int32_t>(all.begin() + 10, all.begin() + (id == 1 ? 23 : 16)));
  }
}

TEST(SchedulerSpecAdaptive, DraftsInAStepOfSeveralDecodesStayWithinMaxStepGrowth) {
  // The scheduler's prior (no stage times reported): a step of 3 decodes
  // costs 10 units (4 + a position and an output head each), a draft 2.
  // The throughput rule drafts on every row (A 2, B and C 1 at first);
  // bounded to a quarter of the step, the three together may add one.
  // A, left alone once B and C are done, drafts max_draft as before.
  SchedLimits l = roomy_adaptive_limits();
  l.spec.max_step_growth = 0.25;
  SpecSim sim(l, 256);
  add_periodic(sim, 1, 10, 10, 20);
  add_periodic(sim, 2, 20, 10, 6);
  add_periodic(sim, 3, 30, 10, 6);
  const std::vector<std::string> t = sim.run();
  ASSERT_EQ(t[0], "A [0,10) + B [0,10) + C [0,10)");
  auto span = [](size_t from, size_t to) {
    return "[" + std::to_string(from) + "," + std::to_string(to) + ")";
  };
  for (size_t i = 1; i <= 5; ++i)
    EXPECT_EQ(t[i], "A " + span(8 + 2 * i, 10 + 2 * i) + " 1 drafts: 1 accepted + B " +
                        span(9 + i, 10 + i) + " + C " + span(9 + i, 10 + i));
  ASSERT_EQ(t.size(), 9u);
  EXPECT_EQ(t[6], "A [20,24) 3 drafts: 3 accepted");
  EXPECT_EQ(t[7], "A [24,28) 3 drafts: 3 accepted");
  EXPECT_EQ(t[8], "A [28,29)");
  for (RequestId id = 1; id <= 3; ++id) {
    const std::vector<int32_t> all = periodic(int32_t(id) * 10, 40);
    EXPECT_EQ(sim.out[id],
              std::vector<int32_t>(all.begin() + 10, all.begin() + (id == 1 ? 30 : 16)));
  }
}

}  // namespace
}  // namespace kvasir::test
