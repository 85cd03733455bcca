// End-to-end through the relay: the default model's 2-stage plan with
// stage 1 "on a worker" — its own segment, made from the same plan, joined
// to the leader's by the two relays over a real UCX link on loopback —
// serves several concurrent greedy requests, and every text is identical,
// token for token, to the same plan on one host (one segment, no relay)
// and to one executor over the whole model. A joiner without the key comes
// to the worker meanwhile: refused, and the ring keeps serving.
// Real stage processes (the built kvasird, --stage N --segment NAME) and a
// real Bridge on the leader's segment.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <filesystem>
#include <random>
#include <thread>

#include "relay/relay.h"
#include "ring_fixture.h"

namespace kvasir::test {
namespace {

const char* kModel = "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr int kMaxTokens = 128;

struct Req {
  std::vector<int32_t> prompt;
  int max_new;
};

std::vector<Req> make_requests(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Req> v;
  for (int i = 0; i < n; ++i) {
    Req r;
    const int len = 1 + int(rng() % 24);
    for (int j = 0; j < len; ++j) r.prompt.push_back(int32_t(rng() % uint64_t(vocab)));
    r.max_new = 4 + int(rng() % 8);
    v.push_back(std::move(r));
  }
  return v;
}

// Every request through a Bridge on seg, all submitted at once; each one's tokens.
std::vector<std::vector<int32_t>> serve(ipc::Segment& seg, const Config& cfg, const ModelConfig& mc,
                                        int32_t kv_blocks, const std::vector<Req>& reqs) {
  BridgeConfig bc;
  bc.limits = SchedLimits{cfg.plan.max_rows, cfg.plan.max_tokens, cfg.scheduler.chunk_size, 256};
  bc.n_blocks = kv_blocks;
  bc.block_size = cfg.kv.block_size;
  bc.vocab = mc.vocab;
  bc.context_length = mc.context_length;
  std::vector<std::vector<int32_t>> out(reqs.size());
  Bridge engine(seg, bc);
  Collector col;
  for (size_t i = 0; i < reqs.size(); ++i) {
    GenRequest g;
    g.prompt = reqs[i].prompt;
    g.max_tokens = reqs[i].max_new;
    g.ignore_eos = true;
    g.sampling.temperature = 0.f;  // greedy
    EXPECT_NE(engine.submit(g, col.sink(int(i))), 0u);
  }
  EXPECT_TRUE(col.wait_all(reqs.size(), 60));
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(col.finish[int(i)], FinishReason::kLength) << col.errors[int(i)];
    out[i] = col.tokens[int(i)];
  }
  for (const auto& st : engine.ring_report().stages) EXPECT_EQ(st.refused, 0u);
  engine.shutdown();
  return out;
}

pid_t spawn_stage(int stage, const std::string& segment) {
  const std::string s = std::to_string(stage);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execl(kvasird_path().c_str(), "kvasird", "--stage", s.c_str(), "--segment", segment.c_str(),
          "--log-level", "warn", (char*)nullptr);
    _exit(127);
  }
  return pid;
}

