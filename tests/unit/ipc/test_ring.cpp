// The segment and its rings with real processes (fork) and real shared memory.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "base/check.h"
#include "ipc/segment.h"

namespace kvasir::ipc {
namespace {

SegmentParams params(int inflight = 2) {
  SegmentParams p;
  p.n_stages = 2;
  p.dims = SlotDims{4, 16, 8, 32, inflight};
  p.block_size = 4;
  p.stages[0] = StagePlan{0, 1, 1, "cpu"};
  p.stages[1] = StagePlan{2, 3, 1, "cpu"};
  std::strcpy(p.model_path, "/nonexistent");
  return p;
}

std::string unique_name(const char* tag) {
  return Segment::name_for(std::string(tag) + std::to_string(getpid()));
}

// Runs fn in a child; returns its exit status (fn's return value; 99 on an exception).
template <class F>
pid_t spawn(F fn) {
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = fn();
    } catch (...) {
    }
    _exit(rc);
  }
  return pid;
}

int wait_rc(pid_t pid, rusage* ru = nullptr) {
  int st = 0;
  wait4(pid, &st, 0, ru);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(Segment, CreateOpenModeAndRemove) {
  auto name = unique_name("mode");
  {
    auto seg = Segment::create(name, params());
    struct stat st;
    ASSERT_EQ(stat(("/dev/shm/" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    auto other = Segment::open(name);
    EXPECT_EQ(other->dims().inflight, 2);
    EXPECT_EQ(other->header().owner_pid.load(), getpid());
    // Distinct slots are distinct memory.
    EXPECT_NE(other->boundary(0, 0), other->boundary(1, 0));
    EXPECT_NE(static_cast<void*>(other->desc(0).hdr), static_cast<void*>(other->desc(1).hdr));
  }
  EXPECT_TRUE(Segment::exists(name));
  Segment::remove(name);
  EXPECT_FALSE(Segment::exists(name));
  EXPECT_THROW(Segment::open(name), Error);
}

TEST(Segment, NameIsStablePerInstance) {
  EXPECT_EQ(Segment::name_for("/run/a.sock"), Segment::name_for("/run/a.sock"));
  EXPECT_NE(Segment::name_for("/run/a.sock"), Segment::name_for("/run/b.sock"));
}

TEST(Segment, SecondOwnerRefusedWhileAlive) {
  auto name = unique_name("live");
  auto seg = Segment::create(name, params());
  pid_t c = spawn([&] {
    try {
      Segment::create(name, params());
    } catch (const Error& e) {
      return std::string(e.what()).find("already running") != std::string::npos ? 0 : 2;
    }
    return 1;
  });
  EXPECT_EQ(wait_rc(c), 0);
  Segment::remove(name);
}

TEST(Segment, StaleSegmentOfDeadOwnerIsReclaimed) {
  auto name = unique_name("stale");
  pid_t c = spawn([&] {
    auto seg = Segment::create(name, params());
    seg->header().kv_blocks = 77;
    _exit(0);  // dies without removing, as after SIGKILL
    return 0;
  });
  ASSERT_EQ(wait_rc(c), 0);
  ASSERT_TRUE(Segment::exists(name));
  auto seg = Segment::create(name, params());
  EXPECT_EQ(seg->header().owner_pid.load(), getpid());
  EXPECT_EQ(seg->header().kv_blocks.load(), 0);  // fresh
  Segment::remove(name);
}

// A SIGKILLed daemon whose parent has not reaped it yet is a zombie: kill(pid,
// 0) still succeeds, but it runs no code and holds nothing — its segment is
// stale and must not block the next start.
TEST(Segment, ZombieOwnerDoesNotBlockANewStart) {
  auto name = unique_name("zombie");
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t c = spawn([&] {
    auto seg = Segment::create(name, params());
    char b = 1;
    if (write(go[1], &b, 1) != 1) return 3;
    _exit(0);  // dies without removing, as after SIGKILL
    return 0;
  });
  char b = 0;
  ASSERT_EQ(read(go[0], &b, 1), 1);
  // Not reaped: wait until the child is a zombie (not merely still exiting).
  for (int i = 0; i < 500 && process_start_time(c) != 0; ++i) usleep(10000);
  ASSERT_EQ(kill(c, 0), 0) << "the zombie must still pass kill(pid, 0)";
  ASSERT_EQ(process_start_time(c), 0u);
  ASSERT_TRUE(Segment::exists(name));
  auto seg = Segment::create(name, params());  // threw "already running" before
  EXPECT_EQ(seg->header().owner_pid.load(), getpid());
  EXPECT_EQ(wait_rc(c), 0);
  close(go[0]);
  close(go[1]);
  Segment::remove(name);
}

// The recorded owner pid belongs to a live process, but not the one that
// created the segment (pids are reused): its start time differs, so the
// segment is stale. With the right start time the same pid is the owner.
TEST(Segment, RecycledOwnerPidIsNotTheOwner) {
  auto name = unique_name("recycled");
  int hold[2];
  ASSERT_EQ(pipe(hold), 0);
  pid_t other = spawn([&] {  // a live process that is no daemon
    close(hold[1]);
    char b;
    return read(hold[0], &b, 1) == 0 ? 0 : 4;
  });
  const uint64_t start = process_start_time(other);
  ASSERT_NE(start, 0u);
  EXPECT_NE(process_start_time(getpid()), 0u);
  auto seg = Segment::create(name, params());
  EXPECT_EQ(seg->header().owner_start.load(), process_start_time(getpid()));
  seg->header().owner_pid = other;
  seg->header().owner_start = start;  // the live owner: refused
  try {
    Segment::create(name, params());
    ADD_FAILURE() << "a live owner was not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already running"), std::string::npos) << e.what();
  }
  seg->header().owner_start = start + 1;  // same pid, another process: stale
  auto again = Segment::create(name, params());
  EXPECT_EQ(again->header().owner_pid.load(), getpid());
  close(hold[1]);
  close(hold[0]);
  EXPECT_EQ(wait_rc(other), 0);
  Segment::remove(name);
}

TEST(Segment, CorruptHeaderRefusedByOpener) {
  auto name = unique_name("corrupt");
  auto seg = Segment::create(name, params());
  seg->header().params.dims.inflight = 1000;
  EXPECT_THROW(Segment::open(name), Error);
  seg->header().params.dims.inflight = 2;
  seg->header().version = 99;
  EXPECT_THROW(Segment::open(name), Error);
  Segment::remove(name);
}

// A stage of another build would answer the first batch in its own message
// version, which the bridge drops: the batch would never come back. It is
// refused when it opens the segment instead, naming both versions.
TEST(Segment, OtherMessageVersionRefusedByOpener) {
  auto name = unique_name("msgver");
  auto seg = Segment::create(name, params());
  EXPECT_NO_THROW(Segment::open(name));
  seg->header().msg_version = kMsgVersion - 1;
  try {
    Segment::open(name);
    ADD_FAILURE() << "a segment of another message version was opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different builds"), std::string::npos) << e.what();
  }
  Segment::remove(name);
}

