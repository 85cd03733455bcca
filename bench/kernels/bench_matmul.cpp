// bench/kernels/bench_matmul.cpp — matmul throughput at SmolLM2-135M's shapes.
//
//   build-kernels/bin/bench_kernels_matmul [threads] [seconds per case] [wall|cpu] [mode] [types]
//
// One thread is timed by process CPU time (unless 'wall'), more by wall clock.
//
// Prints, per weight type and shape, for n = 1 and n = 16 activation rows:
// time per call, weight bandwidth (bytes of W read per second: the bound for
// n = 1) and GFLOP/s (2·n·rows·cols per call).
//
// mode "rows": n = 1..6 and 8, what each activation row adds to a small
// call (a decode row's speculative drafts: docs/speculative.md), Gemma 3
// 270M's Q8_0 output head (262144 x 640) included.
// mode "tiles": the 1×4 against the 2×4 register tile. mode "levels": every
// SIMD level the CPU has, paired — one thread, rounds that time each level in
// turn (rotating the order), each sample a few calls long, timed by the
// thread's CPU time; per level the median time and the median of the
// per-round ratios to avx2 (what the dispatch compares), and the level the
// dispatch picks for that kernel in this process (simd.h). mode
// "attention": only the attention cases (run_attention), which every other
// run but tiles and levels ends with. mode "kbatch": the K-quant batch
// kernel against the decode tiles (run_kbatch; 5th argument: the types).
// mode "mxfp4" (run_mxfp4): MXFP4's batch kernel against the decode tiles
// at gpt-oss-20b's expert shapes.
// mode "stream" (run_stream): one serving stage's weights, too big for the
// caches, at decode micro-batch sizes; 5th argument: the types (default
// F32). mode "prefill": plain weights (5th argument, default F32) at the
// layer shapes, n = 128 and 512 (a served prompt, pp512). mode "decode"
// (run_decode): one row against the 8B shape's matrices from DRAM;
// 5th argument: the types (default Q4_K,Q6_K). mode "rows16" (run_rows16):
// matmul against the same weight repacked 16 rows a block (rows16.h) at
// n = 1..8, 16 and 64, SmolLM2-135M's and Llama 3.2 1B's shapes; 5th
// argument: the types (default Q8_0,Q4_1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/paged_kv.h"
#include "kernels/cpu/rows16.h"
#include "kernels/cpu/simd.h"

using namespace kvasir;
using namespace kvasir::cpu;
using Clock = std::chrono::steady_clock;

