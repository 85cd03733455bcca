// relay/ring_or_link.h — one sleep for a relay's thread, ended by its
// ring's bell or by its link.
//
// A relay waits for two things at once: a message on its ring (a futex
// bell in the shared segment, rung by a stage process) and a frame on its
// link (UCX's event fd). The poll family cannot sleep on a futex, but
// io_uring can (IORING_OP_FUTEX_WAIT, Linux 6.7) beside a poll of the fd:
// the relay's thread submits both and sleeps in one io_uring_enter, so a
// batch or a frame wakes the thread that acts on it and nothing else
// (docs/multi-host.md, "Threads"). The stage that rings the bell is
// unchanged: the wait counts itself in the bell's sleepers as Bell::wait
// does, so ring() issues the wake it would issue for a sleeping stage.
//
// Where the kernel has no io_uring futex wait, or io_uring is refused (a
// container's seccomp profile, kernel.io_uring_disabled), the relay falls
// back to the watcher thread (relay/link_watch.h): one more wake-up for a
// frame coming in, the same results. KVASIR_RELAY_WAIT=watcher in the
// environment chooses the fallback everywhere (for comparisons).
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "ipc/futex.h"
#include "net/ucx_link.h"
#include "relay/link_watch.h"

namespace kvasir::relay {

class RingOrLink {
 public:
  // one_wait false: the watcher thread even where io_uring would serve
  // (the comparison the relay test draws). The link and the bell outlive
  // this; it is created, used and destroyed on the link's thread.
  RingOrLink(net::UcxLink& link, ipc::Bell& bell, bool one_wait = true);
  ~RingOrLink();
  RingOrLink(const RingOrLink&) = delete;
  RingOrLink& operator=(const RingOrLink&) = delete;

  // The relay's thread, once the ring read empty after seen = bell.seen()
  // and the link was drained (recv(0) found nothing): arms the link, and
  // sleeps until the bell moves from seen, an event comes on the link, or
  // w.poll_ns passes (after polling both for up to w.spin_ns). Returns at
  // once where the link has events pending. Spurious returns happen; the
  // caller loops and re-checks its ring and its link.
  Status sleep(uint32_t seen, const ipc::WaitPolicy& w);

  // True when the sleep is the one io_uring wait (false: the watcher).
  bool one_wait() const { return uring_ != nullptr; }
  // Sleeps ended by the link (tests: a frame wakes, an idle link does not).
  uint64_t link_wakes() const;

  struct Uring;  // the io_uring and its two operations (ring_or_link.cpp)

 private:
  Status sleep_one(uint32_t seen, const ipc::WaitPolicy& w);

  net::UcxLink& link_;
  ipc::Bell& bell_;
  std::unique_ptr<Uring> uring_;
  std::unique_ptr<LinkWatch> watch_;  // where uring_ is null
};

}  // namespace kvasir::relay