// Waits until stage s of seg reports at least `want` (false: failed or late).
bool wait_stage(ipc::Segment& seg, int s, uint32_t want) {
  for (int i = 0; i < 6000; ++i) {
    const uint32_t st = seg.stage(s).status.load();
    if (st >= want) return st != ipc::kStageFailed;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The plan cut after stage 0: stage 0 on the leader's segment, stage 1 on
// the worker's, the relays between them over loopback.
std::vector<std::vector<int32_t>> serve_split(const Config& cfg, const ModelConfig& mc,
                                              const std::vector<Req>& reqs) {
  const ipc::SegmentParams p = Supervisor::params_for(cfg, mc);
  const std::string tag = std::to_string(getpid());
  const std::string ln = ipc::Segment::name_for("relay-e2e-leader" + tag);
  const std::string wn = ipc::Segment::name_for("relay-e2e-worker" + tag);
  auto leader = ipc::Segment::create(ln, p);
  auto worker = ipc::Segment::create(wn, p);
  const pid_t pids[2] = {spawn_stage(0, ln), spawn_stage(1, wn)};
  std::vector<std::vector<int32_t>> out;
  const bool sized =
      wait_stage(*leader, 0, ipc::kStageSized) && wait_stage(*worker, 1, ipc::kStageSized);
  EXPECT_TRUE(sized);
  // The block count for every stage of the ring: the smallest capacity
  // (what the join will carry in the Plan exchange; here both sides are in reach).
  const int32_t blocks = int32_t(
      std::min(leader->stage(0).capacity_blocks.load(), worker->stage(1).capacity_blocks.load()));
  for (ipc::Segment* seg : {leader.get(), worker.get()}) {
    seg->header().kv_blocks.store(blocks);
    seg->header().state.ring();
  }
  if (sized && wait_stage(*leader, 0, ipc::kStageReady) &&
      wait_stage(*worker, 1, ipc::kStageReady)) {
    const net::ClusterKey key(std::vector<uint8_t>(32, 0x33));
    net::LinkOptions wo, lo;
    wo.role = net::Role::kWorker, wo.name = "worker-1";
    lo.role = net::Role::kLeader, lo.name = "leader";
    std::unique_ptr<net::UcxListener> listener;
    EXPECT_TRUE(net::UcxListener::listen("127.0.0.1", 0, key, wo, &listener).ok());
    const uint16_t port = listener->port();
    Status wend, lend;
    std::thread wt([&] {
      std::unique_ptr<net::UcxLink> link;
      wend = listener->accept(10000, &link);
      relay::RelayOptions o;
      o.listener = listener.get();  // the rogue below comes here
      if (wend.ok()) wend = relay::run_worker_relay(*worker, *link, o);
    });
    std::thread lt([&] {
      std::unique_ptr<net::UcxLink> link;
      lend = net::UcxLink::connect("127.0.0.1", port, key, lo, &link);
      if (lend.ok()) lend = relay::run_leader_relay(*leader, *link, {});
    });
    Status rogue_end;
    std::thread rogue([&] {  // a joiner without the key, while the ring serves
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const net::ClusterKey stale(std::vector<uint8_t>(32, 0x34));
      std::unique_ptr<net::UcxLink> link;
      net::LinkOptions ro = lo;
      ro.name = "rogue";
      rogue_end = net::UcxLink::connect("127.0.0.1", port, stale, ro, &link);
    });
    out = serve(*leader, cfg, mc, blocks, reqs);
    rogue.join();
    EXPECT_EQ(rogue_end.code(), ErrorCode::kUnauthenticated) << rogue_end.to_string();
    leader->request_shutdown();
    lt.join(), wt.join();
    EXPECT_TRUE(lend.ok()) << lend.to_string();
    EXPECT_TRUE(wend.ok()) << wend.to_string();
  }
  leader->request_shutdown(), worker->request_shutdown();
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
  }
  ipc::Segment::remove(ln), ipc::Segment::remove(wn);
  return out;
}

TEST(RelayE2E, TwoStagesAcrossTheRelayMatchOneHost) {
  const std::string model = std::string(KVASIR_SOURCE_DIR) + kModel;
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no default model (scripts/fetch-model)";
  const std::string dir = temp_dir("relay-e2e");
  Config cfg = load_config(write_config(dir, model, plan_toml(30, 2, 1, 0, 8, kMaxTokens)));
  const ModelConfig mc = check_config(cfg);
  const auto reqs = make_requests(8, mc.vocab, 29);

  std::vector<std::vector<int32_t>> one_host;
  {
    SupervisorOptions opt;
    opt.exe = kvasird_path();
    Supervisor sup(cfg, mc, opt);
    sup.start();
    one_host = serve(sup.segment(), cfg, mc, sup.kv_blocks(), reqs);
    sup.stop();
  }
  const auto split = serve_split(cfg, mc, reqs);
  ASSERT_EQ(split.size(), one_host.size());
  // And both are the model's greedy texts: one executor over every layer.
  auto file = ModelFile::open(model);
  SliceExecutor ex(*file, SliceSpec{0, 29, true, true}, KvSpec{64, 16, DType::F16}, 1, 512);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(split[i], one_host[i]) << "request " << i;
    EXPECT_EQ(split[i], reference_greedy(ex, 64, reqs[i].prompt, reqs[i].max_new))
        << "request " << i;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvasir::test