namespace {

struct Weight {
  std::vector<uint8_t> bytes;
  TensorView view;
};

Weight make_weight(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  Weight w;
  w.bytes.resize(*dtype_row_bytes(t, cols) * size_t(rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w.bytes) b = uint8_t(byte(rng));
  // Keep the scales sane: small positive halves at each block start.
  const int64_t bb = dtype_info(t).bytes, blk = dtype_info(t).block;
  if (t == DType::MXFP4)
    for (size_t o = 0; o < w.bytes.size(); o += size_t(bb)) w.bytes[o] = 120;  // E8M0: 2^-7
  else if (blk == 32 || blk == 256)
    for (size_t o = 0; o < w.bytes.size(); o += size_t(bb)) {
      // Q8_0/Q4_x: d at 0; Q4_K/Q5_K: d, dmin at 0, 2; Q6_K: d at 208.
      const uint16_t h = f32_to_fp16(blk == 256 ? 0.001f : 0.01f);
      std::memcpy(&w.bytes[o + (t == DType::Q6_K ? 208 : 0)], &h, 2);
      if (t == DType::Q4_K || t == DType::Q5_K) std::memcpy(&w.bytes[o + 2], &h, 2);
    }
  else if (t == DType::F32)
    for (size_t o = 0; o < w.bytes.size(); o += 4) {
      const float f = 0.01f;
      std::memcpy(&w.bytes[o], &f, 4);
    }
  else
    for (size_t o = 0; o < w.bytes.size(); o += 2) {
      const uint16_t h = t == DType::F16 ? f32_to_fp16(0.01f) : f32_to_bf16(0.01f);
      std::memcpy(&w.bytes[o], &h, 2);
    }
  w.view.type = t;
  w.view.n_dims = 2;
  w.view.ne[0] = cols;
  w.view.ne[1] = rows;
  w.view.data = w.bytes.data();
  w.view.nbytes = w.bytes.size();
  return w;
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

bool g_cpu_time = false;  // time by process CPU time (1 thread on a busy machine)

template <class F>
double seconds_per_call(F&& f, double budget) {
  f();  // warm-up (also grows scratch)
  int64_t iters = 0;
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  double el = 0;
  do {
    f();
    ++iters;
    el = g_cpu_time ? cpu_seconds() - c0 : std::chrono::duration<double>(Clock::now() - t0).count();
  } while (el < budget);
  return el / double(iters);
}

}  // namespace

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// The "levels" mode (see the top of the file).
void run_levels(const Weight& w, int64_t n, double budget) {
  std::vector<SimdLevel> levels;
  for (int l = int(SimdLevel::kAvx2); l < kSimdLevels; ++l)
    if (simd_level_available(SimdLevel(l))) levels.push_back(SimdLevel(l));
  if (levels.empty()) return;
  const int64_t rows = w.view.rows(), cols = w.view.cols();
  std::vector<float> x(size_t(n * cols)), y(size_t(n * rows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7919 % 2001) - 1000) * 1e-3f;
  auto call = [&](SimdLevel l) { detail::matmul_at(w.view, x.data(), n, y.data(), nullptr, l); };
  // Calls per sample: about 0.5 ms of work.
  double t0 = thread_seconds();
  call(levels[0]);
  call(levels[0]);
  const double one = std::max((thread_seconds() - t0) / 2, 1e-7);
  const int reps = std::max(1, int(5e-4 / one));
  const int nl = int(levels.size());
  const int rounds = std::clamp(int(budget / (one * reps * nl)), 5, 200);
  std::vector<std::vector<double>> t(static_cast<size_t>(nl));
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < nl; ++k) {
      const int i = (k + r) % nl;
      t0 = thread_seconds();
      for (int j = 0; j < reps; ++j) call(levels[size_t(i)]);
      t[size_t(i)].push_back((thread_seconds() - t0) / reps);
    }
  const KernelChoice pick = simd_kernel_choice(w.view.type, rows_class(n), cols);
  std::printf("%-6s %5lld x %-6lld %3lld", dtype_name(w.view.type), (long long)rows,
              (long long)cols, (long long)n);
  for (int i = 0; i < nl; ++i) {
    std::vector<double> ratio(static_cast<size_t>(rounds));
    for (int r = 0; r < rounds; ++r) ratio[size_t(r)] = t[size_t(i)][size_t(r)] / t[0][size_t(r)];
    std::printf(" | %s %8.1f us %5.2f", simd_level_name(levels[size_t(i)]),
                median(t[size_t(i)]) * 1e6, median(ratio));
  }
  std::printf(" | %d rounds | dispatch: %s\n", rounds, simd_level_name(pick.level));
}

// The "stream" mode: the seven matrices of 15 SmolLM2-135M layers (half
// the model: one of two pipeline stages, 212 MB in F32), called in layer
// order as a stage runs them, so every weight comes from DRAM as in a
// served decode micro-batch (n rows: 16 streams over 2 micro-batches give
// 8). Per n: ms per pass over all 15 layers, the weight bytes read per
// second and GFLOP/s. One thread's CPU time unless 'wall'.
void run_stream(ThreadPool& pool, double budget, const std::string& types) {
  std::mt19937 rng(2);
  const int64_t shapes[7][2] = {{576, 576}, {192, 576}, {192, 576}, {576, 576},
                                {1536, 576}, {1536, 576}, {576, 1536}};  // q k v o gate up down
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    if (types.find(dtype_name(t)) == std::string::npos) continue;
    std::vector<Weight> ws;
    double bytes = 0, params = 0;
    for (int l = 0; l < 15; ++l)
      for (const auto& s : shapes) {
        ws.push_back(make_weight(t, s[0], s[1], rng));
        bytes += double(ws.back().bytes.size());
        params += double(s[0] * s[1]);
      }
    for (int64_t n : {1, 4, 6, 8, 12, 16, 32}) {
      std::vector<float> x(size_t(n * 1536), 0.5f), y(size_t(n * 1536));
      auto pass = [&] {
        for (const Weight& w : ws) matmul(w.view, x.data(), n, y.data(), &pool);
      };
      const double sec = seconds_per_call(pass, budget);
      std::printf("stream %-5s %4.0f MB %3lld %9.2f ms %7.2f GB/s(W) %7.2f GFLOP/s\n",
                  dtype_name(t), bytes * 1e-6, (long long)n, sec * 1e3, bytes / sec * 1e-9,
                  2.0 * double(n) * params / sec * 1e-9);
    }
  }
}

