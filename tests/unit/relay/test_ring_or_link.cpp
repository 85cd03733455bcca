// relay/ring_or_link.h: the relay's one sleep ends for a frame on its link
// and for a ring of its bell, at once; an idle link and a silent bell let
// it sleep its whole period; a bell that moved before the sleep ends it at
// once. Each both ways: the io_uring wait, and the watcher thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "ipc/futex.h"
#include "net/ucx_link.h"
#include "relay/ring_or_link.h"
#include "tests/unit/relay/link_pair.h"

using namespace kvasir;

namespace {

using kvasir::testing::drain;
using Pair = kvasir::testing::LinkPair;

// One sleep of at most 2 s: how long it lasted.
int64_t timed_sleep(relay::RingOrLink& s, uint32_t seen, int64_t poll_ns = 2'000'000'000) {
  const int64_t t0 = ipc::now_ns();
  EXPECT_TRUE(s.sleep(seen, ipc::WaitPolicy{0, poll_ns}).ok());
  return ipc::now_ns() - t0;
}

// Sleeps until one that lasted at least 50 ms: the link is drained and
// whatever an earlier step posted has completed (spurious returns are
// allowed, a sleep that never lasts is not).
void settle(relay::RingOrLink& s, net::UcxLink& link, ipc::Bell& bell) {
  for (int i = 0; i < 100; ++i) {
    drain(link);
    if (timed_sleep(s, bell.seen(), 50'000'000) >= 45'000'000) return;
  }
  FAIL() << "never slept";
}

class RingOrLinkTest : public ::testing::TestWithParam<bool> {};

}  // namespace

TEST_P(RingOrLinkTest, AFrameOrARingEndsTheSleepAtOnceAndSilenceDoesNot) {
  Pair p;
  ASSERT_TRUE(p.worker && p.leader);
  ipc::Bell bell;
  relay::RingOrLink sleeper(*p.worker, bell, GetParam());
  if (GetParam()) {
    EXPECT_TRUE(sleeper.one_wait()) << "this kernel has io_uring's futex wait";
  }
  settle(sleeper, *p.worker, bell);
  const uint64_t wakes0 = sleeper.link_wakes();
  std::vector<int64_t> by_frame, by_ring;
  for (int round = 0; round < 20; ++round) {
    std::thread sender([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_TRUE(p.leader->send(net::Ping{1}).ok());
    });
    int64_t slept = 0;
    int got = 0;
    for (int i = 0; i < 100 && got == 0; ++i) {
      slept += timed_sleep(sleeper, bell.seen());
      got = drain(*p.worker);
    }
    sender.join();
    EXPECT_EQ(got, 1) << "round " << round;
    by_frame.push_back(slept);
    settle(sleeper, *p.worker, bell);
    std::thread ringer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      bell.ring();
    });
    const uint32_t seen = bell.seen();
    int64_t until_rung = 0;
    for (int i = 0; i < 100 && bell.seen() == seen; ++i) until_rung += timed_sleep(sleeper, seen);
    ringer.join();
    by_ring.push_back(until_rung);
    settle(sleeper, *p.worker, bell);
  }
  // The 5 ms before the event and a wake-up, far below the 2 s sleep (the
  // median: a loaded machine may hold a wake-up back now and then).
  std::sort(by_frame.begin(), by_frame.end());
  std::sort(by_ring.begin(), by_ring.end());
  EXPECT_LT(by_frame[by_frame.size() / 2], 50'000'000);
  EXPECT_LT(by_ring[by_ring.size() / 2], 50'000'000);
  EXPECT_GE(sleeper.link_wakes() - wakes0, 20u) << "the frames woke it through the link";
  EXPECT_LE(sleeper.link_wakes() - wakes0, 60u) << "about once a frame, not a spinning fd";
}

TEST_P(RingOrLinkTest, ABellRungBeforeTheSleepEndsItAtOnce) {
  Pair p;
  ASSERT_TRUE(p.worker && p.leader);
  ipc::Bell bell;
  relay::RingOrLink sleeper(*p.worker, bell, GetParam());
  settle(sleeper, *p.worker, bell);
  const uint32_t seen = bell.seen();
  bell.ring();
  EXPECT_LT(timed_sleep(sleeper, seen), 50'000'000);
  // An idle link and a silent bell: the whole period.
  settle(sleeper, *p.worker, bell);
  EXPECT_GE(timed_sleep(sleeper, bell.seen(), 100'000'000), 90'000'000);
}

INSTANTIATE_TEST_SUITE_P(Relay, RingOrLinkTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "OneWait" : "Watcher";
                         });
