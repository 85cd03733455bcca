// The stage process: kvasird execs itself with `--stage N --segment NAME`
// (fork + exec, so no device state ever crosses a fork). The daemon set
// PR_SET_PDEATHSIG before exec, so a stage dies with the daemon.
//
// Start-up handshake, one for every backend (stages/backend.h), all through
// the segment (StageShared of this stage):
//   starting ─open the model, build the backend for the plan's device
//            (cpu: the slice executor; cuda:N: the plugin, weights uploaded)
//   ─capacity_blocks─▶ sized ─preload (CPU: page the slice in)
//   ─wait for header.kv_blocks (the daemon's minimum)─▶ allocate KV
//   ─attach boundaries─▶ ready ─agent─▶ stopped (shutdown)
// Any failure before serving: failed, error[] says why. Stopping while
// starting (preload, the wait for the block count or for a GPU peer's
// boundaries) exits 0 without a status.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/cores.h"
#include "base/cpu_list.h"
#include "base/log.h"
#include "kernels/cpu/simd.h"
#include "stages/agent.h"
#include "stages/backend.h"
#include "stages/core_share.h"
#include "stages/cpu_backend.h"
#include "stages/cuda_plugin.h"
#include "stages/expert_group.h"
#include "stages/stage.h"

namespace kvasir {
namespace {

// The segment, if it is this daemon's and has this stage; null (logged) if not.
std::unique_ptr<ipc::Segment> open_segment(int stage, const std::string& segment_name) {
  std::unique_ptr<ipc::Segment> seg;
  try {
    seg = ipc::Segment::open(segment_name);
  } catch (const Error& e) {
    KV_LOG_ERROR("stage", "{}", e.message());
    return nullptr;
  }
  if (getppid() != seg->header().owner_pid.load()) {
    KV_LOG_ERROR("stage", "the daemon is gone");
    return nullptr;
  }
  if (stage < 0 || stage >= seg->n_stages() + seg->n_members()) {
    KV_LOG_ERROR("stage", "no such stage (plan has {} and {} group members)", seg->n_stages(),
                 seg->n_members());
    return nullptr;
  }
  return seg;
}

void set_status(ipc::Segment& seg, ipc::StageShared& me, ipc::StageStatus status) {
  me.status.store(status);
  seg.header().state.ring();
}

int fail(ipc::Segment& seg, ipc::StageShared& me, const std::string& msg) {
  std::snprintf(me.error, sizeof me.error, "%s", msg.c_str());
  set_status(seg, me, ipc::kStageFailed);
  KV_LOG_ERROR("stage", "{}", msg);
  return 3;
}

// Opens the model, checks it against the plan and builds the backend of
// the plan's device for this stage.
std::unique_ptr<StageBackend> build_backend(ipc::Segment& seg, int stage) {
  const ipc::SegmentParams& p = seg.params();
  const ipc::StagePlan& plan = p.stages[stage];
  const int ordinal = cuda_ordinal(plan.device);
  KV_CHECK(ordinal >= 0 || std::strcmp(plan.device, "cpu") == 0,
           "device {}: not \"cpu\" or \"cuda:N\"", plan.device);
  auto model = ModelFile::open(p.model_path);
  const ModelConfig& mc = model->config();
  // The boundaries are strided by the plan's hidden width: it must be the model's.
  KV_CHECK(mc.hidden == p.dims.hidden, "{}: the model's hidden size {} is not the plan's {}",
           plan.device, mc.hidden, p.dims.hidden);
  if (ordinal >= 0) return make_cuda_backend(seg, stage, mc.vocab);  // the plugin maps its own
  CpuStageConfig cfg;
  cfg.slice = SliceSpec{plan.first,         plan.last,        stage == 0, stage == p.n_stages - 1,
                        plan.experts_first, plan.experts_last};
  if (plan.experts_first >= 0) {
    // An expert group's leader: its members through the segment, and the
    // kernel choices of the experts' matmuls made before it serves, for the
    // members to adopt (stages/expert_group.h).
    cfg.peers = std::make_shared<SegmentPeers>(seg, stage, mc.n_experts_used);
    choose_expert_kernels(p.model_path, plan.first, plan.last);
  }
  cfg.block_size = p.block_size;
  cfg.kv_type = p.kv_f32 ? DType::F32 : DType::F16;
  cfg.kv_memory = p.kv_memory;
  cfg.threads = plan.threads;
  cfg.max_tokens = p.dims.max_tokens;
  // The CPU stages share this machine's cores by need (stages/core_share.h).
  std::vector<int> threads(size_t(p.n_stages), 0);
  for (int i = 0; i < p.n_stages; ++i)
    if (cuda_ordinal(p.stages[i].device) < 0) threads[size_t(i)] = p.stages[i].threads;
  cfg.width = [share = CoreShare(seg, stage, available_cores(), std::move(threads))] {
    return share.width();
  };
  return make_cpu_backend(std::move(model), cfg);
}

// The tail's structured outputs (stages/tail_grammar.h): its vocabulary from
// the model's tokenizer. Null (constrained rows then fail, logged) when the
// instance has no grammar table, or the tokenizer cannot be read.
std::shared_ptr<TailGrammar> tail_grammar(ipc::Segment& seg, int stage, int32_t vocab) {
  if (stage != seg.n_stages() - 1 || seg.grammar_table().entries() <= 0) return nullptr;
  try {
    auto model = ModelFile::open(seg.params().model_path);
    const ipc::SegmentParams& p = seg.params();
    TailGrammarOptions o;
    o.compile_workers = p.grammar_workers;
    o.cache_capacity = size_t(p.grammar_cache);
    o.compile_timeout = std::chrono::milliseconds(p.grammar_compile_timeout_ms);
    o.forced_drafts = p.forced_drafts;
    return TailGrammar::create(*model, vocab, seg.grammar_table(), o);
  } catch (const Error& e) {
    KV_LOG_ERROR("stage", "structured outputs off: {}", e.message());
    return nullptr;
  }
}

// Preload progress goes to the segment, for the daemon's log and `kvasir
// status`; the daemon's stop ends it.
PreloadConfig preload_config(ipc::Segment& seg, ipc::StageShared& me) {
  PreloadConfig pc;
  if (const char* d = std::getenv("KVASIR_TEST_PRELOAD_DELAY_MS"))
    pc.delay_ms_per_layer = std::clamp(std::atoi(d), 0, 1000);
  pc.progress = [&seg, &me](const PreloadProgress& pr) {
    me.load_bytes_total.store(pr.bytes_total);
    me.load_bytes_done.store(pr.bytes_done);
    me.load_layers_done.store(pr.layers_done);
    return !seg.stopping();
  };
  return pc;
}

// The daemon's decision: the smallest capacity of all stages. 0 if the
// daemon began stopping first.
int32_t wait_for_block_count(ipc::Segment& seg) {
  while (seg.header().kv_blocks.load() <= 0) {
    uint32_t seen = seg.header().state.seen();
    if (seg.stopping()) return 0;
    if (seg.header().kv_blocks.load() > 0) break;
    seg.header().state.wait(seen, 100'000'000);
  }
  return seg.header().kv_blocks.load();
}

// The stage's kernels line (AgentConfig::kernels): the SIMD summary of the
// CPU kernels, or the GPU's device.
std::function<std::string()> kernels_text(const std::string& device, bool gpu) {
  if (gpu) return [device] { return device; };
  return [] { return cpu::simd_summary(ipc::kStageSimdBytes - 1); };
}

// The handshake (see the top of this file), then the agent until shutdown.
int run_stage(ipc::Segment& seg, int stage) {
  ipc::StageShared& me = seg.stage(stage);
  std::unique_ptr<StageBackend> backend = build_backend(seg, stage);
  const int64_t cap = backend->capacity_blocks();
  me.capacity_blocks.store(cap);
  set_status(seg, me, ipc::kStageSized);

  if (!backend->preload(preload_config(seg, me))) return 0;
  const int32_t n_blocks = wait_for_block_count(seg);
  if (n_blocks <= 0) return 0;
  const int32_t n_blocks_swa = seg.header().kv_blocks_swa.load();  // stored before kv_blocks
  // With a sliding group the full pool may exceed it: its sliding layers
  // hold fewer (allocate_kv checks the whole).
  KV_CHECK(n_blocks <= cap || n_blocks_swa > 0, "the daemon asked for {} blocks, this stage holds {}",
           n_blocks, cap);
  backend->allocate_kv(n_blocks, n_blocks_swa);
  ipc::set_stage_experts(me, backend->n_experts());
  if (!backend->attach_boundaries()) return 0;
  const ipc::StagePlan& plan = seg.params().stages[stage];
  const std::string device(plan.device, strnlen(plan.device, sizeof plan.device));
  const bool gpu = cuda_ordinal(device.c_str()) >= 0;
  std::function<std::string()> kernels = kernels_text(device, gpu);
  ipc::write_stage_simd(me, kernels());  // there from ready on; the agent updates it
  set_status(seg, me, ipc::kStageReady);

  const AgentConfig ac{stage,          backend->vocab(),
                       n_blocks,       tail_grammar(seg, stage, backend->vocab()),
                       gpu,            std::move(kernels),
                       n_blocks_swa};
  const int rc =
      run_agent(seg, ac, [&](const ForwardBatch& b, const float* in, float* out, float* logits) {
        backend->forward(b, in, out, logits);
        ipc::add_stage_routed(me, backend->routed());  // a batch that threw counts nothing
      });
  set_status(seg, me, ipc::kStageStopped);
  return rc;
}

// [[stages]] cpus: the whole process on those CPUs, pinned before it starts
// a thread of its own (its kernel threads inherit the set). The daemon
// checked the list against its own CPUs; the kernel may still refuse one
// gone offline since: the stage then fails, saying so.
void pin_cpus(const ipc::StagePlan& plan, int stage) {
  const std::string text(plan.cpus, strnlen(plan.cpus, sizeof plan.cpus));
  if (text.empty()) return;
  const std::string field = fmt::format("stage {} cpus", stage);
  std::vector<int> cpus;
  Status st = parse_cpu_list(text, field, cpus);
  if (st.ok()) st = pin_to_cpus(cpus, field);
  KV_CHECK(st.ok(), "{}", st.message());
  KV_LOG_INFO("stage", "stage {} on CPUs {}", stage, text);
}

}  // namespace

int stage_main(int stage, const std::string& segment_name, const std::string& inherit) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // again, in case we were not started by the supervisor
  if (!inherit.empty()) {
    const int n = cpu::simd_adopt_choices(inherit);
    KV_LOG_INFO("stage", "adopted {} kernel choices of the stage it replaces", n);
  }
  std::unique_ptr<ipc::Segment> seg = open_segment(stage, segment_name);
  if (!seg) return 2;
  // Process indices past the ring's stages are expert group members
  // (docs/expert-groups.md): the supervisor numbers every process so.
  const int member = stage - seg->n_stages();
  ipc::StageShared& me = member >= 0 ? seg->member(member) : seg->stage(stage);
  me.pid.store(getpid());
  try {
    const ipc::SegmentParams& p = seg->params();
    pin_cpus(member >= 0 ? p.members[member].plan : p.stages[stage], stage);
    return member >= 0 ? run_member(*seg, member) : run_stage(*seg, stage);
  } catch (const Error& e) {
    return fail(*seg, me, e.message());
  } catch (const std::exception& e) {
    return fail(*seg, me, e.what());
  }
}

}  // namespace kvasir
