// The request lifecycle in the scheduler, against a fake model and ring
// (scheduler_sim.h): abort while waiting and while in flight, a failed
// batch, a bad row, the stop rules, end_all, and a lost stage: requeue_all
// and the one preemption rule it shares with KV pressure.
#include <gtest/gtest.h>

#include <string>

#include "daemon/engine/capacity.h"
#include "daemon/engine/scheduler.h"
#include "tests/unit/daemon/engine/scheduler_sim.h"

namespace kvasir::test {
namespace {

// ---- abort, failures, stop rules ------------------------------------------------

TEST(Scheduler, AbortWhileInFlightEndsAtOnceAndFreesWhenTheBatchIsBack) {
  Sim sim(lim(Policy::kChunked, 2), 1000);
  sim.detailed = true;
  sim.add(1, 6, 8);
  sim.add(2, 3, 8);
  EXPECT_EQ(sim.fill(), "A prefill [0,4) + B prefill [0,1) | A prefill [4,6) + B prefill [1,3)");
  const int64_t held = sim.sch.stats().blocks_total - sim.sch.stats().blocks_free;
  EXPECT_EQ(held, 3);  // A: 6 positions, B: 3
  // A's rows are in both batches: the final event now, the blocks only
  // once no batch in the ring names them (a stage may still write them).
  sim.sch.abort(1);
  EXPECT_EQ(sim.finish[1], FinishReason::kAbort);
  EXPECT_EQ(sim.sch.stats().blocks_total - sim.sch.stats().blocks_free, 3);
  sim.complete();  // the first batch: A still in the second
  EXPECT_EQ(sim.sch.stats().blocks_total - sim.sch.stats().blocks_free, 3);
  sim.complete();  // A's sampled row comes back: dropped, no token
  EXPECT_EQ(sim.sch.stats().blocks_total - sim.sch.stats().blocks_free, 1);
  EXPECT_TRUE(sim.out[1].empty());
  EXPECT_EQ(sim.sch.stats().running, 1);
  sim.sch.abort(1);   // twice: nothing more
  sim.sch.abort(42);  // unknown: nothing
  sim.run();
  EXPECT_EQ(sim.finish[2], FinishReason::kLength);
  EXPECT_EQ(sim.out[2].size(), 8u);
  EXPECT_EQ(sim.sch.stats().blocks_free, sim.sch.stats().blocks_total);
}

TEST(Scheduler, AbortWhileWaitingLeavesTheQueue) {
  Sim sim(lim(Policy::kNaive), 1000);
  sim.add(1, 3, 2);
  sim.add(2, 3, 2);
  EXPECT_EQ(sim.fill(), "1:3");
  EXPECT_EQ(sim.sch.stats().waiting, 1);
  sim.sch.abort(2);
  EXPECT_EQ(sim.finish[2], FinishReason::kAbort);
  EXPECT_EQ(sim.sch.stats().waiting, 0);
  sim.run();
  EXPECT_EQ(sim.finish[1], FinishReason::kLength);
  EXPECT_TRUE(sim.out[2].empty());
}

TEST(Scheduler, FailedBatchEndsEveryRequestInItWithItsStatus) {
  Sim sim(lim(Policy::kChunked), 1000);
  sim.add(1, 3, 4);
  sim.add(2, 3, 4);
  sim.add(3, 3, 4);
  sim.sch.abort(3);
  ASSERT_EQ(sim.fill(), "1:3 2:3");
  BatchResult res;
  res.batch = sim.ring.front().id;
  res.status = Status(ErrorCode::kStageFailed, "stage 1: forward failed");
  sim.ring.pop_front();
  sim.sch.update(res);
  for (RequestId id : {1, 2}) {
    EXPECT_EQ(sim.finish[id], FinishReason::kError);
    EXPECT_EQ(sim.errors[id].code(), ErrorCode::kStageFailed);
  }
  EXPECT_EQ(sim.finish[3], FinishReason::kAbort);
  EXPECT_TRUE(sim.idle());
  EXPECT_EQ(sim.sch.stats().blocks_free, sim.sch.stats().blocks_total);
  sim.sch.update(res);  // again (not in flight any more): ignored
}

TEST(Scheduler, BadRowFailsOnlyItsRequest) {
  Sim sim(lim(Policy::kChunked), 1000);
  sim.add(1, 3, 2);
  sim.add(2, 3, 2);
  ASSERT_EQ(sim.fill(), "1:3 2:3");
  BatchResult res;
  res.batch = sim.ring.front().id;
  res.rows.resize(2);
  res.rows[0].token = 7;
  res.rows[1].error = Status(ErrorCode::kBadResult, "the tail returned token id 99999");
  sim.ring.pop_front();
  sim.sch.update(res);
  EXPECT_EQ(sim.out[1], std::vector<int32_t>{7});
  EXPECT_EQ(sim.finish.count(1), 0u);
  EXPECT_EQ(sim.finish[2], FinishReason::kError);
  EXPECT_EQ(sim.errors[2].code(), ErrorCode::kBadResult);
}

TEST(Scheduler, StopRules) {
  // EOS 5 (the model's), stop id 9 (B's own), max_tokens 3; C ignores EOS.
  Sim sim(lim(Policy::kChunked), 1000, 4, {5});
  GenRequest a, b, c;
  a.prompt = b.prompt = c.prompt = {1};
  a.max_tokens = b.max_tokens = c.max_tokens = 3;
  b.stop_ids = {9};
  c.ignore_eos = true;
  sim.add(1, a);
  sim.add(2, b);
  sim.add(3, c);
  ASSERT_EQ(sim.fill(), "1:1 2:1 3:1");
  answer(sim, {5, 5, 5});  // A stops at EOS; B too (stop ids add to EOS); C goes on
  EXPECT_EQ(sim.finish[1], FinishReason::kStop);
  EXPECT_EQ(sim.finish[2], FinishReason::kStop);
  EXPECT_EQ(sim.finish.count(3), 0u);
  ASSERT_EQ(sim.fill(), "3:1");
  answer(sim, {9});  // not C's stop id
  ASSERT_EQ(sim.fill(), "3:1");
  answer(sim, {9});
  EXPECT_EQ(sim.finish[3], FinishReason::kLength);
  EXPECT_EQ(sim.out[3], (std::vector<int32_t>{5, 9, 9}));
  EXPECT_EQ(sim.sch.stats().tokens_generated, 5);
  EXPECT_EQ(sim.sch.stats().tokens_prompt, 3);
  EXPECT_TRUE(sim.idle());

  Sim stop(lim(Policy::kChunked), 1000, 4, {5});
  stop.add(2, b);
  ASSERT_EQ(stop.fill(), "2:1");
  answer(stop, {9});
  EXPECT_EQ(stop.finish[2], FinishReason::kStop);
  EXPECT_EQ(stop.out[2], std::vector<int32_t>{9});
}

// ---- a lost stage: requeue_all, the same preemption -----------------------------

TEST(Scheduler, LostStageRequeuesEveryRunningSequenceOldestFirst) {
  // `static`, two batches in flight, two rows at most: A (prompt 6) and B
  // (prompt 2, padded to 6) form the batch, C waits for the next one. A's
  // prefill is in one batch and B's padding in the other when a stage is
  // lost. Every batch in flight is gone; both go back to the head of the
  // queue (A first, the older, then B, then C that was already waiting),
  // lose their blocks and their padding, and are recomputed: B is padded
  // afresh from its prompt's end. Counted as requeued, not as preemptions
  // (the pool never ran dry).
  SchedLimits l = lim(Policy::kStatic, 2);
  l.max_rows = 2;
  Sim sim(l, 1000), ref(l, 1000);
  for (Sim* s : {&sim, &ref}) {
    s->detailed = true;
    s->add(1, 6, 2);
    s->add(2, 2, 2);
    s->add(3, 3, 1);
  }
  EXPECT_EQ(sim.fill(), "A prefill [0,6) | B pad [2,6)");
  const SchedulerOutput lost = sim.ring.front();
  sim.ring.clear();
  sim.sch.requeue_all();
  SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.requeued, 2);
  EXPECT_EQ(st.preemptions, 0);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 3);
  EXPECT_EQ(st.blocks_free, st.blocks_total);  // every block back
  // A result of the dead epoch would be dropped by the bridge; were one to
  // arrive here it is not in flight any more and changes nothing.
  BatchResult stale;
  stale.batch = lost.id;
  stale.rows.resize(lost.rows.size());
  sim.sch.update(stale);
  EXPECT_EQ(sim.sch.stats().waiting, 3);
  // The same two again, B padded from scratch, then C once both have left.
  EXPECT_EQ(sim.run(), (T{
                           "A recompute [0,6) | B pad [2,6)",
                           "A decode 6 + B prefill [0,2)",
                           "",
                           "B decode 2",
                           "C prefill [0,3)",
                       }));
  ref.run();
  EXPECT_EQ(outputs(sim), outputs(ref));
  EXPECT_EQ(sim.sch.stats().blocks_free, sim.sch.stats().blocks_total);
}