// Parent pushes N messages into ring 0; a child forwards them to ring 1
// (incrementing n_tokens); the parent reads them back in order. Capacity 2,
// so the producer runs into the credit limit many times.
TEST(Ring, ForwardsInOrderAcrossProcesses) {
  auto name = unique_name("fwd");
  auto seg = Segment::create(name, params(2));
  constexpr int N = 2000;
  pid_t c = spawn([&] {
    auto s = Segment::open(name);
    auto stop = [&] { return s->stopping(); };
    for (int i = 0; i < N; ++i) {
      BatchMsg m;
      if (!s->ring(0).pop(m, stop)) return 3;
      if (m.batch_id != uint64_t(i + 1)) return 4;
      m.n_tokens += 1;
      if (!s->ring(1).push(m, stop)) return 5;
    }
    return 0;
  });
  auto stop = [] { return false; };
  int got = 0;
  for (int i = 0; i < N; ++i) {
    BatchMsg m;
    m.batch_id = uint64_t(i + 1);
    m.slot = uint32_t(i % 2);
    m.n_tokens = i;
    while (!seg->ring(0).try_push(m)) {
      BatchMsg r;
      if (seg->ring(1).try_pop(r)) {
        EXPECT_EQ(r.batch_id, uint64_t(got + 1));
        EXPECT_EQ(r.n_tokens, got + 1);
        ++got;
      }
    }
  }
  while (got < N) {
    BatchMsg r;
    ASSERT_TRUE(seg->ring(1).pop(r, stop));
    EXPECT_EQ(r.batch_id, uint64_t(got + 1));
    EXPECT_EQ(r.n_tokens, got + 1);
    ++got;
  }
  EXPECT_EQ(wait_rc(c), 0);
  Segment::remove(name);
}