// Attention at the shapes the serving benchmarks run (9 heads over 3 kv
// heads, head dim 64, F16 KV, blocks of 16), each timed as one call:
//   decode 16 x 512      16 rows of one token at context 512, own blocks
//   decode 8 x 1056 sh   8 rows at context 1056 whose first 64 blocks are
//                        the same (a shared 1,024-token system prompt)
//   suffix 32 @ 1024     one row of 32 new tokens after a cached 1,024
//   prefill 512          one row of 512 tokens from position 0
void run_attention(ThreadPool& pool, double budget, const std::string& only = "") {
  struct Case {
    const char* name;
    int rows, new_tokens, pos0, shared_blocks;
  };
  const Case cases[] = {{"decode 16 x 512", 16, 1, 511, 0},
                        {"decode 8 x 1056 sh", 8, 1, 1055, 64},
                        {"suffix 32 @ 1024", 1, 32, 1024, 0},
                        {"prefill 512", 1, 512, 0, 0}};
  const int bs = 16, nkv = 3, nh = 9, hd = 64;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const Case& c : cases) {
    if (!only.empty() && std::string(c.name).find(only) == std::string::npos) continue;
    const int ctx = c.pos0 + c.new_tokens;
    const int per_row = (ctx + bs - 1) / bs;
    const int n_blocks = c.shared_blocks + c.rows * (per_row - c.shared_blocks);
    std::vector<uint16_t> k(size_t(n_blocks) * nkv * bs * hd), v(k.size());
    for (auto& x : k) x = f32_to_fp16(u(rng));
    for (auto& x : v) x = f32_to_fp16(u(rng));
    KvLayerView kv{k.data(), v.data(), DType::F16, n_blocks, bs, nkv, hd};
    std::vector<int32_t> table(size_t(c.rows) * size_t(per_row));
    int32_t next = c.shared_blocks;
    for (int r = 0; r < c.rows; ++r)
      for (int b = 0; b < per_row; ++b)
        table[size_t(r * per_row + b)] = b < c.shared_blocks ? b : next++;
    std::vector<AttnRow> rows(size_t(c.rows));
    for (int r = 0; r < c.rows; ++r) {
      rows[size_t(r)].pos0 = c.pos0;
      rows[size_t(r)].n_tokens = c.new_tokens;
      rows[size_t(r)].block_table = table.data() + r * per_row;
      rows[size_t(r)].n_table = per_row;
    }
    std::vector<float> q(size_t(c.rows) * size_t(c.new_tokens) * nh * hd), out(q.size());
    for (auto& x : q) x = u(rng);
    const double sec = seconds_per_call(
        [&] { paged_attention(kv, rows.data(), c.rows, q.data(), nh, 0.125f, out.data(), &pool); },
        budget);
    // Multiply-adds of q.k and p.v over the causal context of every query.
    double pairs = 0;
    for (int t = 0; t < c.new_tokens; ++t) pairs += double(c.pos0 + t + 1);
    const double flop = 4.0 * c.rows * pairs * nh * hd;
    std::printf("attention %-20s %9.1f us %7.2f GFLOP/s\n", c.name, sec * 1e6, flop / sec * 1e-9);
  }
}

