// bench_handoff: the latency of one hand-off between two processes through
// an SpscRing, with the ring's wait policy (ipc/futex.h WaitPolicy), the
// mechanism under `[plan] spin_us` (docs/ring.md, "Waits").
//
//   bench_handoff [--spin-us N] [--work-us W] [--rounds R] [--cpus A,B]
//
// Two processes pass one message back and forth R times; each holds it for
// W µs of busy work (a stage's forward pass, in small) before pushing it
// back, so the other waits about W µs each time: short enough to catch in
// a spin of a few hundred µs, long enough that a 0 spin sleeps. Prints the
// hand-off latency (push to the receiver holding the message) p50 / p90 /
// p99 / max and the mean, in µs. Run it beside `nice -n 19` busy loops to
// see what a sleeping waiter loses on a busy host. --cpus pins the two
// processes to CPU A and CPU B (base/cpu_list.h): without, they may share
// a core, where a spinning waiter delays the very work it waits for.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "base/cpu_list.h"
#include "ipc/ring.h"

namespace {

using kvasir::ipc::now_ns;
using kvasir::ipc::SpscRing;
using kvasir::ipc::WaitPolicy;

struct Msg {
  int64_t sent_ns;
  int32_t round;
};

struct Shared {
  SpscRing<Msg> to_b, to_a;
  int64_t lat_ns[2][100000];
};

void work(int64_t us) {
  const int64_t until = now_ns() + us * 1000;
  while (now_ns() < until) {
  }
}

// One side: pop from `in`, record the hand-off, work, push to `out`.
void side(Shared* s, SpscRing<Msg>& in, SpscRing<Msg>& out, int who, int rounds, int64_t work_us,
          const WaitPolicy& w, bool starts) {
  auto never = [] { return false; };
  if (starts) out.push(Msg{now_ns(), 0}, never, w);
  for (int r = 0; r < rounds; ++r) {
    Msg m{};
    in.pop(m, never, w);
    s->lat_ns[who][r] = now_ns() - m.sent_ns;
    work(work_us);
    if (!(starts && r == rounds - 1)) out.push(Msg{now_ns(), r + 1}, never, w);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t spin_us = 0, work_us = 2000;
  int rounds = 2000;
  int cpu_a = -1, cpu_b = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--spin-us")) spin_us = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--work-us")) work_us = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--cpus")) std::sscanf(argv[i + 1], "%d,%d", &cpu_a, &cpu_b);
  }
  rounds = std::clamp(rounds, 1, 100000);
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 1;
  auto* s = new (p) Shared();
  s->to_a.init(1);
  s->to_b.init(1);
  const WaitPolicy w{spin_us * 1000, 100'000'000};
  auto pin = [](int cpu) {
    if (cpu < 0) return;
    const kvasir::Status st = kvasir::pin_to_cpus({cpu}, "--cpus");
    if (!st.ok()) std::fprintf(stderr, "%s\n", st.message().c_str()), std::exit(2);
  };
  const pid_t b = fork();
  if (b == 0) {
    pin(cpu_b);
    side(s, s->to_b, s->to_a, 1, rounds, work_us, w, false);
    _exit(0);
  }
  pin(cpu_a);
  side(s, s->to_a, s->to_b, 0, rounds, work_us, w, true);
  waitpid(b, nullptr, 0);
  std::vector<double> us;
  for (int who = 0; who < 2; ++who)
    for (int r = 0; r < rounds; ++r) us.push_back(double(s->lat_ns[who][r]) / 1e3);
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double x : us) sum += x;
  auto q = [&](double f) { return us[std::min(us.size() - 1, size_t(f * double(us.size())))]; };
  std::printf("cpus %d,%d spin_us %lld work_us %lld hand-offs %zu: latency us p50 %.1f p90 %.1f p99 %.1f "
              "max %.1f mean %.1f\n",
              cpu_a, cpu_b, (long long)spin_us, (long long)work_us, us.size(), q(0.5), q(0.9), q(0.99),
              us.back(), sum / double(us.size()));
  return 0;
}