TEST(Scheduler, LostStageMidDecodeContinuesTheTextExactly) {
  // Chunked, three requests decoding with two batches in flight when the
  // stage is lost; then a second loss during the recompute. Outputs equal
  // a fault-free run's; the requeue count is the running set at each loss.
  for (Policy p : {Policy::kNaive, Policy::kStatic, Policy::kContinuous, Policy::kChunked}) {
    Sim sim(lim(p, 2), 1000), ref(lim(p, 2), 1000);
    for (Sim* s : {&sim, &ref})
      for (int i = 1; i <= 3; ++i) s->add(RequestId(i), 3 + i, 6);
    for (int i = 0; i < 4; ++i) sim.step();
    int64_t requeued = sim.sch.stats().running;
    sim.fill();
    sim.ring.clear();
    sim.sch.requeue_all();
    sim.step();
    requeued += sim.sch.stats().running;
    sim.ring.clear();
    sim.sch.requeue_all();
    sim.run();
    ref.run();
    ASSERT_TRUE(sim.idle()) << policy_name(p);
    EXPECT_EQ(outputs(sim), outputs(ref)) << policy_name(p);
    EXPECT_EQ(sim.sch.stats().requeued, requeued) << policy_name(p);
    EXPECT_EQ(sim.sch.stats().preemptions, 0) << policy_name(p);
    EXPECT_EQ(sim.sch.stats().blocks_free, sim.sch.stats().blocks_total);
  }
}