TEST(Ring, IdleWaitUsesNoCpuAndShutdownWakesIt) {
  auto name = unique_name("idle");
  auto seg = Segment::create(name, params());
  pid_t c = spawn([&] {
    auto s = Segment::open(name);
    BatchMsg m;
    bool got = s->ring(0).pop(m, [&] { return s->stopping(); });
    return got ? 1 : 0;
  });
  usleep(700 * 1000);
  int64_t t0 = now_ns();
  seg->request_shutdown();
  rusage ru{};
  EXPECT_EQ(wait_rc(c, &ru), 0);
  EXPECT_LT(now_ns() - t0, 150'000'000);  // woken promptly
  double cpu_ms = ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 + ru.ru_stime.tv_sec * 1e3 +
                  ru.ru_stime.tv_usec / 1e3;
  EXPECT_LT(cpu_ms, 80) << "an idle consumer must sleep, not spin";
  Segment::remove(name);
}

TEST(Ring, CorruptIndicesReadAsEmpty) {
  auto name = unique_name("bogus");
  auto seg = Segment::create(name, params());
  seg->ring(0).head.store(1000);  // a hostile producer
  BatchMsg m;
  EXPECT_FALSE(seg->ring(0).try_pop(m));
  seg->ring(0).capacity = 100000;
  EXPECT_FALSE(seg->ring(0).try_push(m));
  Segment::remove(name);
}

TEST(Batch, MessageChecks) {
  SlotDims d{4, 16, 8, 32, 2};
  BatchMsg m;
  m.batch_id = 5;
  m.slot = 1;
  m.n_rows = 2;
  m.n_tokens = 3;
  EXPECT_TRUE(check_msg(m, d, 4).ok());
  EXPECT_EQ(check_msg(m, d, 5).code(), ErrorCode::kBatchRefused);  // not increasing
  auto bad = m;
  bad.slot = 2;
  EXPECT_NE(check_msg(bad, d, 0).message().find("slot 2"), std::string::npos);
  bad = m;
  bad.version = kMsgVersion - 1;  // an older peer
  EXPECT_EQ(check_msg(bad, d, 0).code(), ErrorCode::kBatchRefused);
  bad = m;
  bad.n_rows = 5;
  EXPECT_EQ(check_msg(bad, d, 0).code(), ErrorCode::kBatchRefused);
  bad = m;
  bad.n_tokens = 17;
  EXPECT_EQ(check_msg(bad, d, 0).code(), ErrorCode::kBatchRefused);
  bad = m;
  bad.n_tokens = 1;  // fewer tokens than rows
  EXPECT_EQ(check_msg(bad, d, 0).code(), ErrorCode::kBatchRefused);
}

// A row's logit biases travel beside its sampling parameters: the reader
// gets exactly the row's n_logit_bias entries; a count past kMaxLogitBias
// is refused.
TEST(Batch, DescriptorCarriesLogitBiases) {
  auto name = unique_name("bias");
  auto seg = Segment::create(name, params());
  const SlotDims& d = seg->dims();
  Batch b;
  b.batch_id = 3;
  b.rows = {DescRow{1, 0, 1, 1, 1, {}}, DescRow{2, 0, 1, 1, 1, {}}};
  b.tokens = {10, 11};
  b.tables.assign(2 * d.max_table, 0);
  b.sampling.resize(2);
  b.bias.resize(2 * kMaxLogitBias);
  b.sampling[1].n_logit_bias = kMaxLogitBias;
  for (int i = 0; i < kMaxLogitBias; ++i)
    b.bias[size_t(kMaxLogitBias + i)] = LogitBias{i * 7, float(i % 201) - 100.0f};
  b.n_tokens = 2;
  write_desc(seg->desc(0), b, d);
  BatchMsg m;
  m.batch_id = 3;
  m.slot = 0;
  m.n_rows = 2;
  m.n_tokens = 2;
  Batch out;
  ASSERT_TRUE(read_desc(seg->desc(0), m, d, 8, 4, out).ok());
  EXPECT_TRUE(out.row_bias(0).empty());
  const auto got = out.row_bias(1);
  ASSERT_EQ(got.size(), size_t(kMaxLogitBias));
  for (int i = 0; i < kMaxLogitBias; ++i) {
    EXPECT_EQ(got[size_t(i)].token, i * 7);
    EXPECT_EQ(got[size_t(i)].bias, float(i % 201) - 100.0f);
  }
  seg->desc(0).sampling[0].n_logit_bias = kMaxLogitBias + 1;
  EXPECT_NE(read_desc(seg->desc(0), m, d, 8, 4, out).message().find("logit biases"),
            std::string::npos);
  // The result slot holds kMaxLogprobs alternatives a row.
  const ResultView rv = seg->result(0);
  EXPECT_LE(
      reinterpret_cast<char*>(rv.top + d.max_rows * kMaxLogprobs) - reinterpret_cast<char*>(rv.hdr),
      std::ptrdiff_t(result_bytes(d)));
  Segment::remove(name);
}