// Mode "kbatch": the K-quant batch kernel (matmul_kquant_batch.cpp) against
// the decode tiles it replaces in batches, at a Llama-3.2-1B layer's shapes
// (q/o 2048 x 2048, k/v 512 x 2048, gate/up 8192 x 2048, down 2048 x
// 8192) and the batch sizes of a serving micro-batch to a 512-token
// prefill. Per case the best of 3 alternating rounds of each.
void run_kbatch(ThreadPool& pool, double budget, const std::string& only, std::mt19937& rng) {
  std::printf("%-6s %-14s %3s %12s %12s %7s\n", "type", "rows x cols", "n", "tiles us", "kbatch us",
              "ratio");
  const int64_t shapes[][2] = {{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}};
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    if (only.find(dtype_name(t)) == std::string::npos) continue;
    for (const auto& s : shapes) {
      const Weight w = make_weight(t, s[0], s[1], rng);
      for (int64_t n : {8, 16, 64, 512}) {
        std::vector<float> x(size_t(n * s[1]), 0.5f), y(size_t(n * s[0]));
        auto run = [&] { matmul(w.view, x.data(), n, y.data(), &pool); };
        double off = 1e30, on = 1e30;
        // The kernel first: a type's first batch call makes the dispatch's
        // choice of level (simd.h), which must time the batch kernel, not
        // the tiles (Q6_K's levels differ only there).
        for (int r = 0; r < 3; ++r) {
          detail::set_kquant_batch_for_bench(true);
          on = std::min(on, seconds_per_call(run, budget));
          detail::set_kquant_batch_for_bench(false);
          off = std::min(off, seconds_per_call(run, budget));
        }
        std::printf("%-6s %5lld x %-6lld %3lld %12.1f %12.1f %7.2f\n", dtype_name(t),
                    (long long)s[0], (long long)s[1], (long long)n, off * 1e6, on * 1e6, off / on);
      }
    }
  }
}

// Mode "mxfp4": MXFP4's batch kernel (matmul_mxfp4.cpp) against the decode
// tiles it replaces, at gpt-oss-20b's expert shapes (gate, up and down are
// all 2880 x 2880) and an odd block count (2880 x 2912: 91 blocks a row),
// for the rows a prefill routes to one expert (pp512, 32 experts, top 4:
// 64 on average). Per case the best of 3 alternating rounds of each.
void run_mxfp4(ThreadPool& pool, double budget, std::mt19937& rng) {
  std::printf("%-14s %3s %10s %10s %9s %9s %6s\n", "rows x cols", "n", "tiles us", "batch us",
              "GFLOP/s", "GFLOP/s", "ratio");
  const int64_t shapes[][2] = {{2880, 2880}, {2880, 2912}};
  for (const auto& s : shapes) {
    const Weight w = make_weight(DType::MXFP4, s[0], s[1], rng);
    for (int64_t n : {1, 4, 8, 16, 64}) {
      std::vector<float> x(size_t(n * s[1]), 0.5f), y(size_t(n * s[0]));
      auto run = [&] { matmul(w.view, x.data(), n, y.data(), &pool); };
      double off = 1e30, on = 1e30;
      for (int r = 0; r < 3; ++r) {  // the kernel first: the dispatch's choice times it
        detail::set_mxfp4_batch_for_bench(true);
        on = std::min(on, seconds_per_call(run, budget));
        detail::set_mxfp4_batch_for_bench(false);
        off = std::min(off, seconds_per_call(run, budget));
      }
      const double flop = 2.0 * double(n) * double(s[0]) * double(s[1]);
      std::printf("%5lld x %-6lld %3lld %10.1f %10.1f %9.2f %9.2f %6.2f\n", (long long)s[0],
                  (long long)s[1], (long long)n, off * 1e6, on * 1e6, flop / off * 1e-9,
                  flop / on * 1e-9, off / on);
    }
  }
}

// The "decode" mode: one activation row against the 8B shape's matrices
// (Llama-3.1-8B: q/o 4096 x 4096, k/v 1024 x 4096, gate/up 14336 x 4096,
// down 4096 x 14336, the output head 49152 x 4096), each laid out in
// copies over a 512 MiB buffer and called copy after copy, so every call
// reads its weight from DRAM as a decode step does. Time per call (one
// thread: its CPU time unless 'wall', which on a shared machine leaves
// out the time others held the core) and the weight bytes read per
// second: the figure to set beside bench_membw at the same thread count.
void run_decode(ThreadPool& pool, double budget, const std::string& types, std::mt19937& rng) {
  constexpr size_t kArena = size_t(512) << 20;
  const int64_t shapes[5][2] = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336},
                                {49152, 4096}};
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0}) {
    if (types.find(dtype_name(t)) == std::string::npos) continue;
    const int64_t row_max = int64_t(*dtype_row_bytes(t, 14336));
    Weight arena = make_weight(t, int64_t(kArena) / row_max, 14336, rng);
    for (const auto& s : shapes) {
      const size_t wbytes = *dtype_row_bytes(t, s[1]) * size_t(s[0]);
      const size_t copies = std::max<size_t>(1, arena.bytes.size() / wbytes);
      std::vector<float> x(size_t(s[1]), 0.5f);
      std::vector<float> y(static_cast<size_t>(s[0]));
      size_t k = 0;
      auto call = [&] {
        TensorView v = arena.view;
        v.ne[0] = s[1];
        v.ne[1] = s[0];
        v.data = arena.bytes.data() + (k++ % copies) * wbytes;
        v.nbytes = wbytes;
        matmul(v, x.data(), 1, y.data(), &pool);
      };
      const double sec = seconds_per_call(call, budget);
      std::printf("decode %-5s %5lld x %-6lld %7.1f MB %9.1f us %7.2f GB/s(W) %zu copies\n",
                  dtype_name(t), (long long)s[0], (long long)s[1], double(wbytes) * 1e-6,
                  sec * 1e6, double(wbytes) / sec * 1e-9, copies);
    }
  }
}

