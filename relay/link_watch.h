// relay/link_watch.h — one sleep for a relay: its ring's bell or its link.
//
// A relay waits for two things at once: a message on its ring (a futex
// bell in the shared segment, rung by a stage process) and a frame on its
// link (UCX's event fd). No one syscall sleeps on both a futex and an fd,
// and polling one while sleeping on the other made every incoming frame
// wait up to the poll period on each side of the link (docs/multi-host.md,
// "Threads"). So the relay sleeps on the bell, and a watcher thread sleeps
// on the link's fd: once the relay has armed it, the first event on the
// link rings the same bell, and the relay wakes to read the frame.
//
// Ringing the ring's bell from the consumer's side is harmless: a bell is
// a counter whose waiters re-check their condition; the producer never
// waits on not_empty.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "base/status.h"
#include "ipc/futex.h"
#include "net/ucx_link.h"

namespace kvasir::relay {

class LinkWatch {
 public:
  // Starts the watcher thread (the link and the bell outlive it).
  LinkWatch(net::UcxLink& link, ipc::Bell& bell);
  ~LinkWatch();  // stops and joins the thread
  LinkWatch(const LinkWatch&) = delete;
  LinkWatch& operator=(const LinkWatch&) = delete;

  // The relay's thread, after draining the link and before sleeping on
  // the bell: arms the link's fd and hands it to the watcher. *armed
  // false: events are pending, drain the link again instead of sleeping.
  Status arm(bool* armed);
  // How often the watcher has rung the bell (tests: wake-ups per frame).
  uint64_t rings() const { return rings_.load(std::memory_order_relaxed); }

 private:
  void run();

  net::UcxLink& link_;
  ipc::Bell& bell_;
  int stop_fd_ = -1;                // an eventfd: the destructor's wake-up
  std::atomic<uint32_t> armed_{0};  // 1: the fd is armed, the watcher polls it
  std::atomic<uint64_t> rings_{0};
  std::thread thread_;
};

}  // namespace kvasir::relay
