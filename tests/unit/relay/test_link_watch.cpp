// relay/link_watch.h: a frame arriving on an armed link rings the bell at
// once, an idle armed link rings nothing (no busy wake-ups), and a frame
// that came before the arm is reported as pending instead of being slept on.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "ipc/futex.h"
#include "net/ucx_link.h"
#include "relay/link_watch.h"
#include "tests/unit/relay/link_pair.h"

using namespace kvasir;

namespace {

using kvasir::testing::drain;
using Pair = kvasir::testing::LinkPair;

// Arms until the link has nothing pending (draining in between).
void arm(relay::LinkWatch& w, net::UcxLink& link) {
  for (int i = 0; i < 100; ++i) {
    bool armed = false;
    ASSERT_TRUE(w.arm(&armed).ok());
    if (armed) return;
    drain(link);
  }
  FAIL() << "never armed";
}

}  // namespace

TEST(LinkWatch, AFrameRingsTheBellAtOnceAndAnIdleLinkNothing) {
  Pair p;
  ASSERT_TRUE(p.worker && p.leader);
  ipc::Bell bell;
  relay::LinkWatch watch(*p.worker, bell);
  drain(*p.worker);
  arm(watch, *p.worker);
  const uint64_t rings0 = watch.rings();
  // Idle and armed: the watcher sleeps (a stale fd would ring over and over).
  const uint32_t seen = bell.seen();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(watch.rings(), rings0);
  EXPECT_EQ(bell.seen(), seen);
  std::vector<int64_t> woke;
  for (int round = 0; round < 20; ++round) {
    const uint32_t before = bell.seen();
    const int64_t t0 = ipc::now_ns();
    ASSERT_TRUE(p.leader->send(net::Ping{t0}).ok());
    bell.wait(before, 2'000'000'000);
    woke.push_back(ipc::now_ns() - t0);
    ASSERT_NE(bell.seen(), before) << "round " << round << ": no ring";
    // The frame may still be on its way in when the bell rings: drain
    // until it is here, then arm again.
    int got = 0;
    for (int i = 0; i < 1000 && got == 0; ++i) got = drain(*p.worker);
    EXPECT_EQ(got, 1);
    arm(watch, *p.worker);
  }
  // Far below the 20 ms a relay sleeps for: the frames woke it (the
  // median: a loaded machine may hold a wake-up back now and then).
  std::sort(woke.begin(), woke.end());
  EXPECT_LT(woke[woke.size() / 2], 10'000'000);
  // About one ring per frame, not a spinning watcher.
  EXPECT_LE(watch.rings() - rings0, 40u);
}

TEST(LinkWatch, AFrameBeforeTheArmIsPendingNotSleptOn) {
  Pair p;
  ASSERT_TRUE(p.worker && p.leader);
  ipc::Bell bell;
  relay::LinkWatch watch(*p.worker, bell);
  drain(*p.worker);
  ASSERT_TRUE(p.leader->send(net::Ping{1}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // it is in the socket now
  // Either arm() says the frame is pending, or the watcher rings for it:
  // never armed and silent with a frame waiting.
  const uint32_t seen = bell.seen();
  bool armed = false;
  ASSERT_TRUE(watch.arm(&armed).ok());
  if (armed) {
    bell.wait(seen, 2'000'000'000);
    EXPECT_NE(bell.seen(), seen) << "armed over a waiting frame and never rang";
  }
  int got = 0;
  for (int i = 0; i < 1000 && got == 0; ++i) got = drain(*p.worker);
  EXPECT_EQ(got, 1);
}
