// tests/unit/relay/link_pair.h — what the relay's wait tests share: a
// leader and a worker link joined over loopback, and a drain of what a
// link holds.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "net/ucx_link.h"

namespace kvasir::testing {

struct LinkPair {
  std::unique_ptr<net::UcxLink> worker, leader;
  LinkPair() {
    const net::ClusterKey key(std::vector<uint8_t>(32, 0x5a));
    net::LinkOptions wo, lo;
    wo.role = net::Role::kWorker, wo.name = "worker-1";
    lo.role = net::Role::kLeader, lo.name = "leader";
    std::unique_ptr<net::UcxListener> listener;
    EXPECT_TRUE(net::UcxListener::listen("127.0.0.1", 0, key, wo, &listener).ok());
    Status accepted;
    std::thread t([&] { accepted = listener->accept(10000, &worker); });
    EXPECT_TRUE(net::UcxLink::connect("127.0.0.1", listener->port(), key, lo, &leader).ok());
    t.join();
    EXPECT_TRUE(accepted.ok()) << accepted.to_string();
    keep = std::move(listener);
  }
  std::unique_ptr<net::UcxListener> keep;  // the accepted link shares its worker
};

// Drains what the link holds now (recv with no wait): how many frames.
inline int drain(net::UcxLink& link) {
  int n = 0;
  net::Frame f;
  while (link.recv(0, &f).ok()) ++n;
  return n;
}

}  // namespace kvasir::testing
