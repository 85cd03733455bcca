// relay/ring_or_link.cpp — the one io_uring wait, and the fallback to the
// watcher thread (relay/ring_or_link.h).
#include "relay/ring_or_link.h"

#include <linux/io_uring.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/log.h"

namespace kvasir::relay {
namespace {

// Not in every distribution's linux/io_uring.h yet (Linux 6.7's ABI).
constexpr uint8_t kOpFutexWait = 51;
constexpr uint32_t kFutex2SizeU32 = 0x02;  // FUTEX2_SIZE_U32; not FUTEX2_PRIVATE: shared memory
constexpr uint64_t kFutexOp = 1, kPollOp = 2;

}  // namespace

// A two-entry io_uring driven by raw syscalls (no liburing on the build
// hosts): the bell's futex wait and the link's fd poll, each kept posted
// until it completes, so a sleep that found both still posted submits
// nothing.
struct RingOrLink::Uring {
  int fd = -1;
  void* rings = MAP_FAILED;  // the SQ and CQ rings, one mapping
  size_t rings_len = 0;
  io_uring_sqe* sqes = nullptr;
  size_t sqes_len = 0;
  unsigned *sq_head = nullptr, *sq_tail = nullptr, *sq_mask = nullptr, *sq_array = nullptr;
  unsigned *cq_head = nullptr, *cq_tail = nullptr, *cq_mask = nullptr;
  io_uring_cqe* cqes = nullptr;
  ipc::Bell* bell = nullptr;
  bool futex_posted = false, poll_posted = false;
  uint64_t link_wakes = 0;
  int first_error = 0;  // a completion's error other than the expected ones

  ~Uring() {
    // Closing the ring cancels what is posted; the sleeper it counted goes.
    if (fd >= 0) close(fd);
    if (futex_posted) bell->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (sqes) munmap(sqes, sqes_len);
    if (rings != MAP_FAILED) munmap(rings, rings_len);
  }

  bool map(const io_uring_params& p) {
    const size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    const size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    rings_len = sq_len > cq_len ? sq_len : cq_len;
    rings = mmap(nullptr, rings_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                 IORING_OFF_SQ_RING);
    if (rings == MAP_FAILED) return false;
    sqes_len = p.sq_entries * sizeof(io_uring_sqe);
    void* s = mmap(nullptr, sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                   IORING_OFF_SQES);
    if (s == MAP_FAILED) return false;
    sqes = static_cast<io_uring_sqe*>(s);
    char* base = static_cast<char*>(rings);
    sq_head = reinterpret_cast<unsigned*>(base + p.sq_off.head);
    sq_tail = reinterpret_cast<unsigned*>(base + p.sq_off.tail);
    sq_mask = reinterpret_cast<unsigned*>(base + p.sq_off.ring_mask);
    sq_array = reinterpret_cast<unsigned*>(base + p.sq_off.array);
    cq_head = reinterpret_cast<unsigned*>(base + p.cq_off.head);
    cq_tail = reinterpret_cast<unsigned*>(base + p.cq_off.tail);
    cq_mask = reinterpret_cast<unsigned*>(base + p.cq_off.ring_mask);
    cqes = reinterpret_cast<io_uring_cqe*>(base + p.cq_off.cqes);
    return true;
  }

  // Queues e (submitted by the next enter).
  void push(const io_uring_sqe& e) {
    const unsigned tail = *sq_tail, i = tail & *sq_mask;
    sqes[i] = e;
    sq_array[i] = i;
    __atomic_store_n(sq_tail, tail + 1, __ATOMIC_RELEASE);
  }
  void post_futex(uint32_t* word, uint32_t seen) {
    io_uring_sqe e{};
    e.opcode = kOpFutexWait;
    e.fd = int32_t(kFutex2SizeU32);
    e.addr = uint64_t(reinterpret_cast<uintptr_t>(word));
    e.addr2 = seen;
    e.addr3 = FUTEX_BITSET_MATCH_ANY;
    e.user_data = kFutexOp;
    push(e);
  }
  void post_poll(int poll_fd) {
    io_uring_sqe e{};
    e.opcode = IORING_OP_POLL_ADD;
    e.fd = poll_fd;
    e.poll32_events = POLLIN;
    e.user_data = kPollOp;
    push(e);
  }

  // Submits what is queued and waits for one completion, at most
  // timeout_ns (0: no wait). -errno on failure; a timeout is not one.
  int enter(int64_t timeout_ns) {
    const unsigned queued = *sq_tail - __atomic_load_n(sq_head, __ATOMIC_ACQUIRE);
    __kernel_timespec ts{timeout_ns / 1'000'000'000, timeout_ns % 1'000'000'000};
    io_uring_getevents_arg arg{};
    arg.ts = uint64_t(reinterpret_cast<uintptr_t>(&ts));
    const unsigned flags =
        timeout_ns > 0 ? IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG : IORING_ENTER_EXT_ARG;
    const long r =
        syscall(__NR_io_uring_enter, fd, queued, timeout_ns > 0 ? 1 : 0, flags, &arg, sizeof arg);
    if (r >= 0 || errno == ETIME || errno == EINTR || errno == EBUSY) return 0;
    return -errno;
  }

