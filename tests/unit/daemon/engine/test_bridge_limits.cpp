// The bridge's limits, against a ring whose stages
// never run: whatever the bridge submits stays in flight, so the queue, the
// running set and the KV accounting hold still and can be read exactly.
//
// - requests that could never run are refused at once (context, blocks);
// - the queue is bounded by max_queue, also under concurrent submissions,
//   and a full queue answers at once with "queue full" (the API's 429);
// - KV occupancy and internal waste are measured live (EngineStats);
// - what comes back from the tail is not trusted (the test plays the stages).
// (Requests flowing through real stage agents: test_bridge.cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "daemon/engine/bridge.h"
#include "ipc/batch.h"

namespace kvasir {
namespace {

constexpr int32_t kVocab = 97, kBlock = 4;

// A segment with two stages' rings and nobody serving them.
struct StalledRing {
  std::string name;
  std::unique_ptr<ipc::Segment> seg;
  explicit StalledRing(int32_t blocks, const std::string& tag, int32_t tables = 1) {
    name = ipc::Segment::name_for("sched-limits-" + tag + "-" + std::to_string(getpid()));
    ipc::SegmentParams p;
    p.n_stages = 2;
    p.dims = ipc::SlotDims{8, 64, 64, 8, 1, tables};
    p.block_size = kBlock;
    for (int s = 0; s < 2; ++s) p.stages[s] = ipc::StagePlan{s, s, 1, "cpu"};
    seg = ipc::Segment::create(name, p);
    seg->header().kv_blocks = blocks;
  }
  ~StalledRing() {
    seg->request_shutdown();
    ipc::Segment::remove(name);
  }
};

BridgeConfig config(int32_t blocks, Policy policy) {
  BridgeConfig c;
  c.limits = SchedLimits{8, 64, 64, 256};
  c.limits.policy = policy;
  c.n_blocks = blocks;
  c.block_size = kBlock;
  c.vocab = kVocab;
  return c;
}

GenRequest request(int prompt, int max_tokens) {
  GenRequest r;
  for (int i = 0; i < prompt; ++i) r.prompt.push_back(int32_t(1 + i % 50));
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

// Sink that records a refusal (the only event a stalled ring can produce).
struct Refusals {
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<ErrorCode> codes;
  EventSink sink() {
    return [this](const TokenEvent& ev) {
      if (ev.finish == FinishReason::kError) {
        std::lock_guard lk(mu);
        errors.push_back(ev.error.message());
        codes.push_back(ev.error.code());
      }
    };
  }
  size_t count() {
    std::lock_guard lk(mu);
    return errors.size();
  }
};

// Polls the engine's stats until `pred` holds (the engine thread updates
// them at least every 100 ms). Up to 30 s: a loaded machine (ctest -j2
// beside integration tests) took over 3 s to publish a state the engine
// reaches in milliseconds.
template <class Pred>
bool settle(Bridge& e, Pred pred) {
  for (int i = 0; i < 3000; ++i) {
    if (pred(e.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(BridgeLimits, RequestsThatCouldNeverRunAreRefusedAtOnce) {
  StalledRing ring(20, "never");
  BridgeConfig c = config(20, Policy::kChunked);
  c.context_length = 32;
  Bridge engine(*ring.seg, c);
  Refusals r;
  // The prompt alone beyond the context.
  EXPECT_EQ(engine.submit(request(33, 1), r.sink()), 0u);
  // A prompt that fits, but not with max_tokens.
  EXPECT_EQ(engine.submit(request(20, 13), r.sink()), 0u);
  // Fits the context, not the KV pool (context 0 = unknown: blocks decide).
  BridgeConfig small = config(3, Policy::kChunked);
  StalledRing ring2(3, "blocks");
  Bridge engine2(*ring2.seg, small);
  EXPECT_EQ(engine2.submit(request(10, 3), r.sink()), 0u);  // 13 tokens: 4 blocks > 3
  ASSERT_EQ(r.count(), 3u);                                 // refused synchronously, from submit()
  EXPECT_NE(r.errors[0].find("context of 32"), std::string::npos) << r.errors[0];
  EXPECT_NE(r.errors[1].find("max_tokens (13)"), std::string::npos) << r.errors[1];
  EXPECT_NE(r.errors[2].find("KV blocks"), std::string::npos) << r.errors[2];
  for (ErrorCode c : r.codes) EXPECT_EQ(c, ErrorCode::kContextLength);
  // The limits are exact: one token less fits.
  EXPECT_NE(engine.submit(request(20, 12), r.sink()), 0u);
  EXPECT_NE(engine2.submit(request(10, 2), r.sink()), 0u);
  EXPECT_EQ(r.count(), 3u);
}

TEST(BridgeLimits, ASlidingGroupBoundsItsOwnPool) {
  // A sliding group (window 8, blocks of 4, rows of at most 64 tokens):
  // a sequence holds at most ceil((7 + 64) / 4) + 1 = 19 sliding blocks,
  // whatever its length. A pool of 18 refuses what would reach 19; one of
  // 19 takes a sequence far longer than the pool, which the full pool holds.
  StalledRing ring(200, "swa", 2);
  BridgeConfig c = config(200, Policy::kChunked);
  c.sliding = SlidingKv{8, 18};
  Refusals r;
  {
    Bridge engine(*ring.seg, c);
    EXPECT_EQ(engine.submit(request(100, 4), r.sink()), 0u);  // 26 blocks: 19 sliding
    EXPECT_NE(engine.submit(request(60, 8), r.sink()), 0u);   // 17 blocks, 17 sliding
    ASSERT_EQ(r.count(), 1u);
    EXPECT_NE(r.errors[0].find("19 sliding-window KV blocks"), std::string::npos) << r.errors[0];
    EXPECT_TRUE(settle(engine, [](const EngineStats& s) { return s.blocks_swa_total == 18; }));
  }
  StalledRing ring2(200, "swa2", 2);
  c.sliding = SlidingKv{8, 19};
  Bridge engine(*ring2.seg, c);
  EXPECT_NE(engine.submit(request(200, 50), r.sink()), 0u);  // 63 blocks
  EXPECT_EQ(r.count(), 1u);
}

TEST(BridgeLimits, QueueIsBoundedAndAFullQueueAnswersAtOnce) {
  StalledRing ring(200, "queue");
  BridgeConfig c = config(200, Policy::kNaive);  // one runs, the rest wait
  c.max_queue = 5;
  Bridge engine(*ring.seg, c);
  Refusals r;
  ASSERT_NE(engine.submit(request(3, 4), r.sink()), 0u);
  ASSERT_TRUE(settle(engine, [](const EngineStats& s) { return s.running == 1; }));
  // Four threads race 40 submissions: exactly max_queue get in, whatever
  // the interleaving with the engine thread moving them into its queue.
  std::atomic<int> accepted{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 10; ++i)
        if (engine.submit(request(3, 4), r.sink()) != 0) accepted++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(accepted.load(), 5);
  EXPECT_EQ(r.count(), 35u);
  for (auto& e : r.errors) EXPECT_EQ(e, "queue full (5 requests waiting)");
  for (ErrorCode c : r.codes) EXPECT_EQ(c, ErrorCode::kQueueFull);
  ASSERT_TRUE(settle(engine, [](const EngineStats& s) { return s.waiting == 5; }));
  EXPECT_EQ(engine.stats().running, 1);
  // Still full later: nothing left the queue.
  EXPECT_EQ(engine.submit(request(3, 4), r.sink()), 0u);
}

TEST(BridgeLimits, KvOccupancyAndWasteAreMeasuredLive) {
  // Blocks of 4. Prompts of 5, 8 and 1 tokens are admitted and their
  // prefills sent (and held in the stalled ring): 2 + 2 + 1 blocks, 20
  // slots for 14 positions, so 6 slots of waste, all in last blocks.
  StalledRing ring(50, "waste");
  Bridge engine(*ring.seg, config(50, Policy::kContinuous));
  Refusals r;
  for (int p : {5, 8, 1}) ASSERT_NE(engine.submit(request(p, 4), r.sink()), 0u);
  ASSERT_TRUE(settle(engine, [](const EngineStats& s) { return s.running == 3; }));
  ASSERT_TRUE(settle(engine, [](const EngineStats& s) { return s.kv_slots_used == 14; }));
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.blocks_total, 50);
  EXPECT_EQ(s.blocks_free, 45);
  EXPECT_EQ(s.kv_slots_used, 14);
  EXPECT_EQ(s.kv_waste, 6);
  EXPECT_EQ(s.tokens_prompt, 14);
  EXPECT_LT(s.kv_waste, int64_t(kBlock) * s.running);  // under one block per sequence
}

TEST(BridgeLimits, StaticPaddingShowsAsWaste) {
  // Under `static` each member holds KV for the batch's longest prompt (8):
  // 2 blocks each, 24 slots for 14 real positions; the filler's slots are
  // waste (the padded positions are computed but are not the sequence's).
  StalledRing ring(50, "static");
  Bridge engine(*ring.seg, config(50, Policy::kStatic));
  Refusals r;
  for (int p : {5, 8, 1}) ASSERT_NE(engine.submit(request(p, 4), r.sink()), 0u);
  ASSERT_TRUE(settle(engine, [](const EngineStats& s) { return s.running == 3; }));
  ASSERT_TRUE(settle(engine, [](const EngineStats& s) { return s.blocks_free == 44; }));
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.blocks_free, 44);
  EXPECT_EQ(s.kv_slots_used + s.kv_waste, 24);
  EXPECT_LE(s.kv_slots_used, 14);
}

// Tokens and final events per request.
struct Events {
  std::mutex mu;
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, ErrorCode> error;
  EventSink sink(int key) {
    return [this, key](const TokenEvent& ev) {
      std::lock_guard lk(mu);
      if (ev.token >= 0) tokens[key].push_back(ev.token);
      if (ev.finish == FinishReason::kError) error[key] = ev.error.code();
    };
  }
};

// Plays both stages of the stalled ring once: takes the batch the bridge
// submitted and answers each row with token_for(its request id), the
// result header claiming `extra_rows` more rows than the batch has.
// Returns the batch's row count (0: nothing came).
template <class F>
int32_t answer(StalledRing& ring, F token_for, int32_t extra_rows = 0) {
  ipc::BatchMsg m;
  bool got = false;
  for (int i = 0; i < 300 && !(got = ring.seg->ring(0).try_pop(m)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!got) {
    ADD_FAILURE() << "the bridge submitted nothing";
    return 0;
  }
  ipc::DescView desc = ring.seg->desc(m.slot);
  ipc::ResultView res = ring.seg->result(m.slot);
  res.hdr->batch_id = m.batch_id;
  res.hdr->n_rows = m.n_rows + extra_rows;
  for (int32_t r = 0; r < m.n_rows; ++r) {
    res.token[r] = token_for(desc.rows[r].seq_id);
    res.n_top[r] = 0;
  }
  EXPECT_TRUE(ring.seg->ring(2).try_push(m));
  return m.n_rows;
}

TEST(BridgeLimits, TheTailIsNotTrusted) {
  // A sampled token outside the vocabulary fails its own request
  // (kBadResult); the other request's token is delivered, whether the two
  // share a batch or not.
  StalledRing ring(50, "trust");
  Bridge engine(*ring.seg, config(50, Policy::kChunked));
  Events ev;
  const RequestId bad = engine.submit(request(1, 2), ev.sink(0));
  const RequestId good = engine.submit(request(1, 2), ev.sink(1));
  ASSERT_NE(bad, 0u);
  ASSERT_NE(good, 0u);
  auto token_for = [&](uint64_t id) { return id == bad ? kVocab + 3 : 5; };
  // The first batch holds the first request, and the second too unless it
  // reached the engine thread after that batch was formed.
  if (answer(ring, token_for) == 1) answer(ring, token_for);
  ASSERT_TRUE(settle(engine, [](const EngineStats& s) { return s.running == 1; }));
  {
    std::lock_guard lk(ev.mu);
    EXPECT_TRUE(ev.tokens[0].empty());
    EXPECT_EQ(ev.error[0], ErrorCode::kBadResult);
    EXPECT_EQ(ev.tokens[1], std::vector<int32_t>{5});
    EXPECT_EQ(ev.error.count(1), 0u);
  }
  // A result slot that disagrees with its message fails the whole batch.
  answer(ring, token_for, 2);
  ASSERT_TRUE(settle(engine, [](const EngineStats& s) { return s.running == 0; }));
  {
    std::lock_guard lk(ev.mu);
    EXPECT_EQ(ev.tokens[1], std::vector<int32_t>{5});
    EXPECT_EQ(ev.error[1], ErrorCode::kBadResult);
  }
  EXPECT_EQ(engine.stats().blocks_free, 50);
  EXPECT_EQ(engine.refused_results(), 0u);
}

}  // namespace
}  // namespace kvasir
