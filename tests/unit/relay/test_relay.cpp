// tests/unit/relay/test_relay.cpp — the relay: the frame conversions and
// their refusals between two real segments, then both relays over a real
// UCX link on loopback carrying 300 batches, four in flight, byte for byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

#include "relay/relay.h"
#include "tests/unit/relay/relay_segs.h"

using namespace kvasir;
using namespace kvasir::ipc;
using namespace kvasir::testing;

namespace {

// The tail on the worker: a result that names the batch.
void write_tail_result(Segment& seg, const BatchMsg& m) {
  const ResultView r = seg.result(m.slot);
  r.hdr->batch_id = m.batch_id, r.hdr->n_rows = m.n_rows, r.hdr->status = m.status;
  r.hdr->stage_busy_ns[1] = 2000 + m.batch_id;
  for (int i = 0; i < m.n_rows; ++i) r.token[i] = int32_t(m.batch_id * 10 + uint64_t(i));
}

TEST(Relay, BatchFrameCarriesDescriptorAndBoundary) {
  Segs s;
  const BatchMsg m = msg_of(7);
  write_leader_side(*s.leader, m);
  net::Batch f;
  std::vector<uint8_t> buf;
  ASSERT_TRUE(relay::make_batch_frame(*s.leader, 1, m, &buf, &f).ok());
  EXPECT_EQ(f.boundary.size(), size_t(5 * 32 * 4));  // the rows in use, not max_tokens
  EXPECT_LT(f.descriptor.size(), desc_bytes(s.leader->dims()) / 4);  // the parts in use
  BatchMsg got;
  Status st = relay::take_batch_frame(*s.worker, 1, f, 0, &got);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(got.batch_id, 7u);
  EXPECT_EQ(got.slot, m.slot);
  EXPECT_EQ(got.n_tokens, 5);
  EXPECT_TRUE(worker_holds(*s.leader, *s.worker, m));
  EXPECT_EQ(s.worker->result(m.slot).hdr->stage_busy_ns[0], 0u);  // the head's clear
}

TEST(Relay, WorkerRefusesFramesThatDisagreeWithThePlan) {
  Segs s;
  const BatchMsg m = msg_of(7);
  write_leader_side(*s.leader, m);
  net::Batch good;
  std::vector<uint8_t> buf;
  ASSERT_TRUE(relay::make_batch_frame(*s.leader, 1, m, &buf, &good).ok());
  BatchMsg got;
  auto code = [&](net::Batch f, uint64_t last = 0) {
    return relay::take_batch_frame(*s.worker, 1, f, last, &got).code();
  };
  net::Batch f = good;
  f.descriptor = f.descriptor.subspan(1);
  EXPECT_EQ(code(f), ErrorCode::kInvalidArgument) << "a short descriptor";
  f = good, f.hidden = 64;
  EXPECT_EQ(code(f), ErrorCode::kInvalidArgument) << "another width";
  f = good, f.slot = kInflight;
  EXPECT_EQ(code(f), ErrorCode::kInvalidArgument) << "a slot out of range";
  f = good, f.boundary_tokens = 4, f.boundary = f.boundary.subspan(0, 4 * 32 * 4);
  EXPECT_EQ(code(f), ErrorCode::kInvalidArgument) << "fewer boundary rows than tokens";
  f = good, f.msg_version = uint16_t(kMsgVersion + 1);
  EXPECT_EQ(code(f), ErrorCode::kInvalidArgument) << "another message version";
  EXPECT_EQ(code(good, 7), ErrorCode::kInvalidArgument) << "an id that does not increase";
  std::vector<uint8_t> desc(good.descriptor.begin(), good.descriptor.end());
  const int32_t copies = 99;  // the header's count past max_rows: refused before it sizes a read
  std::memcpy(desc.data() + offsetof(DescHeader, n_copies), &copies, 4);
  f = good, f.descriptor = desc;
  EXPECT_EQ(code(f), ErrorCode::kInvalidArgument) << "block copies out of range";
  EXPECT_EQ(relay::take_batch_frame(*s.worker, 2, good, 0, &got).code(),
            ErrorCode::kInvalidArgument)
      << "a cut past the tail";
}

// The batch m as the worker's relay would have it: its descriptor and
// boundary copied over (the result's parts are cut by the descriptor).
void carry_batch(Segs& s, const BatchMsg& m) {
  net::Batch f;
  std::vector<uint8_t> buf;
  ASSERT_TRUE(relay::make_batch_frame(*s.leader, 1, m, &buf, &f).ok());
  BatchMsg got;
  ASSERT_TRUE(relay::take_batch_frame(*s.worker, 1, f, 0, &got).ok());
}

TEST(Relay, LeaderRefusesADescriptorWhoseCountsAreOutOfRange) {
  Segs s;
  const BatchMsg m = msg_of(7);
  std::vector<uint8_t> buf;
  net::Batch f;
  write_leader_side(*s.leader, m);
  s.leader->desc(m.slot).rows[1].n_table = 9;  // max_table 8
  EXPECT_EQ(relay::make_batch_frame(*s.leader, 1, m, &buf, &f).code(), ErrorCode::kBatchRefused);
  write_leader_side(*s.leader, m);
  s.leader->desc(m.slot).sampling[0].n_logit_bias = kMaxLogitBias + 1;
  EXPECT_EQ(relay::make_batch_frame(*s.leader, 1, m, &buf, &f).code(), ErrorCode::kBatchRefused);
  write_leader_side(*s.leader, m);
  s.leader->desc(m.slot).hdr->n_copies = 5;  // max_rows 4
  EXPECT_EQ(relay::make_batch_frame(*s.leader, 1, m, &buf, &f).code(), ErrorCode::kBatchRefused);
}

TEST(Relay, ResultKeepsTheLeadersStageTimes) {
  Segs s;
  const BatchMsg m = msg_of(9);
  write_leader_side(*s.leader, m);
  carry_batch(s, m);
  write_tail_result(*s.worker, m);
  s.worker->result(m.slot).hdr->stage_busy_ns[0] = 77;  // stale on the worker
  net::Result f;
  std::vector<uint8_t> buf;
  ASSERT_TRUE(relay::make_result_frame(*s.worker, m, &buf, &f).ok());
  BatchMsg back;
  Status st = relay::take_result_frame(*s.leader, 1, f, m, &back);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const ResultView r = s.leader->result(m.slot);
  EXPECT_EQ(r.hdr->batch_id, 9u);
  EXPECT_EQ(r.token[1], 91);
  EXPECT_EQ(r.hdr->stage_busy_ns[0], 1009u);
  EXPECT_EQ(r.hdr->stage_busy_ns[1], 2009u);
  EXPECT_EQ(back.batch_id, 9u);

  BatchMsg other = msg_of(13);  // same slot, another batch
  EXPECT_EQ(relay::take_result_frame(*s.leader, 1, f, other, &back).code(),
            ErrorCode::kInvalidArgument);
  f.bytes = f.bytes.subspan(8);
  EXPECT_EQ(relay::take_result_frame(*s.leader, 1, f, m, &back).code(),
            ErrorCode::kInvalidArgument);
}

TEST(Relay, ResultCarriesOnlyThePartsTheBatchAsksFor) {
  Segs s;
  const BatchMsg m = msg_of(5);  // 2 rows, 5 tokens
  write_leader_side(*s.leader, m);
  std::memset(static_cast<void*>(s.leader->desc(m.slot).hdr), 0, desc_bytes(s.leader->dims()));
  carry_batch(s, m);
  write_tail_result(*s.worker, m);
  std::vector<uint8_t> buf;
  net::Result f;
  ASSERT_TRUE(relay::make_result_frame(*s.worker, m, &buf, &f).ok());
  const size_t rows_only = sizeof(ResultHeader) + 3 * 4 * 2 + sizeof(TopLogprob) * kMaxLogprobs * 2;
  EXPECT_EQ(f.bytes.size(), rows_only);
  EXPECT_LT(f.bytes.size(), result_bytes(s.worker->dims()) / 4);

  // A row that asks for prompt logprobs brings the batch's prompt records along.
  for (Segment* seg : {s.leader.get(), s.worker.get()})
    seg->desc(m.slot).rows[1].prompt_logprobs = 1;
  s.worker->result(m.slot).prompt[3].token = 4242;
  ASSERT_TRUE(relay::make_result_frame(*s.worker, m, &buf, &f).ok());
  EXPECT_EQ(f.bytes.size(), rows_only + sizeof(PromptRecord) * 5);
  BatchMsg back;
  Status st = relay::take_result_frame(*s.leader, 1, f, m, &back);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(s.leader->result(m.slot).prompt[3].token, 4242);
  EXPECT_EQ(s.leader->result(m.slot).token[1], 51);

  // The leader cuts by its own descriptor: a frame cut otherwise is refused.
  s.leader->desc(m.slot).rows[1].prompt_logprobs = 0;
  EXPECT_EQ(relay::take_result_frame(*s.leader, 1, f, m, &back).code(),
            ErrorCode::kInvalidArgument);
}

std::string spec_of(uint64_t id) {
  return "{\"type\":\"object\",\"id\":" + std::to_string(id) + "}";
}
net::ByteView view_of(const std::string& b) {
  return net::ByteView(reinterpret_cast<const uint8_t*>(b.data()), b.size());
}

// Row r of the leader's batch m is constrained by table entry e under id.
void constrain(Segs& s, const BatchMsg& m, int r, uint32_t e, uint64_t id) {
  s.leader->desc(m.slot).sampling[r].grammar_entry = e + 1;  // 0: unconstrained
  s.leader->desc(m.slot).sampling[r].grammar_id = id;
}

TEST(Relay, GrammarSpecsCrossOnceBeforeTheBatchThatNamesThem) {
  Segs s(4);
  const BatchMsg m = msg_of(3);
  write_leader_side(*s.leader, m);
  s.leader->grammar_table().write(2, 9, spec_of(9));
  constrain(s, m, 0, 2, 9), constrain(s, m, 1, 2, 9);  // two rows, one spec
  std::vector<uint64_t> sent(4, 0);
  std::vector<std::string> specs;
  std::vector<net::Grammar> frames;
  ASSERT_TRUE(relay::make_grammar_frames(*s.leader, m, sent, &specs, &frames).ok());
  ASSERT_EQ(frames.size(), 1u) << "one frame per entry, not per row";
  EXPECT_EQ(frames[0].entry, 2u);
  EXPECT_EQ(frames[0].id, 9u);
  Status st = relay::take_grammar_frame(*s.worker, frames[0]);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::string got;
  ASSERT_TRUE(s.worker->grammar_table().read(2, 9, &got).ok());
  EXPECT_EQ(got, spec_of(9));
  sent[2] = 9;  // what the leader's loop records once the frame has gone
  ASSERT_TRUE(relay::make_grammar_frames(*s.leader, m, sent, &specs, &frames).ok());
  EXPECT_TRUE(frames.empty()) << "the worker holds it already";

  // The leader refuses a row naming an entry that is not there as the tail
  // would; the worker refuses frames its plan cannot hold.
  constrain(s, m, 1, 4, 9);
  EXPECT_EQ(relay::make_grammar_frames(*s.leader, m, sent, &specs, &frames).code(),
            ErrorCode::kBatchRefused);
  constrain(s, m, 1, 3, 11);  // entry 3 is empty
  EXPECT_EQ(relay::make_grammar_frames(*s.leader, m, sent, &specs, &frames).code(),
            ErrorCode::kBatchRefused);
  const std::string big(257, 'x'), small = spec_of(1);
  EXPECT_EQ(relay::take_grammar_frame(*s.worker, {4, 1, view_of(small)}).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(relay::take_grammar_frame(*s.worker, {1, 1, view_of(big)}).code(),
            ErrorCode::kInvalidArgument);
  Segs none(0, "-none");  // a plan without a table
  EXPECT_EQ(relay::take_grammar_frame(*none.worker, {0, 1, view_of(small)}).code(),
            ErrorCode::kInvalidArgument);
}

TEST(Relay, BothRelaysOverLoopbackCarryEveryBatchInOrder) {
  Segs s;
  LoopbackRelays relays(s);
  ASSERT_TRUE(relays.listened);
  constexpr uint64_t kBatches = 300;
  std::atomic<int> tail_bad{0};
  std::thread tail([&] {  // stage 1 on the worker, as far as the ring can tell
    auto stop = [&] { return s.worker->stopping(); };
    for (uint64_t n = 0; n < kBatches; ++n) {
      BatchMsg m;
      if (!s.worker->ring(1).pop(m, stop)) return;
      if (!worker_holds(*s.leader, *s.worker, m)) tail_bad.fetch_add(1);
      write_tail_result(*s.worker, m);
      if (!s.worker->ring(2).push(m, stop)) return;
    }
  });
  auto stop = [&] { return s.leader->stopping(); };
  uint64_t next = 1, done = 0;
  while (done < kBatches) {  // the bridge: at most kInflight batches out
    if (next <= kBatches && next - done <= kInflight) {
      const BatchMsg m = msg_of(next, 2 + int(next % 15));
      write_leader_side(*s.leader, m);
      ASSERT_TRUE(s.leader->ring(1).push(m, stop));
      ++next;
      continue;
    }
    BatchMsg m;
    ASSERT_TRUE(s.leader->ring(2).pop(m, stop));
    ASSERT_EQ(m.batch_id, done + 1) << "in order";
    const ResultView r = s.leader->result(m.slot);
    ASSERT_EQ(r.hdr->batch_id, m.batch_id);
    ASSERT_EQ(r.token[0], int32_t(m.batch_id * 10));
    ASSERT_EQ(r.hdr->stage_busy_ns[0], 1000 + m.batch_id);
    ASSERT_EQ(r.hdr->stage_busy_ns[1], 2000 + m.batch_id);
    ++done;
  }
  EXPECT_TRUE(s.leader->drained()) << "the relay counts a batch held until its result is back";
  s.leader->request_shutdown();  // the leader's relay says Bye, the worker's ends on it
  relays.join(), tail.join();
  s.worker->request_shutdown();
  EXPECT_EQ(tail_bad.load(), 0);
  EXPECT_TRUE(relays.leader_end.ok()) << relays.leader_end.to_string();
  EXPECT_TRUE(relays.worker_end.ok()) << relays.worker_end.to_string();
  EXPECT_EQ(s.leader->stage(1).stats.batches.load(), kBatches);
}

// Over a real link: every constrained batch finds its spec in the
// worker's table when the tail reads it, also after the bridge has
// rewritten the entry for another request.
TEST(Relay, LoopbackTailReadsEverySpecTheLeadersBatchesName) {
  Segs s(4);
  LoopbackRelays relays(s);
  ASSERT_TRUE(relays.listened);
  constexpr uint64_t kBatches = 12;
  std::atomic<int> tail_bad{0};
  std::thread tail([&] {
    auto stop = [&] { return s.worker->stopping(); };
    for (uint64_t n = 0; n < kBatches; ++n) {
      BatchMsg m;
      if (!s.worker->ring(1).pop(m, stop)) return;
      const SamplingParams& sp = s.worker->desc(m.slot).sampling[0];
      std::string got;  // read as the tail reads it (stages/tail_grammar.cpp)
      if (!s.worker->grammar_table()
               .read(int32_t(sp.grammar_entry) - 1, sp.grammar_id, &got)
               .ok() ||
          got != spec_of(sp.grammar_id))
        tail_bad.fetch_add(1);
      write_tail_result(*s.worker, m);
      if (!s.worker->ring(2).push(m, stop)) return;
    }
  });
  auto stop = [&] { return s.leader->stopping(); };
  for (uint64_t id = 1; id <= kBatches; ++id) {  // one at a time; entry 1 rewritten for
    const BatchMsg m = msg_of(id);               // every odd batch, named again by the next
    write_leader_side(*s.leader, m);
    const uint64_t gid = 100 + (id + 1) / 2;
    if (id % 2 == 1) s.leader->grammar_table().write(1, gid, spec_of(gid));
    constrain(s, m, 0, 1, gid);
    ASSERT_TRUE(s.leader->ring(1).push(m, stop));
    BatchMsg back;
    ASSERT_TRUE(s.leader->ring(2).pop(back, stop));
    ASSERT_EQ(back.batch_id, id);
    ASSERT_EQ(back.status, 0);
  }
  s.leader->request_shutdown();
  relays.join(), tail.join();
  s.worker->request_shutdown();
  EXPECT_EQ(tail_bad.load(), 0);
  EXPECT_TRUE(relays.leader_end.ok()) << relays.leader_end.to_string();
  EXPECT_TRUE(relays.worker_end.ok()) << relays.worker_end.to_string();
}

// One batch at a time over loopback, the tail holding each for 2 ms (a
// stage's step: both relays go to sleep meanwhile), the bridge waiting
// 2 ms between batches: what the two relays and the link add to a step,
// the round trip less the tail's hold. A relay woken by its link is
// tens of µs; one that waits for a poll pays up to the poll period on
// each side.
// One round of it: the p50 in us (printed with the p90).
double one_batch_at_a_time(bool one_wait) {
  Segs s;
  relay::RelayOptions o;
  o.one_wait = one_wait;
  LoopbackRelays relays(s, o);
  EXPECT_TRUE(relays.listened);
  if (!relays.listened) return 1e9;
  constexpr int kBatches = 200;
  std::vector<int64_t> hold(kBatches + 1);
  std::atomic<int> held{0};
  std::thread tail([&] {
    auto stop = [&] { return s.worker->stopping(); };
    for (int n = 0; n < kBatches; ++n) {
      BatchMsg m;
      if (!s.worker->ring(1).pop(m, stop)) return;
      const int64_t t0 = now_ns();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      write_tail_result(*s.worker, m);
      hold[m.batch_id] = now_ns() - t0;
      held.fetch_add(1);
      if (!s.worker->ring(2).push(m, stop)) return;
    }
  });
  auto stop = [&] { return s.leader->stopping(); };
  std::vector<int64_t> cost;
  for (uint64_t id = 1; id <= kBatches; ++id) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const BatchMsg m = msg_of(id, 2);  // a decode step of two rows
    write_leader_side(*s.leader, m);
    const int64_t t0 = now_ns();
    EXPECT_TRUE(s.leader->ring(1).push(m, stop));
    BatchMsg back;
    if (!s.leader->ring(2).pop(back, stop)) break;
    EXPECT_EQ(back.batch_id, id);
    EXPECT_EQ(back.status, 0) << "the batch went to the worker and back, not refused";
    cost.push_back(now_ns() - t0 - hold[id]);
  }
  s.leader->request_shutdown();
  relays.join();
  s.worker->request_shutdown();
  tail.join();
  EXPECT_EQ(held.load(), kBatches) << "every batch held by the worker's tail";
  EXPECT_EQ(cost.size(), size_t(kBatches)) << "every batch back";
  if (cost.empty()) return 1e9;
  std::sort(cost.begin(), cost.end());
  const double p50 = double(cost[cost.size() / 2]) / 1e3;
  const double p90 = double(cost[cost.size() * 9 / 10]) / 1e3;
  std::printf("relay round trip less the tail's hold (%s): p50 %.0f us, p90 %.0f us\n",
              one_wait ? "one io_uring wait" : "watcher thread", p50, p90);
  return p50;
}

TEST(Relay, OneBatchAtATimeCostsTheLinkNotAPoll) {
  // Both ways a relay sleeps (relay/ring_or_link.h): far above a woken
  // relay's cost even on a loaded machine, far below a frame left for the
  // relays' 20 ms sleep.
  EXPECT_LT(one_batch_at_a_time(true), 5000.0);
  EXPECT_LT(one_batch_at_a_time(false), 5000.0);
}

TEST(Relay, WorkerEndsALinkThatSendsAMalformedBatch) {
  Segs s;
  const net::ClusterKey key(std::vector<uint8_t>(32, 0x5a));
  net::LinkOptions wo, lo;
  wo.role = net::Role::kWorker, wo.name = "worker-1";
  lo.role = net::Role::kLeader, lo.name = "leader";
  std::unique_ptr<net::UcxListener> listener;
  ASSERT_TRUE(net::UcxListener::listen("127.0.0.1", 0, key, wo, &listener).ok());
  const uint16_t port = listener->port();
  Status worker_end;
  std::thread worker([&] {
    std::unique_ptr<net::UcxLink> link;
    worker_end = listener->accept(10000, &link);
    if (worker_end.ok()) worker_end = relay::run_worker_relay(*s.worker, *link, {});
  });
  std::unique_ptr<net::UcxLink> link;
  ASSERT_TRUE(net::UcxLink::connect("127.0.0.1", port, key, lo, &link).ok());
  const BatchMsg m = msg_of(3);
  write_leader_side(*s.leader, m);
  net::Batch f;
  std::vector<uint8_t> buf;
  ASSERT_TRUE(relay::make_batch_frame(*s.leader, 1, m, &buf, &f).ok());
  f.descriptor = f.descriptor.subspan(64);
  ASSERT_TRUE(link->send(f).ok());
  net::Frame answer;
  Status got = link->recv(10000, &answer);
  worker.join();
  EXPECT_EQ(worker_end.code(), ErrorCode::kInvalidArgument) << worker_end.to_string();
  ASSERT_TRUE(got.ok()) << got.to_string();
  ASSERT_TRUE(std::holds_alternative<net::Refuse>(answer.payload));
  EXPECT_NE(std::get<net::Refuse>(answer.payload).text.find("descriptor"), std::string::npos);
  EXPECT_EQ(s.worker->ring(1).size(), 0u) << "nothing of it reached the ring";
}

}  // namespace