// The "rows16" mode: matmul (what runs today) and rows16_matmul on the same
// weight, in ABBA rounds (each side timed twice a case, in turn, a quarter
// of the budget each; the better time of each side printed).
void run_rows16(ThreadPool& pool, double budget, const std::string& types, std::mt19937& rng) {
  struct Shape {
    int64_t rows, cols;
  };
  const Shape shapes[] = {{576, 576},   {192, 576},  {1536, 576},  {576, 1536}, {49152, 576},
                          {2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}};
  std::printf("%-5s %-13s %3s %11s %11s %7s\n", "type", "rows x cols", "n", "matmul us",
              "rows16 us", "ratio");
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0}) {
    if (types.find(dtype_name(t)) == std::string::npos) continue;
    for (const Shape& s : shapes) {
      const Weight w = make_weight(t, s.rows, s.cols, rng);
      const auto packed = repack16(t, w.bytes.data(), s.rows, s.cols);
      const Rows16View view{t, s.rows, s.cols, packed.data()};
      for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 16, 64}) {
        std::vector<float> x(size_t(n * s.cols)), y(size_t(n * s.rows));
        std::normal_distribution<float> val(0.f, 1.f);
        for (auto& v : x) v = val(rng);
        auto now = [&] { matmul(w.view, x.data(), n, y.data(), &pool); };
        auto r16 = [&] { rows16_matmul(view, x.data(), n, y.data(), &pool); };
        double a = 1e30, b = 1e30;
        for (int round = 0; round < 2; ++round) {
          a = std::min(a, seconds_per_call(now, budget / 4));
          b = std::min(b, seconds_per_call(r16, budget / 4));
          b = std::min(b, seconds_per_call(r16, budget / 4));
          a = std::min(a, seconds_per_call(now, budget / 4));
        }
        std::printf("%-5s %5lld x %-5lld %3lld %11.1f %11.1f %7.2f\n", dtype_name(t),
                    (long long)s.rows, (long long)s.cols, (long long)n, a * 1e6, b * 1e6, a / b);
        std::fflush(stdout);
      }
    }
  }
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const double budget = argc > 2 ? std::atof(argv[2]) : 0.2;
  ThreadPool pool(threads);
  // With one thread, CPU time is the honest figure on a shared machine.
  g_cpu_time = threads == 1 && !(argc > 3 && std::string(argv[3]) == "wall");
  std::mt19937 rng(1);
  std::printf("simd %s, %d thread(s), timed by %s\n", simd_level_name(simd_level()), threads,
              g_cpu_time ? "process CPU time" : "wall clock");
  if (argc > 4 && std::string(argv[4]) == "attention") {  // attention only (5th: cases named so)
    run_attention(pool, budget, argc > 5 ? argv[5] : "");
    return 0;
  }
  if (argc > 4 && std::string(argv[4]) == "kbatch") {
    run_kbatch(pool, budget, argc > 5 ? argv[5] : "Q4_K,Q5_K,Q6_K", rng);
    return 0;
  }
  if (argc > 4 && std::string(argv[4]) == "mxfp4") {
    run_mxfp4(pool, budget, rng);
    return 0;
  }
  if (argc > 4 && std::string(argv[4]) == "decode") {
    run_decode(pool, budget, argc > 5 ? argv[5] : "Q4_K,Q6_K", rng);
    return 0;
  }
  if (argc > 4 && std::string(argv[4]) == "rows16") {
    run_rows16(pool, budget, argc > 5 ? argv[5] : "Q8_0,Q4_1", rng);
    return 0;
  }
  if (argc > 4 && std::string(argv[4]) == "stream") {
    run_stream(pool, budget, argc > 5 ? argv[5] : "F32");
    return 0;
  }
  std::printf("%-6s %-14s %3s %10s %9s %9s\n", "type", "rows x cols", "n", "us/call", "GB/s(W)",
              "GFLOP/s");
  struct Shape {
    int64_t rows, cols;
  };
  // Optional 4th argument: "tiles" times only the quantised types with the
  // 1×4 and the 2×4 register tile (weight rows × activation rows) side by
  // side, the ratio in the last column. Optional 5th: the types to run
  // ("Q4_0,Q4_1").
  const bool tiles = argc > 4 && std::string(argv[4]) == "tiles";
  const bool rows = argc > 4 && std::string(argv[4]) == "rows";
  const bool levels = argc > 4 && std::string(argv[4]) == "levels";
  const bool prefill = argc > 4 && std::string(argv[4]) == "prefill";

  if (levels)
    std::printf(
        "levels: median us per call and median per-round ratio to avx2 (thread CPU time)\n");
  // 262144 x 640: Gemma 3 270M's output head (Q8_0, 178 MB), in "rows" mode
  // only: a decode row with its drafts against a head that no cache holds.
  const Shape shapes[] = {{576, 1536},  {1536, 576}, {576, 576},     {192, 576},
                          {49152, 576}, {1536, 768}, {262144, 640}};
  const DType types[] = {DType::Q4_1, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K,
                         DType::Q6_K, DType::F16,  DType::BF16, DType::F32};
  for (DType t : types) {
    const bool kquant = dtype_info(t).block == 256;
    if ((tiles || levels) && dtype_info(t).block == 1) continue;
    if (prefill && dtype_info(t).block != 1) continue;
    if (prefill && argc <= 5 && t != DType::F32) continue;
    if (argc > 5 && std::string(argv[5]).find(dtype_name(t)) == std::string::npos) continue;
    for (const Shape& s : shapes) {
      if (s.rows >= 49152 && t != DType::Q8_0) continue;  // the output head is Q8_0
      if (s.rows == 262144 && !rows) continue;
      if (s.cols % dtype_info(t).block != 0) continue;    // K-quants: cols % 256
      if (s.cols == 768 && !kquant) continue;             // a K-quant-only shape
      const Weight w = make_weight(t, s.rows, s.cols, rng);
      if (levels) {
        for (int64_t n : {1, 16, 64}) run_levels(w, n, budget);
        continue;
      }
      for (int64_t n : tiles  ? std::vector<int64_t>{1, 4, 6, 8, 12, 16, 24, 32, 64}
                       : rows    ? std::vector<int64_t>{1, 2, 3, 4, 5, 6, 8}
                       : prefill ? std::vector<int64_t>{128, 512}
                                 : std::vector<int64_t>{1, 16}) {
        std::vector<float> x(size_t(n * s.cols), 0.5f), y(size_t(n * s.rows));
        auto run = [&] { matmul(w.view, x.data(), n, y.data(), &pool); };
        if (tiles) {
          detail::set_max_tile_rows_for_bench(1);
          const double s1 = seconds_per_call(run, budget);
          detail::set_max_tile_rows_for_bench(2);
          const double s2 = seconds_per_call(run, budget);
          std::printf("%-6s %5lld x %-6lld %3lld 1x4 %8.1f us  2x4 %8.1f us  1x4/2x4 %.2f\n",
                      dtype_name(t), (long long)s.rows, (long long)s.cols, (long long)n, s1 * 1e6,
                      s2 * 1e6, s1 / s2);
          continue;
        }
        const double sec = seconds_per_call(run, budget);
        std::printf("%-6s %5lld x %-6lld %3lld %10.1f %9.2f %9.2f\n", dtype_name(t),
                    (long long)s.rows, (long long)s.cols, (long long)n, sec * 1e6,
                    double(w.bytes.size()) / sec * 1e-9, 2.0 * n * s.rows * s.cols / sec * 1e-9);
      }
    }
  }
  if (tiles || levels || rows || prefill) return 0;
  run_attention(pool, budget);
  return 0;
}