// The one requeue rule (CapacityScheduler::preempt) resets everything that
// either of the two former copies reset: KV-pressure preemption released the
// blocks, restarted the recompute, dropped the padding and counted; the
// crash-recovery requeue released the blocks, restarted the recompute,
// cleared the in-flight flag and counted as requeued. Now both causes do
// all of it; only the counter differs.
TEST(Scheduler, OneRequeueRuleResetsEverythingForBothCauses) {
  for (PreemptCause why : {PreemptCause::kKvPressure, PreemptCause::kStageLost}) {
    SchedLimits l = lim(Policy::kStatic);
    BlockManager blocks(8, 4);
    SlidingGroup none(0, 0, 4);
    HybridCache cache(blocks, none);
    SeqQueues q;
    CapacityScheduler cap(l, q, blocks, none, cache);
    Sequence waiter, s;
    waiter.id = 1;
    s.id = 2;
    s.tokens = {1, 2, 3, 4, 5, 6};
    s.n_prompt = 5;
    s.n_generated = 1;
    s.n_scheduled = 6;
    s.pad_next = 9;
    s.pad_end = 12;
    s.state = SeqState::kDecoding;
    ASSERT_TRUE(blocks.ensure(s.table, 12));
    q.running.push_back(&s);
    q.waiting.push_back(&waiter);
    cap.preempt(&s, why);
    EXPECT_TRUE(s.table.empty());
    EXPECT_EQ(blocks.free(), blocks.total());
    EXPECT_EQ(s.n_scheduled, 0);
    EXPECT_EQ(s.remaining(), 6);  // prompt + generated tokens, recomputed
    EXPECT_EQ(s.pad_next, 0);
    EXPECT_EQ(s.pad_end, 0);
    EXPECT_FALSE(s.awaiting());
    EXPECT_FALSE(s.running());
    EXPECT_EQ(s.state, SeqState::kPreempted);
    EXPECT_EQ(s.preempted, 1);
    EXPECT_EQ(s.tokens.size(), 6u);  // nothing generated is lost or re-sent
    EXPECT_TRUE(q.running.empty());
    ASSERT_EQ(q.waiting.size(), 2u);
    EXPECT_EQ(q.waiting.front(), &s);  // at the head, before the waiter
    EXPECT_EQ(cap.preemptions(), why == PreemptCause::kKvPressure ? 1 : 0);
    EXPECT_EQ(cap.requeued(), why == PreemptCause::kStageLost ? 1 : 0);
  }
}

TEST(Scheduler, EndAllSendsOneFinalEventEachAndForgetsThem) {
  Sim sim(lim(Policy::kNaive), 1000);
  sim.add(1, 3, 4);
  sim.add(2, 3, 4);
  sim.add(3, 3, 4);
  sim.sch.abort(3);
  sim.fill();
  sim.sch.end_all(FinishReason::kError, Status(ErrorCode::kUnavailable, "gave up"));
  EXPECT_EQ(sim.finish[1], FinishReason::kError);
  EXPECT_EQ(sim.finish[2], FinishReason::kError);
  EXPECT_EQ(sim.errors[2].code(), ErrorCode::kUnavailable);
  EXPECT_EQ(sim.finish[3], FinishReason::kAbort);  // already ended: not twice
  const SchedulerStats st = sim.sch.stats();
  EXPECT_EQ(st.waiting + st.running, 0);
  EXPECT_EQ(st.blocks_free, st.blocks_total);
}

}  // namespace
}  // namespace kvasir::test