namespace {

// While a worker serves its leader, a peer without the key is refused (and
// logged), one with the key is told the worker is taken, and the leader's
// link carries on.
TEST(Relay, WorkerServingRefusesOtherJoiners) {
  Segs s;
  const net::ClusterKey key(std::vector<uint8_t>(32, 0x5a));
  const net::ClusterKey wrong(std::vector<uint8_t>(32, 0x77));
  net::LinkOptions wo, lo;
  wo.role = net::Role::kWorker, wo.name = "worker-1";
  lo.role = net::Role::kLeader, lo.name = "leader";
  std::unique_ptr<net::UcxListener> listener;
  ASSERT_TRUE(net::UcxListener::listen("127.0.0.1", 0, key, wo, &listener).ok());
  const uint16_t port = listener->port();
  Status worker_end;
  std::thread worker([&] {
    std::unique_ptr<net::UcxLink> link;
    worker_end = listener->accept(10000, &link);
    relay::RelayOptions o;
    o.listener = listener.get();
    if (worker_end.ok()) worker_end = relay::run_worker_relay(*s.worker, *link, o);
  });
  std::unique_ptr<net::UcxLink> link;
  ASSERT_TRUE(net::UcxLink::connect("127.0.0.1", port, key, lo, &link).ok());

  std::unique_ptr<net::UcxLink> rogue;
  lo.name = "rogue";
  EXPECT_EQ(net::UcxLink::connect("127.0.0.1", port, wrong, lo, &rogue).code(),
            ErrorCode::kUnauthenticated);
  std::unique_ptr<net::UcxLink> second;
  Status st = net::UcxLink::connect("127.0.0.1", port, key, lo, &second);
  ASSERT_TRUE(st.ok()) << st.to_string();
  net::Frame f;
  ASSERT_TRUE(second->recv(5000, &f).ok());
  ASSERT_TRUE(std::holds_alternative<net::Refuse>(f.payload));
  EXPECT_EQ(std::get<net::Refuse>(f.payload).code, ErrorCode::kUnavailable);

  const BatchMsg m = msg_of(1);  // the leader's link still works
  write_leader_side(*s.leader, m);
  net::Batch b;
  std::vector<uint8_t> buf;
  ASSERT_TRUE(relay::make_batch_frame(*s.leader, 1, m, &buf, &b).ok());
  ASSERT_TRUE(link->send(b).ok());
  BatchMsg got;
  const int64_t until = now_ns() + 10'000'000'000;
  ASSERT_TRUE(s.worker->ring(1).pop(got, [&] { return now_ns() > until; }));
  EXPECT_EQ(got.batch_id, 1u);
  EXPECT_TRUE(worker_holds(*s.leader, *s.worker, got));
  ASSERT_TRUE(link->close().ok());  // Bye: the worker's relay ends, ok
  worker.join();
  EXPECT_TRUE(worker_end.ok()) << worker_end.to_string();
}

}  // namespace

