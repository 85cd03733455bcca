// The stage process: kvasird execs itself with `--stage N --segment NAME`
// (fork + exec, so no device state ever crosses a fork). The daemon set
// PR_SET_PDEATHSIG before exec, so a stage dies with the daemon.
//
// Start-up handshake, all through the segment (StageShared of this stage):
//   starting ─open model, capacity = kv.memory / bytes per block─▶ sized
//   ─wait for header.kv_blocks (the daemon's minimum)─▶ build the executor
//   ─▶ ready ─serve─▶ stopped (shutdown) | failed (error[] says why)
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/log.h"
#include "stages/agent.h"
#include "stages/cuda_plugin.h"
#include "stages/preload.h"
#include "stages/stage.h"

namespace kvasir {

int stage_main(int stage, const std::string& segment_name) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // again, in case we were not started by the supervisor
  std::unique_ptr<ipc::Segment> seg;
  try {
    seg = ipc::Segment::open(segment_name);
  } catch (const Error& e) {
    KV_LOG_ERROR("stage", "{}", e.message());
    return 2;
  }
  if (getppid() != seg->header().owner_pid.load()) {
    KV_LOG_ERROR("stage", "the daemon is gone");
    return 2;
  }
  if (stage < 0 || stage >= seg->n_stages()) {
    KV_LOG_ERROR("stage", "no such stage (plan has {})", seg->n_stages());
    return 2;
  }
  ipc::StageShared& me = seg->stage(stage);
  me.pid.store(getpid());
  auto fail = [&](const std::string& msg) {
    std::snprintf(me.error, sizeof me.error, "%s", msg.c_str());
    me.status.store(ipc::kStageFailed);
    seg->header().state.ring();
    KV_LOG_ERROR("stage", "{}", msg);
    return 3;
  };
  try {
    const ipc::SegmentParams& p = seg->params();
    const ipc::StagePlan& plan = p.stages[stage];
    if (cuda_ordinal(plan.device) >= 0) return run_cuda_stage(*seg, stage);  // the plugin's
    KV_CHECK(std::strcmp(plan.device, "cpu") == 0, "device {}: not \"cpu\" or \"cuda:N\"",
             plan.device);
    auto model = ModelFile::open(p.model_path);
    const ModelConfig& mc = model->config();
    KV_CHECK(mc.hidden == p.dims.hidden, "model hidden size {} differs from the plan's {}",
             mc.hidden, p.dims.hidden);
    SliceSpec slice{plan.first, plan.last, stage == 0, stage == p.n_stages - 1};
    KvSpec kv{0, p.block_size, p.kv_f32 ? DType::F32 : DType::F16};
    uint64_t per = slice_kv_block_bytes(mc, slice, kv);
    int64_t cap = per ? int64_t(p.kv_memory / per) : 0;
    KV_CHECK(cap >= 1, "kv.memory ({} bytes) holds no block of layers {}-{} ({} bytes each)",
             p.kv_memory, plan.first, plan.last, per);
    me.capacity_blocks.store(cap);
    me.status.store(ipc::kStageSized);
    seg->header().state.ring();

    // Page the slice in while the daemon decides the block count; progress
    // goes to the segment for the daemon's log and `kvasir status`.
    PreloadConfig pc;
    if (const char* d = std::getenv("KVASIR_TEST_PRELOAD_DELAY_MS"))
      pc.delay_ms_per_layer = std::clamp(std::atoi(d), 0, 1000);
    pc.progress = [&](const PreloadProgress& pr) {
      me.load_bytes_total.store(pr.bytes_total);
      me.load_bytes_done.store(pr.bytes_done);
      me.load_layers_done.store(pr.layers_done);
      return !seg->stopping();
    };
    if (!preload_slice(*model, slice, pc)) return 0;

    // Wait for the daemon's decision: the smallest capacity of all stages.
    while (seg->header().kv_blocks.load() <= 0) {
      uint32_t seen = seg->header().state.seen();
      if (seg->stopping()) return 0;
      if (seg->header().kv_blocks.load() > 0) break;
      seg->header().state.wait(seen, 100'000'000);
    }
    kv.n_blocks = seg->header().kv_blocks.load();
    KV_CHECK(kv.n_blocks <= cap, "the daemon asked for {} blocks, this stage holds {}", kv.n_blocks,
             cap);
    SliceExecutor exec(*model, slice, kv, plan.threads, p.dims.max_tokens);
    me.status.store(ipc::kStageReady);
    seg->header().state.ring();

    AgentConfig ac{stage, mc.vocab, kv.n_blocks};
    int rc =
        run_agent(*seg, ac, [&](const ForwardBatch& b, const float* in, float* out, float* logits) {
          exec.forward(b, in, out, logits);
        });
    me.status.store(ipc::kStageStopped);
    seg->header().state.ring();
    return rc;
  } catch (const Error& e) {
    return fail(e.message());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

}  // namespace kvasir