TEST(Batch, DescriptorRoundTripAndChecks) {
  auto name = unique_name("desc");
  auto seg = Segment::create(name, params());
  const SlotDims& d = seg->dims();
  Batch b;
  b.batch_id = 9;
  b.rows = {DescRow{1, 0, 2, 1, 1, {}}, DescRow{2, 5, 1, 2, 0, {}}};
  b.tokens = {10, 11, 12};
  b.tables.assign(2 * d.max_table, 0);
  b.tables[0] = 3;
  b.tables[d.max_table] = 4;
  b.tables[d.max_table + 1] = 5;
  b.sampling.resize(2);
  b.n_tokens = 3;
  write_desc(seg->desc(1), b, d);
  BatchMsg m;
  m.batch_id = 9;
  m.slot = 1;
  m.n_rows = 2;
  m.n_tokens = 3;
  Batch out;
  EXPECT_TRUE(read_desc(seg->desc(1), m, d, 8, 4, out).ok());
  EXPECT_EQ(out.tokens, b.tokens);
  EXPECT_EQ(out.rows[1].pos0, 5);
  EXPECT_EQ(out.tables[d.max_table + 1], 5);
  // Block id beyond the pool.
  EXPECT_NE(read_desc(seg->desc(1), m, d, 5, 4, out).message().find("block id 5"),
            std::string::npos);
  // Message and descriptor disagree.
  auto m2 = m;
  m2.batch_id = 10;
  EXPECT_EQ(read_desc(seg->desc(1), m2, d, 8, 4, out).code(), ErrorCode::kBatchRefused);
  // Positions past the table: row 1 at pos 5 with 1 block of 4.
  seg->desc(1).rows[1].n_table = 1;
  EXPECT_NE(read_desc(seg->desc(1), m, d, 8, 4, out).message().find("outside"), std::string::npos);
  seg->desc(1).rows[1].n_table = 2;
  // Rows not summing to the header's count.
  seg->desc(1).rows[0].n_tokens = 1;
  EXPECT_EQ(read_desc(seg->desc(1), m, d, 8, 4, out).code(), ErrorCode::kBatchRefused);
  seg->desc(1).rows[0].n_tokens = 2;
  seg->desc(1).rows[0].n_table = 99;
  EXPECT_EQ(read_desc(seg->desc(1), m, d, 8, 4, out).code(), ErrorCode::kBatchRefused);
  Segment::remove(name);
}

TEST(Batch, SlidingTablesRoundTripAndChecks) {
  // A sliding group (SlotDims::tables 2): each row carries a second table,
  // unmapped (-1) before its window, its ids in the sliding pool.
  auto name = unique_name("swa");
  SegmentParams p = params();
  p.dims.tables = 2;
  auto seg = Segment::create(name, p);
  const SlotDims& d = seg->dims();
  Batch b;
  b.batch_id = 3;
  b.rows = {DescRow{1, 9, 1, 3, 1, {}}};  // position 9: blocks 0..2 of 4
  b.tokens = {10};
  b.tables.assign(d.max_table, 0);
  b.tables[0] = 5;
  b.tables[1] = 6;
  b.tables[2] = 7;
  b.swa_tables.assign(d.max_table, 0);
  b.swa_tables[0] = -1;
  b.swa_tables[1] = -1;
  b.swa_tables[2] = 1;
  b.sampling.resize(1);
  b.n_tokens = 1;
  write_desc(seg->desc(0), b, d);
  BatchMsg m;
  m.batch_id = 3;
  m.slot = 0;
  m.n_rows = 1;
  m.n_tokens = 1;
  Batch out;
  ASSERT_TRUE(read_desc(seg->desc(0), m, d, 8, 4, out, 2).ok());
  EXPECT_EQ(std::vector<int32_t>(out.swa_tables.begin(), out.swa_tables.begin() + 3),
            (std::vector<int32_t>{-1, -1, 1}));
  // An id past the sliding pool (the full pool's range does not count).
  EXPECT_NE(read_desc(seg->desc(0), m, d, 8, 4, out, 1).message().find("sliding block id 1"),
            std::string::npos);
  // The row's own block unmapped.
  seg->desc(0).swa_tables[2] = -1;
  EXPECT_NE(read_desc(seg->desc(0), m, d, 8, 4, out, 2).message().find("unmapped"),
            std::string::npos);
  // A hole after a mapped entry.
  seg->desc(0).swa_tables[0] = 0;
  seg->desc(0).swa_tables[1] = -1;
  seg->desc(0).swa_tables[2] = 1;
  EXPECT_EQ(read_desc(seg->desc(0), m, d, 8, 4, out, 2).code(), ErrorCode::kBatchRefused);
  Segment::remove(name);
}

}  // namespace
}  // namespace kvasir::ipc

