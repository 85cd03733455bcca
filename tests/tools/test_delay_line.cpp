// The link model of kvasir-linkshaper (tests/tools/linkshaper/delay_line.h)
// on a virtual clock: when frames leave, in what order, which are lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "delay_line.h"

namespace ks = kvasir::linkshaper;

namespace {
constexpr ks::Nanos kMs = 1'000'000;
const std::vector<uint8_t> kFrame(1250, 0xab);  // 10,000 bits

// Departure times of every frame pushed, draining the line as it goes.
std::vector<ks::Nanos> departures(ks::DelayLine& line) {
  std::vector<ks::Nanos> out;
  for (ks::Nanos t = line.next_departure(); t >= 0; t = line.next_departure()) {
    EXPECT_FALSE(line.due(t).empty());
    out.push_back(t);
    line.pop(true, t);
  }
  return out;
}
}  // namespace

TEST(DelayLine, HoldsAFrameForTheDelayExactly) {
  ks::DelayLine line({.delay_ms = 2}, 1514, 1);
  ASSERT_EQ(line.push(kFrame, 5 * kMs), ks::Admit::kQueued);
  EXPECT_TRUE(line.due(7 * kMs - 1).empty());
  auto f = line.due(7 * kMs);
  ASSERT_EQ(f.size(), kFrame.size());
  EXPECT_EQ(f[0], 0xab);
  line.pop(true, 7 * kMs + 30'000);  // sent 30 us late
  EXPECT_EQ(line.next_departure(), -1);
  EXPECT_EQ(line.counters().late_ns_max, 30'000);
  EXPECT_EQ(line.counters().frames_out, 1u);
  EXPECT_EQ(line.counters().bytes_out, kFrame.size());
}

TEST(DelayLine, SerialisesFramesAtTheRate) {
  // 10 Mbit/s: a 10,000-bit frame takes 1 ms; three at once leave 1 ms apart
  // after their own serialisation, then the delay.
  ks::DelayLine line({.delay_ms = 0.5, .rate_bps = 10e6}, 1514, 1);
  for (int i = 0; i < 3; i++) line.push(kFrame, 0);
  EXPECT_EQ(departures(line), (std::vector<ks::Nanos>{1500000, 2500000, 3500000}));
  // An idle link starts the next frame on arrival, not at the last departure.
  line.push(kFrame, 10 * kMs);
  EXPECT_EQ(line.next_departure(), 11500000);
}

// Frames `gap` apart through 1 ms +/- 0.5 ms: the time each is held.
std::vector<ks::Nanos> held_times(ks::Nanos gap) {
  ks::DelayLine line({.delay_ms = 1, .jitter_ms = 0.5, .limit = 6000}, 1514, 7);
  std::vector<ks::Nanos> arrivals;
  for (int i = 0; i < 5000; i++) {
    arrivals.push_back(i * gap);
    EXPECT_EQ(line.push(kFrame, arrivals.back()), ks::Admit::kQueued);
  }
  auto deps = departures(line);
  std::vector<ks::Nanos> held;
  for (size_t i = 0; i < deps.size(); i++) {
    EXPECT_GE(deps[i], i ? deps[i - 1] : 0) << "frame " << i << " overtook the one ahead";
    held.push_back(deps[i] - arrivals[i]);
  }
  return held;
}

TEST(DelayLine, JitterStaysInItsBoundsAndNeverReorders) {
  for (ks::Nanos gap : {ks::Nanos{20'000}, 2 * kMs}) {
    auto held = held_times(gap);
    ASSERT_EQ(held.size(), 5000u);
    double sum = 0;
    for (ks::Nanos h : held) {
      EXPECT_GE(h, kMs / 2);
      EXPECT_LE(h, 3 * kMs / 2);
      sum += double(h);
    }
    double mean = sum / double(held.size());
    if (gap > kMs) {
      // Frames further apart than the jitter's width keep the uniform law.
      EXPECT_LT(*std::min_element(held.begin(), held.end()), kMs * 55 / 100);
      EXPECT_NEAR(mean, double(kMs), 0.03 * kMs);
    } else {
      // Dense frames queue behind the latest one: the order costs delay
      // (docs/netns-hosts.md, "Jitter").
      EXPECT_GT(mean, 1.3 * kMs);
    }
  }
}

TEST(DelayLine, LossIsSeededAndNearItsProbability) {
  auto lost = [](uint64_t seed) {
    ks::DelayLine line({.drop = 0.1, .limit = 20000}, 1514, seed);
    std::vector<int> which;
    for (int i = 0; i < 10000; i++)
      if (line.push(kFrame, i) == ks::Admit::kDropRandom) which.push_back(i);
    EXPECT_EQ(line.counters().dropped_random, which.size());
    EXPECT_EQ(line.counters().queued, 10000 - which.size());
    return which;
  };
  auto a = lost(3);
  EXPECT_NEAR(double(a.size()), 1000.0, 150.0);  // ~5 standard deviations
  EXPECT_EQ(a, lost(3));
  EXPECT_NE(a, lost(4));
}

TEST(DelayLine, AFullLineTailDropsAndCounts) {
  ks::DelayLine line({.delay_ms = 1, .limit = 4}, 1514, 1);
  for (int i = 0; i < 4; i++) EXPECT_EQ(line.push(kFrame, 0), ks::Admit::kQueued);
  EXPECT_EQ(line.push(kFrame, 0), ks::Admit::kDropFull);
  EXPECT_EQ(line.push(kFrame, 0), ks::Admit::kDropFull);
  EXPECT_EQ(line.counters().dropped_full, 2u);
  EXPECT_EQ(line.counters().queued_max, 4u);
  line.pop(false, 0);  // a send the kernel refused
  EXPECT_EQ(line.counters().send_errors, 1u);
  EXPECT_EQ(line.push(kFrame, 0), ks::Admit::kQueued);
  EXPECT_EQ(line.counters().queued, 4u);
}

TEST(DelayLine, RefusesAFrameLargerThanASlot) {
  ks::DelayLine line({}, 1000, 1);
  EXPECT_EQ(line.push(kFrame, 0), ks::Admit::kOversize);
  EXPECT_EQ(line.counters().dropped_oversize, 1u);
  EXPECT_EQ(line.next_departure(), -1);
}
