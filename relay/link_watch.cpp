// relay/link_watch.cpp — the watcher thread (relay/link_watch.h).
#include "relay/link_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace kvasir::relay {

LinkWatch::LinkWatch(net::UcxLink& link, ipc::Bell& bell) : link_(link), bell_(bell) {
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  KV_CHECK(stop_fd_ >= 0, "eventfd: {}", std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

LinkWatch::~LinkWatch() {
  const uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof one);
  armed_.store(1, std::memory_order_seq_cst);  // out of its wait for an arm
  armed_.notify_one();
  thread_.join();
  close(stop_fd_);
}

Status LinkWatch::arm(bool* armed) {
  // Armed again even while the watcher still watches: the relay's own
  // progress since the last arm (a send, a drain) may have taken the
  // event UCX would have signalled, and a fd no longer armed would leave
  // the next frame waiting for the poll period.
  KV_RETURN_IF_ERROR(link_.arm(armed));
  if (*armed && armed_.exchange(1, std::memory_order_acq_rel) == 0) armed_.notify_one();
  return Status();
}

void LinkWatch::run() {
  pollfd fds[2] = {{link_.event_fd(), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    armed_.wait(0, std::memory_order_acquire);
    fds[0].revents = fds[1].revents = 0;
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    // Disarmed before the ring: an arm() after the relay's wake-up must
    // reach this thread, or the next frame would wake nobody.
    armed_.store(0, std::memory_order_release);
    rings_.fetch_add(1, std::memory_order_relaxed);
    bell_.ring();
  }
}

}  // namespace kvasir::relay
