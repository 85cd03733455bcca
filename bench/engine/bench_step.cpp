// bench_step — the daemon's cost per step with many running sequences,
// and the block tables' share of it (docs/decisions.md, "Block tables:
// the whole table every step").
//
//   build/bin/bench_step [--seqs 256] [--max-rows 256] [--ctx-min 512]
//                        [--ctx-max 2048] [--block 16] [--steps 2000]
//
// A Scheduler (the daemon's defaults: continuous+chunked, auto ITL target,
// chunk 512) with --seqs requests of prompts uniform in [ctx-min, ctx-max)
// is run through their prefill with fake results, then timed in steady
// decode: per step, Scheduler::schedule, the bridge's encoding of the
// descriptor (encode_batch, daemon/engine/descriptor.h) and
// ipc::write_desc into a slot as big as the ring's (max_table for an
// 8,192-token context), and Scheduler::update with one token a row, and
// a stage's ipc::read_desc. Beside them, timed on the same rows, the block tables' copies alone:
// the scheduler's (ScheduledRow::table), the bridge's (into
// Batch::tables) and write_desc's (into the slot).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "daemon/engine/descriptor.h"
#include "daemon/engine/scheduler.h"
#include "ipc/batch.h"

using namespace kvasir;

namespace {

struct Args {
  int seqs = 256, max_rows = 256, ctx_min = 512, ctx_max = 2048, block = 16, steps = 2000;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--seqs") a.seqs = v;
    else if (k == "--max-rows") a.max_rows = v;
    else if (k == "--ctx-min") a.ctx_min = v;
    else if (k == "--ctx-max") a.ctx_max = v;
    else if (k == "--block") a.block = v;
    else if (k == "--steps") a.steps = v;
    else {
      std::fprintf(stderr, "bench_step: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

using Clock = std::chrono::steady_clock;
double since_us(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

BatchResult answer(const SchedulerOutput& out) {
  BatchResult res;
  res.batch = out.id;
  res.rows.resize(out.rows.size());
  for (RowResult& r : res.rows) r.token = 7;
  return res;
}

// Per step, microseconds, so the report can take medians: the machine's
// other work lands on some steps, not on the typical one.
struct Totals {
  std::vector<double> schedule, encode, write, update, read;
  std::vector<double> copy_sched, copy_bridge, copy_desc;
  int64_t rows = 0, blocks = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + int64_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// The three table copies alone, on this step's rows.
void time_copies(const SchedulerOutput& out, const ipc::SlotDims& d, const ipc::DescView& v,
                 Totals& t) {
  auto t0 = Clock::now();
  std::vector<std::vector<int32_t>> kept(out.rows.size());
  for (size_t r = 0; r < out.rows.size(); ++r) kept[r] = out.rows[r].table;
  t.copy_sched.push_back(since_us(t0));
  t0 = Clock::now();
  static std::vector<int32_t> tables;  // reused, as encode_batch reuses its buffers
  if (tables.size() < out.rows.size() * size_t(d.max_table))
    tables.resize(out.rows.size() * size_t(d.max_table));
  for (size_t r = 0; r < out.rows.size(); ++r)
    std::copy(kept[r].begin(), kept[r].end(), tables.begin() + int64_t(r) * d.max_table);
  t.copy_bridge.push_back(since_us(t0));
  t0 = Clock::now();
  for (size_t r = 0; r < out.rows.size(); ++r) {
    const int32_t* src = tables.data() + int64_t(r) * d.max_table;
    std::copy(src, src + kept[r].size(), v.tables + int64_t(r) * d.max_table);
  }
  t.copy_desc.push_back(since_us(t0));
  for (const auto& k : kept) t.blocks += int64_t(k.size());
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  SchedLimits lim;  // the daemon's defaults
  lim.policy = Policy::kChunked;
  lim.itl_target_ms = -1;
  lim.max_rows = a.max_rows;
  lim.max_tokens = std::max(512, a.max_rows);
  lim.max_num_seqs = a.seqs;
  const int64_t per_seq = (a.ctx_max + a.steps + 2 * a.block) / a.block;
  const int32_t n_blocks = int32_t(per_seq * a.seqs);
  Scheduler sch(lim, n_blocks, a.block);
  std::mt19937 rng(1);
  for (int i = 0; i < a.seqs; ++i) {
    GenRequest req;
    req.prompt.resize(size_t(a.ctx_min + int(rng() % uint32_t(a.ctx_max - a.ctx_min))));
    for (int32_t& t : req.prompt) t = 10 + int32_t(rng() % 1000);
    req.max_tokens = 1 << 30;
    req.ignore_eos = true;
    req.sampling.seed = uint64_t(i);
    sch.add(RequestId(i + 1), std::move(req), {});
  }
  ipc::SlotDims d;
  d.max_rows = a.max_rows;
  d.max_tokens = lim.max_tokens;
  d.max_table = (8192 + a.block - 1) / a.block;  // the default model's context
  d.inflight = 1;
  std::vector<std::byte> slot(ipc::desc_bytes(d) + 64);
  const ipc::DescView v = ipc::desc_view(slot.data(), d);
  // Prefill: until every sequence decodes (each step one token a row).
  int warm = 0;
  for (; warm < 100000; ++warm) {
    const SchedulerOutput out = sch.schedule();
    if (out.empty()) break;
    const bool decode_only = std::all_of(out.rows.begin(), out.rows.end(),
                                         [](const ScheduledRow& r) { return r.n_tokens == 1; });
    sch.update(answer(out));
    if (decode_only && int(out.rows.size()) == std::min(a.seqs, a.max_rows)) break;
  }
  Totals t;
  ipc::Batch b, seen;
  for (int s = 0; s < a.steps; ++s) {
    auto t0 = Clock::now();
    const SchedulerOutput out = sch.schedule();
    t.schedule.push_back(since_us(t0));
    t0 = Clock::now();
    encode_batch(out, out.id, d.max_table, b);  // as Bridge::encode (no grammar here)
    t.encode.push_back(since_us(t0));
    t0 = Clock::now();
    ipc::write_desc(v, b, d);
    t.write.push_back(since_us(t0));
    t.rows += int64_t(out.rows.size());
    ipc::BatchMsg m;  // a stage's side: ipc::read_desc into its reused Batch
    m.batch_id = out.id;
    m.n_rows = int32_t(out.rows.size());
    m.n_tokens = b.n_tokens;
    t0 = Clock::now();
    const Status read = ipc::read_desc(v, m, d, n_blocks, a.block, seen);
    t.read.push_back(since_us(t0));
    if (!read.ok()) {
      std::fprintf(stderr, "bench_step: %s\n", read.message().c_str());
      return 1;
    }
    time_copies(out, d, v, t);
    t0 = Clock::now();
    sch.update(answer(out));
    t.update.push_back(since_us(t0));
  }
  const double n = a.steps;
  const double sched = median(t.schedule), enc = median(t.encode), wr = median(t.write);
  const double c1 = median(t.copy_sched), c2 = median(t.copy_bridge), c3 = median(t.copy_desc);
  const double step = sched + enc + wr, copies = c1 + c2 + c3;
  std::printf("bench_step: %d seqs, max_rows %d, prompts [%d, %d), block %d, %d steps "
              "(after %d of prefill); medians\n",
              a.seqs, a.max_rows, a.ctx_min, a.ctx_max, a.block, a.steps, warm);
  std::printf("  rows/step %.1f, blocks/row %.1f\n", double(t.rows) / n, double(t.blocks) / t.rows);
  std::printf("  per step (us): schedule %.1f  encode %.1f  write_desc %.1f  = %.1f"
              "   (update %.1f; a stage's read_desc %.1f)\n",
              sched, enc, wr, step, median(t.update), median(t.read));
  std::printf("  block-table copies alone (us): scheduler %.1f  bridge %.1f  write_desc %.1f"
              "  = %.1f (%.1f%% of the step)\n",
              c1, c2, c3, copies, 100 * copies / step);
  return 0;
}