namespace {

// The leader's Pings: a worker's relay answers them (the round trip and the
// bytes are published); a peer that holds the link open and answers
// nothing ends the leader's relay with kTimeout, not a silent stall.
TEST(Relay, LeaderPingsMeasureTheRoundTripAndCatchASilentPeer) {
  for (const bool silent : {false, true}) {
    Segs s;
    const net::ClusterKey key(std::vector<uint8_t>(32, 0x5b));
    net::LinkOptions wo, lo;
    wo.role = net::Role::kWorker, wo.name = "worker-1";
    lo.role = net::Role::kLeader, lo.name = "leader";
    std::unique_ptr<net::UcxListener> listener;
    ASSERT_TRUE(net::UcxListener::listen("127.0.0.1", 0, key, wo, &listener).ok());
    std::atomic<bool> leader_done{false};
    std::thread worker([&] {
      std::unique_ptr<net::UcxLink> link;
      if (!listener->accept(10000, &link).ok()) return;
      if (!silent) {
        // The worker's silence limit, as `kvasird --worker` has one: a Bye
        // the leader's close could not flush in time (a loaded host) must
        // not leave this thread waiting on the link forever.
        relay::RelayOptions w;
        w.silence_ns = 10'000'000'000;
        (void)relay::run_worker_relay(*s.worker, *link, w);
        return;
      }
      while (!leader_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
    std::unique_ptr<net::UcxLink> link;
    ASSERT_TRUE(net::UcxLink::connect("127.0.0.1", listener->port(), key, lo, &link).ok());
    std::atomic<uint64_t> sent{0}, received{0};
    std::atomic<int64_t> rtt{0};
    relay::RelayOptions o;
    o.ping_ns = 20'000'000, o.silence_ns = 300'000'000;
    o.bytes_sent = &sent, o.bytes_received = &received, o.rtt_ns = &rtt;
    Status end;
    std::thread leader([&] { end = relay::run_leader_relay(*s.leader, *link, o); });
    if (!silent) {
      for (int i = 0; i < 500 && rtt.load() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s.leader->request_shutdown();  // the relay says Bye, the worker's ends on it
    }
    leader.join();
    leader_done = true;
    worker.join();
    if (silent) {
      EXPECT_EQ(end.code(), ErrorCode::kTimeout) << end.to_string();
      EXPECT_NE(end.message().find("nothing from the peer"), std::string::npos) << end.to_string();
    } else {
      EXPECT_TRUE(end.ok()) << end.to_string();
      EXPECT_GT(rtt.load(), 0);
      EXPECT_GT(sent.load(), 0u);
      EXPECT_GT(received.load(), 0u);
    }
  }
}

}  // namespace

namespace {

// A worker whose leader went silent (gone without closing the connection)
// ends the session after its silence limit: it is free for the next leader.
TEST(Relay, WorkerEndsASessionWhoseLeaderWentSilent) {
  Segs s;
  const net::ClusterKey key(std::vector<uint8_t>(32, 0x5c));
  net::LinkOptions wo, lo;
  wo.role = net::Role::kWorker, wo.name = "worker-1";
  lo.role = net::Role::kLeader, lo.name = "leader";
  std::unique_ptr<net::UcxListener> listener;
  ASSERT_TRUE(net::UcxListener::listen("127.0.0.1", 0, key, wo, &listener).ok());
  Status end;
  std::thread worker([&] {
    std::unique_ptr<net::UcxLink> link;
    end = listener->accept(10000, &link);
    relay::RelayOptions o;
    o.silence_ns = 300'000'000;
    if (end.ok()) end = relay::run_worker_relay(*s.worker, *link, o);
  });
  std::unique_ptr<net::UcxLink> link;
  ASSERT_TRUE(net::UcxLink::connect("127.0.0.1", listener->port(), key, lo, &link).ok());
  const int64_t t0 = ipc::now_ns();
  worker.join();  // the leader sends nothing
  EXPECT_EQ(end.code(), ErrorCode::kTimeout) << end.to_string();
  EXPECT_GE(ipc::now_ns() - t0, 250'000'000);
}

}  // namespace