namespace kvasir::ipc {
namespace {

// The accounting partitions time at every instant: the phase a stage is in
// counts up to the reader's `now`, the counters hold the phases it left.
TEST(Accounting, RunningPhaseCountsUpToTheReadersNow) {
  StageShared st;
  StageTime t = read_stage_time(st, 5'000);
  EXPECT_FALSE(t.serving);
  EXPECT_EQ(t.total_ns(), 0u);
  begin_accounting(st, 1'000);
  t = read_stage_time(st, 4'000);  // starved since 1,000
  EXPECT_TRUE(t.serving);
  EXPECT_EQ(t.phase, kPhaseIdle);
  EXPECT_EQ(t.starved_ns, 3'000u);
  EXPECT_EQ(t.in_phase_ns, 3'000);
  enter_phase(st, kPhaseBusy, 4'000);
  // A batch held for a long time is busy all along, not at its end.
  for (int64_t now : {4'000, 104'000, 9'004'000}) {
    t = read_stage_time(st, now);
    EXPECT_EQ(t.busy_ns, uint64_t(now - 4'000));
    EXPECT_EQ(t.total_ns(), uint64_t(now - 1'000));
  }
  enter_phase(st, kPhaseBlocked, 9'004'000);
  enter_phase(st, kPhaseIdle, 9'005'000);
  t = read_stage_time(st, 9'006'000);
  EXPECT_EQ(t.busy_ns, 9'000'000u);
  EXPECT_EQ(t.blocked_ns, 1'000u);
  EXPECT_EQ(t.starved_ns, 3'000u + 1'000u);
  EXPECT_EQ(t.total_ns(), 9'005'000u);
  // Gone (the supervisor's view of a dead stage): no running part, and a
  // bracket its writer left open is closed.
  st.acct_seq.fetch_add(1);
  end_accounting(st);
  EXPECT_EQ(st.acct_seq.load() % 2, 0u);
  t = read_stage_time(st, 20'000'000);
  EXPECT_FALSE(t.serving);
  EXPECT_EQ(t.total_ns(), 9'004'000u);
}

// A reader in another process never sees a torn update: the shares it
// computes from one copy always sum to the time since the stage began.
TEST(Accounting, ReadsAcrossProcessesAreConsistent) {
  const std::string name = Segment::name_for("acct-test-" + std::to_string(getpid()));
  SegmentParams p;
  p.n_stages = 2;
  p.dims = SlotDims{2, 8, 4, 8, 2};
  auto seg = Segment::create(name, p);
  StageShared& st = seg->stage(0);
  const int64_t t0 = now_ns();
  begin_accounting(st, t0);
  pid_t kid = fork();
  if (kid == 0) {
    auto mine = Segment::open(name);
    StageShared& me = mine->stage(0);
    for (int i = 0; i < 200000; ++i) enter_phase(me, StagePhase(i % 3), now_ns());
    _exit(0);
  }
  int bad = 0;
  for (int i = 0; i < 20000; ++i) {
    const StageTime t = read_stage_time(st);
    bad += t.total_ns() != uint64_t(t.now_ns - t0);
  }
  int status = 0;
  waitpid(kid, &status, 0);
  EXPECT_EQ(bad, 0);
  Segment::remove(name);
}

}  // namespace
}  // namespace kvasir::ipc
