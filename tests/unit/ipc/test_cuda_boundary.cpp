// The CPU side of CUDA IPC boundaries (ipc/cuda_boundary.h): the record
// table in real shared memory, refusal of bogus records, and the slot
// credits, including across real processes (fork). Handles are opaque
// 64-byte blobs here; the CUDA runtime never sees them in this test.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "ipc/cuda_boundary.h"
#include "ipc/segment.h"

namespace kvasir::ipc {
namespace {

struct Mem {
  explicit Mem(uint64_t n) : buf((n + 63) / 64 + 1) {}
  void* base() { return buf.data(); }
  uint64_t size() const { return (buf.size() - 1) * 64; }
  struct alignas(64) Line {
    char b[64];
  };
  std::vector<Line> buf;
};

CudaExport good_export(int32_t stage, uint8_t fill) {
  CudaExport e;
  e.exporter_stage = stage;
  e.device = 0;
  e.pid = 1234;
  e.bytes = 16 * 32 * 4;
  std::memset(e.mem_handle, fill, kIpcHandleBytes);
  std::memset(e.event_handle, fill + 1, kIpcHandleBytes);
  return e;
}

CudaExpect expect(int32_t link, int32_t slot) {
  CudaExpect w;
  w.link = link;
  w.slot = slot;
  w.device_count = 1;
  w.min_bytes = 16 * 32 * 4;
  return w;
}

TEST(CudaBoundaryTable, PublishAndReadBack) {
  Mem m(cuda_table_bytes(3, 4));
  auto t = CudaBoundaryTable::create(m.base(), m.size(), 3, 4);
  CudaBoundaryTable r;
  ASSERT_EQ(CudaBoundaryTable::open(m.base(), m.size(), 3, 4, r), "");
  CudaExport out;
  EXPECT_EQ(r.read(expect(1, 2), out), "not published");
  EXPECT_FALSE(r.published(1, 2));
  ASSERT_EQ(t.publish(1, 2, good_export(1, 7)), "");
  EXPECT_TRUE(r.published(1, 2));
  ASSERT_EQ(r.read(expect(1, 2), out), "");
  EXPECT_EQ(out.exporter_stage, 1);
  EXPECT_EQ(out.pid, 1234);
  EXPECT_EQ(out.mem_handle[0], 7);
  EXPECT_EQ(out.mem_handle[63], 7);
  EXPECT_EQ(out.event_handle[63], 8);
  // Publishing twice is refused; so is a stage exporting another's link.
  EXPECT_NE(t.publish(1, 2, good_export(1, 7)).find("already published"), std::string::npos);
  EXPECT_NE(t.publish(0, 0, good_export(1, 7)).find("cannot export link 0"), std::string::npos);
  EXPECT_NE(t.publish(3, 0, good_export(3, 7)).find("outside"), std::string::npos);
  EXPECT_NE(t.publish(0, -1, good_export(0, 7)).find("outside"), std::string::npos);
  CudaExport empty = good_export(0, 0);
  EXPECT_NE(t.publish(0, 0, empty).find("incomplete"), std::string::npos);
}

TEST(CudaBoundaryTable, OpenRefusesForeignOrMismatchedTables) {
  Mem m(cuda_table_bytes(2, 2) + 4096);
  CudaBoundaryTable r;
  std::memset(m.base(), 0, m.size());
  EXPECT_NE(CudaBoundaryTable::open(m.base(), m.size(), 2, 2, r).find("not a boundary table"),
            std::string::npos);
  CudaBoundaryTable::create(m.base(), m.size(), 2, 2);
  // The plan, not the header, decides the shape.
  EXPECT_NE(CudaBoundaryTable::open(m.base(), m.size(), 2, 3, r).find("the plan"),
            std::string::npos);
  EXPECT_NE(CudaBoundaryTable::open(m.base(), 64, 2, 2, r).find("mapped"), std::string::npos);
  EXPECT_NE(CudaBoundaryTable::open(m.base(), m.size(), -1, 2, r).find("out of range"),
            std::string::npos);
  EXPECT_NE(CudaBoundaryTable::open(m.base(), m.size(), 2, 1 << 20, r).find("out of range"),
            std::string::npos);
  auto* h = static_cast<CudaTableHeader*>(m.base());
  h->record_size += 8;
  EXPECT_NE(CudaBoundaryTable::open(m.base(), m.size(), 2, 2, r).find("record size"),
            std::string::npos);
  h->record_size -= 8;
  h->version = 99;
  EXPECT_NE(CudaBoundaryTable::open(m.base(), m.size(), 2, 2, r).find("version"),
            std::string::npos);
  // A table that fails to open answers every credit call with a bad index.
  EXPECT_EQ(r.acquire_write(0, 0, 1), Credit::kBadIndex);
  CudaExport out;
  EXPECT_NE(r.read(expect(0, 0), out).find("outside"), std::string::npos);
}

// A peer that scribbles on a published record: every field is checked on a
// private copy before a handle would reach the CUDA runtime.
TEST(CudaBoundaryTable, ReadRefusesBogusRecords) {
  Mem m(cuda_table_bytes(2, 2));
  auto t = CudaBoundaryTable::create(m.base(), m.size(), 2, 2);
  ASSERT_EQ(t.publish(1, 1, good_export(1, 5)), "");
  auto* recs = reinterpret_cast<CudaBoundaryRecord*>(static_cast<char*>(m.base()) + 64);
  CudaBoundaryRecord& rec = recs[1 * 2 + 1];
  CudaExport out;
  auto mutate_and_read = [&](auto mutate, auto undo) {
    mutate();
    std::string why = t.read(expect(1, 1), out);
    undo();
    return why;
  };
  EXPECT_NE(mutate_and_read([&] { rec.slot = 0; }, [&] { rec.slot = 1; }).find("claims"),
            std::string::npos);
  EXPECT_NE(mutate_and_read([&] { rec.exporter_stage = 0; }, [&] { rec.exporter_stage = 1; })
                .find("exported by stage 0"),
            std::string::npos);
  EXPECT_NE(mutate_and_read([&] { rec.device = 1; }, [&] { rec.device = 0; }).find("device 1"),
            std::string::npos);
  EXPECT_NE(mutate_and_read([&] { rec.device = -3; }, [&] { rec.device = 0; }).find("device -3"),
            std::string::npos);
  EXPECT_NE(mutate_and_read([&] { rec.bytes = 100; }, [&] { rec.bytes = 16 * 32 * 4; })
                .find("a boundary needs"),
            std::string::npos);
  EXPECT_NE(mutate_and_read([&] { rec.dtype = 9; }, [&] { rec.dtype = kBoundaryF32; })
                .find("element type"),
            std::string::npos);
  EXPECT_NE(mutate_and_read([&] { rec.version = 2; }, [&] { rec.version = kCudaTableVersion; })
                .find("version 2"),
            std::string::npos);
  EXPECT_NE(
      mutate_and_read([&] { rec.exporter_pid = 0; }, [&] { rec.exporter_pid = 1234; }).find("pid"),
      std::string::npos);
  EXPECT_NE(mutate_and_read([&] { std::memset(rec.event_handle, 0, kIpcHandleBytes); },
                            [&] { std::memset(rec.event_handle, 6, kIpcHandleBytes); })
                .find("empty handle"),
            std::string::npos);
  EXPECT_NE(mutate_and_read([&] { rec.state.store(77); }, [&] { rec.state.store(1); })
                .find("unknown state"),
            std::string::npos);
  // A refused read hands back nothing usable.
  rec.bytes = 1;
  EXPECT_NE(t.read(expect(1, 1), out), "");
  EXPECT_EQ(out.bytes, 0u);
  EXPECT_EQ(out.mem_handle[0], 0);
  rec.bytes = 16 * 32 * 4;
  EXPECT_EQ(t.read(expect(1, 1), out), "");
}

TEST(CudaBoundaryTable, CreditsFollowTheBatch) {
  Mem m(cuda_table_bytes(1, 2));
  auto t = CudaBoundaryTable::create(m.base(), m.size(), 1, 2);
  // Fresh slot: writable, nothing readable.
  EXPECT_EQ(t.check_readable(0, 0, 1), Credit::kNotReady);
  EXPECT_EQ(t.acquire_write(0, 0, 1), Credit::kOk);
  EXPECT_EQ(t.mark_written(0, 0, 1), Credit::kOk);
  // Written, not consumed: the exporter may not overwrite it.
  EXPECT_EQ(t.acquire_write(0, 0, 3), Credit::kBusy);
  EXPECT_EQ(t.mark_written(0, 0, 3), Credit::kBusy);
  // The importer reads exactly that batch.
  // A later batch while batch 1 is still unread: the importer skipped one
  // (waiting would deadlock: batch 3 can never be written without the credit).
  EXPECT_EQ(t.check_readable(0, 0, 3), Credit::kStale);
  EXPECT_EQ(t.check_readable(0, 0, 1), Credit::kOk);
  EXPECT_EQ(t.release(0, 0, 3), Credit::kStale);
  EXPECT_EQ(t.release(0, 0, 1), Credit::kOk);
  EXPECT_EQ(t.release(0, 0, 1), Credit::kStale);  // a credit is returned once
  EXPECT_EQ(t.check_readable(0, 0, 1), Credit::kStale);
  EXPECT_EQ(t.check_readable(0, 0, 3), Credit::kNotReady);  // not written yet: wait
  // Batch ids only move forward.
  EXPECT_EQ(t.acquire_write(0, 0, 1), Credit::kStale);
  EXPECT_EQ(t.acquire_write(0, 0, 0), Credit::kStale);
  EXPECT_EQ(t.mark_written(0, 0, 3), Credit::kOk);
  // A batch failed downstream before the importer copied it: its credit never
  // comes back, and the exporter takes it back when the slot comes round again.
  EXPECT_EQ(t.acquire_write(0, 0, 5), Credit::kBusy);
  EXPECT_EQ(t.reclaim(0, 0, 3), Credit::kStale);
  EXPECT_EQ(t.reclaim(0, 0, 5), Credit::kOk);
  EXPECT_EQ(t.acquire_write(0, 0, 5), Credit::kOk);
  EXPECT_EQ(t.check_readable(0, 0, 3), Credit::kStale);  // the abandoned batch is gone
  EXPECT_EQ(t.mark_written(0, 0, 5), Credit::kOk);
  EXPECT_EQ(t.check_readable(0, 0, 5), Credit::kOk);
  EXPECT_EQ(t.reclaim(7, 0, 9), Credit::kBadIndex);
  // Slots are independent.
  EXPECT_EQ(t.acquire_write(0, 1, 2), Credit::kOk);
  EXPECT_EQ(t.acquire_write(1, 0, 2), Credit::kBadIndex);
  EXPECT_EQ(t.release(0, 5, 2), Credit::kBadIndex);
  EXPECT_STRNE(credit_name(Credit::kBusy), "unknown");
}

// The table inside a real segment, exporter and importer in two processes:
// the child publishes and produces, the parent reads the handles and
// consumes; credits alternate through shared memory for many batches.
TEST(CudaBoundaryTable, InSegmentAcrossProcesses) {
  SegmentParams p;
  p.n_stages = 3;
  p.dims = SlotDims{4, 16, 8, 32, 2};
  p.block_size = 4;
  p.stages[0] = StagePlan{0, 0, 1, "cuda:0"};
  p.stages[1] = StagePlan{1, 1, 1, "cuda:1"};
  p.stages[2] = StagePlan{2, 2, 1, "cpu"};
  std::strcpy(p.model_path, "/nonexistent");
  auto name = Segment::name_for("cudas-boundary-" + std::to_string(getpid()));
  auto seg = Segment::create(name, p);
  EXPECT_EQ(seg->cuda_table().n_links(), 2);
  EXPECT_EQ(seg->cuda_table().n_slots(), 2);
  constexpr uint64_t kBatches = 200;
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 0;
    try {
      auto s = Segment::open(name);
      CudaBoundaryTable& t = s->cuda_table();
      for (int slot = 0; slot < 2; ++slot)
        if (!t.publish(0, slot, good_export(0, uint8_t(10 + slot))).empty()) rc = 1;
      for (uint64_t b = 1; b <= kBatches && rc == 0; ++b) {
        int slot = int(b % 2);
        while (t.acquire_write(0, slot, b) == Credit::kBusy) usleep(10);
        if (t.mark_written(0, slot, b) != Credit::kOk) rc = 2;
      }
    } catch (...) {
      rc = 3;
    }
    _exit(rc);
  }
  CudaBoundaryTable& t = seg->cuda_table();
  CudaExport out;
  for (int slot = 0; slot < 2; ++slot) {
    std::string why;
    for (int i = 0; i < 20000 && (why = t.read(expect(0, slot), out)) == "not published"; ++i)
      usleep(100);
    ASSERT_EQ(why, "");
    EXPECT_EQ(out.mem_handle[0], 10 + slot);
  }
  uint64_t consumed = 0;
  for (uint64_t b = 1; b <= kBatches; ++b) {
    int slot = int(b % 2);
    Credit c;
    for (int i = 0; i < 200000 && (c = t.check_readable(0, slot, b)) == Credit::kNotReady; ++i)
      usleep(10);
    ASSERT_EQ(c, Credit::kOk) << "batch " << b;
    ASSERT_EQ(t.release(0, slot, b), Credit::kOk);
    ++consumed;
  }
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(consumed, kBatches);
  // The link stage 1 → 2 was never exported (stage 2 is a CPU stage).
  EXPECT_FALSE(t.published(1, 0));
  Segment::remove(name);
}

}  // namespace
}  // namespace kvasir::ipc