  // Takes every completion there is: how many.
  int reap() {
    unsigned head = *cq_head;
    const unsigned tail = __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE);
    int n = 0;
    for (; head != tail; ++head, ++n) {
      const io_uring_cqe& c = cqes[head & *cq_mask];
      if (c.user_data == kFutexOp) {
        futex_posted = false;
        bell->sleepers.fetch_sub(1, std::memory_order_seq_cst);
        // 0: woken; EAGAIN: the bell moved before the wait began.
        if (c.res < 0 && c.res != -EAGAIN && c.res != -EINTR && first_error == 0)
          first_error = -c.res;
      } else if (c.user_data == kPollOp) {
        poll_posted = false;
        if (c.res > 0) ++link_wakes;
        if (c.res < 0 && c.res != -EINTR && first_error == 0) first_error = -c.res;
      }
    }
    __atomic_store_n(cq_head, head, __ATOMIC_RELEASE);
    return n;
  }

  // An io_uring whose futex wait works, or null (the watcher then).
  static std::unique_ptr<Uring> open(ipc::Bell& bell) {
    auto u = std::make_unique<Uring>();
    u->bell = &bell;
    io_uring_params p{};
    u->fd = int(syscall(__NR_io_uring_setup, 4, &p));
    if (u->fd < 0) return nullptr;
    const uint32_t need = IORING_FEAT_SINGLE_MMAP | IORING_FEAT_EXT_ARG;
    if ((p.features & need) != need || !u->map(p)) return nullptr;
    // A wait for a value the word does not hold: EAGAIN at once where the
    // kernel has the futex operation, EINVAL where it does not.
    uint32_t word = 0;
    u->post_futex(&word, 1);
    u->futex_posted = true;
    u->bell->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (u->enter(0) < 0) return nullptr;
    const unsigned tail = __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE);
    const bool ok = tail != *u->cq_head && u->cqes[*u->cq_head & *u->cq_mask].res == -EAGAIN;
    u->reap();
    if (!ok) return nullptr;
    u->first_error = 0;
    return u;
  }
};

RingOrLink::RingOrLink(net::UcxLink& link, ipc::Bell& bell, bool one_wait)
    : link_(link), bell_(bell) {
  // KVASIR_RELAY_WAIT=watcher: the fallback where io_uring would serve
  // (bench/hosts compares the two on one build).
  const char* env = std::getenv("KVASIR_RELAY_WAIT");
  if (env && std::strcmp(env, "watcher") == 0) one_wait = false;
  if (one_wait) uring_ = Uring::open(bell);
  if (!uring_) {
    if (one_wait)
      KV_LOG_INFO("relay", "no io_uring futex wait here: a watcher thread wakes the relay");
    watch_ = std::make_unique<LinkWatch>(link, bell);
  }
}

RingOrLink::~RingOrLink() = default;

uint64_t RingOrLink::link_wakes() const {
  return uring_ ? uring_->link_wakes : watch_->rings();
}

Status RingOrLink::sleep(uint32_t seen, const ipc::WaitPolicy& w) {
  if (!uring_) {
    bool armed = false;
    KV_RETURN_IF_ERROR(watch_->arm(&armed));
    if (armed) bell_.await(seen, w);
    return Status();
  }
  return sleep_one(seen, w);
}

Status RingOrLink::sleep_one(uint32_t seen, const ipc::WaitPolicy& w) {
  Uring& u = *uring_;
  bool armed = false;
  KV_RETURN_IF_ERROR(link_.arm(&armed));
  if (!armed) return Status();  // events pending: drain the link again
  // What an earlier sleep posted and has completed since: look again.
  if (u.reap() > 0) return Status();
  if (w.spin_ns > 0) {
    // The bell in short spins, the armed fd between them.
    const int64_t until = ipc::now_ns() + w.spin_ns;
    pollfd p{link_.event_fd(), POLLIN, 0};
    do {
      if (bell_.spin(seen, 10'000)) return Status();
      if (::poll(&p, 1, 0) > 0) return Status();
    } while (ipc::now_ns() < until);
  }
  // A futex wait still posted waits for an older value; the bell has moved
  // since, its wake is on the way and ends this sleep at once.
  if (!u.futex_posted) {
    bell_.sleepers.fetch_add(1, std::memory_order_seq_cst);
    u.futex_posted = true;
    u.post_futex(reinterpret_cast<uint32_t*>(&bell_.value), seen);
  }
  if (!u.poll_posted) {
    u.poll_posted = true;
    u.post_poll(link_.event_fd());
  }
  const int err = u.enter(w.poll_ns > 0 ? w.poll_ns : 1);
  u.reap();
  if (err != 0 || u.first_error != 0)
    return error_status(ErrorCode::kIo, "relay: io_uring wait: {}",
                        std::strerror(err != 0 ? -err : u.first_error));
  return Status();
}

}  // namespace kvasir::relay
