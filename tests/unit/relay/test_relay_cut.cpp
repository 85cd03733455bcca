// tests/unit/relay/test_relay_cut.cpp — a worker slice that ends before the
// tail: the ring leaves the leader at stage 1 and comes back at stage 2
// (three stages, leader 0, worker 1, leader 2). The Hidden frame carries
// the batch back, every boundary byte checked; one that does not match the
// batch sent is refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "relay/relay.h"
#include "tests/unit/relay/link_pair.h"
#include "tests/unit/relay/relay_segs.h"

using namespace kvasir;
using namespace kvasir::ipc;
using namespace kvasir::testing;

namespace {

constexpr int kStages = 3;

// What worker stage 1 writes into Boundary[k][1]: every value depends on
// the batch and differs from what stage 0 wrote.
float stage1_value(uint64_t id, uint64_t i) {
  return -float(i) * 0.25f - float(id) * 3.0f;
}

// Worker stage 1, as far as the ring can tell: batch m's second boundary
// and its busy time (every 7th batch failed instead, as a stage fails one).
void run_stage1(Segment& seg, BatchMsg& m) {
  float* b = seg.boundary(m.slot, 1);
  for (uint64_t i = 0; i < uint64_t(m.n_tokens) * 32; ++i) b[i] = stage1_value(m.batch_id, i);
  const ResultView r = seg.result(m.slot);
  r.hdr->stage_busy_ns[1] = 2000 + m.batch_id;
  if (m.batch_id % 7 == 0) {
    m.status = int32_t(ErrorCode::kDevice), m.origin = 1;
    std::snprintf(r.hdr->error, sizeof r.hdr->error, "stage 1: batch %llu failed",
                  (unsigned long long)m.batch_id);
  }
}

// Whether the leader's slot holds what worker stage 1 wrote for m.
::testing::AssertionResult leader_holds(Segment& leader, const BatchMsg& m) {
  const float* b = leader.boundary(m.slot, 1);
  for (uint64_t i = 0; i < uint64_t(m.n_tokens) * 32; ++i)
    if (b[i] != stage1_value(m.batch_id, i))
      return ::testing::AssertionFailure() << "boundary value " << i << " of " << m.batch_id;
  const ResultView r = leader.result(m.slot);
  if (r.hdr->stage_busy_ns[0] != 1000 + m.batch_id || r.hdr->stage_busy_ns[1] != 2000 + m.batch_id)
    return ::testing::AssertionFailure() << "the stage times of " << m.batch_id;
  return ::testing::AssertionSuccess();
}

// Every 11th batch names a grammar entry the plan has not: the leader's
// relay refuses it, and it must still reach stage 2 after the batches
// before it.
bool refused_here(uint64_t id) {
  return id % 11 == 0;
}

TEST(RelayCut, ARingThatLeavesAndComesBackCarriesEveryBoundaryByte) {
  Segs s(0, "-cut", kStages);
  relay::RelayOptions o;
  o.first_remote = 1, o.end = 2;
  LoopbackRelays relays(s, o);
  ASSERT_TRUE(relays.listened);
  constexpr uint64_t kBatches = 200;
  std::atomic<int> stage1_bad{0};
  std::thread stage1([&] {
    auto stop = [&] { return s.worker->stopping(); };
    for (;;) {
      BatchMsg m;
      if (!s.worker->ring(1).pop(m, stop)) return;
      if (!worker_holds(*s.leader, *s.worker, m)) stage1_bad.fetch_add(1);
      if (m.batch_id % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      run_stage1(*s.worker, m);
      if (!s.worker->ring(2).push(m, stop)) return;
    }
  });
  auto stop = [&] { return s.leader->stopping(); };
  uint64_t next = 1, done = 0;
  while (done < kBatches) {  // the bridge and stage 0, then stage 2: kInflight batches out
    if (next <= kBatches && next - done <= kInflight) {
      const BatchMsg m = msg_of(next, 2 + int(next % 15));
      write_leader_side(*s.leader, m);
      if (refused_here(next)) s.leader->desc(m.slot).sampling[1].grammar_entry = 1;
      ASSERT_TRUE(s.leader->ring(1).push(m, stop));
      ++next;
      continue;
    }
    BatchMsg m;
    ASSERT_TRUE(s.leader->ring(2).pop(m, stop));
    s.leader->stage(2).passed.fetch_add(1);
    ASSERT_EQ(m.batch_id, done + 1) << "in order, the refused ones too";
    ++done;
    if (refused_here(m.batch_id)) {
      EXPECT_EQ(m.status, int32_t(ErrorCode::kBatchRefused));
      EXPECT_EQ(m.origin, 1);
      continue;
    }
    EXPECT_TRUE(leader_holds(*s.leader, m));
    if (m.batch_id % 7 == 0) {
      EXPECT_EQ(m.status, int32_t(ErrorCode::kDevice));
      EXPECT_EQ(m.origin, 1);
      EXPECT_EQ(std::string(s.leader->result(m.slot).hdr->error),
                "stage 1: batch " + std::to_string(m.batch_id) + " failed");
    } else {
      EXPECT_EQ(m.status, 0) << m.batch_id;
    }
  }
  EXPECT_TRUE(s.leader->drained()) << "the relay counts a batch held until it is back";
  EXPECT_EQ(s.leader->ring(3).size(), 0u) << "nothing skipped stage 2";
  s.leader->request_shutdown();
  relays.join();
  s.worker->request_shutdown();
  stage1.join();
  EXPECT_EQ(stage1_bad.load(), 0);
  EXPECT_TRUE(relays.leader_end.ok()) << relays.leader_end.to_string();
  EXPECT_TRUE(relays.worker_end.ok()) << relays.worker_end.to_string();
}

// The Hidden frame of batch m as worker stage 1 returns it.
struct Returned {
  net::Hidden f;
  explicit Returned(Segs& s, BatchMsg m) {
    write_leader_side(*s.leader, m);
    run_stage1(*s.worker, m);
    s.worker->result(m.slot).hdr->stage_busy_ns[0] = 77;  // not the worker's to send
    EXPECT_TRUE(relay::make_hidden_frame(*s.worker, 1, 2, m, &f).ok());
  }
};

TEST(RelayCut, LeaderTakesTheHiddenFrameOfTheBatchItSent) {
  Segs s(0, "-take", kStages);
  const BatchMsg m = msg_of(9);
  Returned back(s, m);
  EXPECT_EQ(back.f.boundary.size(), size_t(5 * 32 * 4));
  EXPECT_EQ(back.f.n_times, 1u);
  EXPECT_TRUE(back.f.error.empty());
  BatchMsg got;
  Status st = relay::take_hidden_frame(*s.leader, 1, 2, back.f, m, &got);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(got.batch_id, 9u);
  EXPECT_EQ(got.status, 0);
  EXPECT_TRUE(leader_holds(*s.leader, m));
  // A slice that ends at the tail answers with a Result, never a Hidden.
  EXPECT_EQ(relay::take_hidden_frame(*s.leader, 1, 3, back.f, m, &got).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(relay::make_hidden_frame(*s.worker, 1, 3, m, &back.f).code(),
            ErrorCode::kInvalidArgument);
}

TEST(RelayCut, LeaderRefusesAHiddenFrameThatIsNotTheBatchItSent) {
  Segs s(0, "-refuse", kStages);
  const BatchMsg m = msg_of(10);
  const Returned back(s, m);
  const net::Hidden good = back.f;
  std::vector<float> longer(6 * 32);
  auto code = [&](const net::Hidden& f, const BatchMsg& sent) {
    BatchMsg got;
    return relay::take_hidden_frame(*s.leader, 1, 2, f, sent, &got).code();
  };
  ASSERT_EQ(code(good, m), ErrorCode::kOk) << "each case below breaks one thing of a good frame";
  net::Hidden f = good;
  f.batch_id = 14;
  EXPECT_EQ(code(f, m), ErrorCode::kInvalidArgument) << "another batch";
  EXPECT_EQ(code(good, msg_of(14)), ErrorCode::kInvalidArgument) << "the slot holds another";
  f = good, f.slot = 3;
  EXPECT_EQ(code(f, m), ErrorCode::kInvalidArgument) << "another slot";
  f = good, f.n_rows = 1;
  EXPECT_EQ(code(f, m), ErrorCode::kInvalidArgument) << "other rows";
  f = good, f.n_tokens = 6;
  EXPECT_EQ(code(f, m), ErrorCode::kInvalidArgument) << "other tokens";
  f = good, f.msg_version = uint16_t(kMsgVersion + 1);
  EXPECT_EQ(code(f, m), ErrorCode::kInvalidArgument) << "another message version";
  f = good, f.first_stage = 2;
  EXPECT_EQ(code(f, m), ErrorCode::kInvalidArgument) << "times of another slice";
  f = good, f.n_times = 2;
  EXPECT_EQ(code(f, m), ErrorCode::kInvalidArgument) << "times of more stages";
  f = good, f.hidden = 16, f.boundary_tokens = 10;
  EXPECT_EQ(code(f, m), ErrorCode::kInvalidArgument) << "another width, the same bytes";
  f = good, f.boundary_tokens = 6,
  f.boundary = net::ByteView(reinterpret_cast<const uint8_t*>(longer.data()), 6 * 32 * 4);
  EXPECT_EQ(code(f, m), ErrorCode::kInvalidArgument) << "more boundary rows than tokens";
  BatchMsg failed = m;  // a batch a leader stage failed comes back failed
  failed.status = int32_t(ErrorCode::kBatchRefused), failed.origin = 0;
  EXPECT_EQ(code(good, failed), ErrorCode::kInvalidArgument) << "a status cleared";
}

// Over the link: a Hidden frame for a batch the leader did not send, or a
// Result where the slice ends before the tail, ends the leader's relay
// (with a Refuse to the worker), saying why.
TEST(RelayCut, LeaderEndsALinkThatReturnsWhatItDidNotSend) {
  for (const bool result : {false, true}) {
    Segs s(0, result ? "-res" : "-hid", kStages);
    LinkPair pair;
    ASSERT_TRUE(pair.leader && pair.worker);
    Status leader_end;
    std::thread leader([&] {
      relay::RelayOptions o;
      o.first_remote = 1, o.end = 2;
      leader_end = relay::run_leader_relay(*s.leader, *pair.leader, o);
    });
    net::UcxLink* link = pair.worker.get();
    const Returned back(s, msg_of(3));
    const std::vector<uint8_t> bytes(64, 0);
    ASSERT_TRUE(result ? link->send(net::Result{3, 3, bytes}).ok() : link->send(back.f).ok());
    net::Frame answer;
    Status got = link->recv(10000, &answer);
    leader.join();
    EXPECT_EQ(leader_end.code(), ErrorCode::kInvalidArgument) << leader_end.to_string();
    EXPECT_NE(leader_end.message().find(result ? "result" : "not sent"), std::string::npos)
        << leader_end.message();
    // The Refuse, unless the leader's close overtook it (it closes at once).
    if (got.ok()) EXPECT_TRUE(std::holds_alternative<net::Refuse>(answer.payload));
    EXPECT_EQ(s.leader->ring(2).size(), 0u) << "nothing of it reached stage 2";
  }
}

}  // namespace
