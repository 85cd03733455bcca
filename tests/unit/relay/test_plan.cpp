// tests/unit/relay/test_plan.cpp — the join's messages (relay/plan.h): every
// field of a plan survives the trip, and what is not exactly a message of
// the kind expected is refused, whatever its bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ipc/link_kind.h"
#include "relay/plan.h"

using namespace kvasir;
using namespace kvasir::relay;

namespace {

WorkerPlan sample_plan() {
  WorkerPlan w;
  ipc::SegmentParams& p = w.params;
  p.n_stages = 3;
  p.dims = ipc::SlotDims{8, 128, 512, 576, 3, 1};
  p.block_size = 16;
  p.kv_memory = 3ull << 30;
  p.kv_gpu_util = 0.85;
  p.cuda_quantize = 1;
  for (int s = 0; s < 3; ++s) {
    p.stages[s] = ipc::StagePlan{s * 10, s * 10 + 9, 2, "cpu"};
    std::snprintf(p.stages[s].cpus, sizeof p.stages[s].cpus, "%d-%d", 2 * s, 2 * s + 1);
  }
  p.stages[2].host = 1;  // the worker's stage
  std::strcpy(p.model_path, "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  p.grammar_entries = 64, p.grammar_capacity = 4096, p.forced_drafts = 4;
  p.spin_ns = 5000;
  p.stages[0].experts_first = -1;  // a value whose sign must survive
  w.first_remote = 2, w.end = 3;
  w.watchdog = {12.5, 1.5, 0};  // the leader's [recovery] keys (busy cap 0: forever)
  return w;
}

TEST(Plan, EveryFieldSurvivesTheTrip) {
  const WorkerPlan w = sample_plan();
  const std::vector<uint8_t> bytes = encode_plan(w);
  WorkerPlan got;
  Status s = decode_plan(bytes, &got);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(encode_plan(got), bytes);
  EXPECT_EQ(got.first_remote, 2);
  EXPECT_EQ(got.end, 3);
  EXPECT_EQ(got.params.kv_memory, 3ull << 30);
  EXPECT_EQ(got.params.kv_gpu_util, 0.85);
  EXPECT_EQ(got.params.spin_ns, 5000);
  EXPECT_EQ(got.params.stages[0].experts_first, -1);
  EXPECT_STREQ(got.params.stages[2].cpus, "4-5");
  EXPECT_STREQ(got.params.model_path, w.params.model_path);
  EXPECT_EQ(got.params.dims.max_table, 512);
  EXPECT_EQ(got.watchdog.k, 12.5);
  EXPECT_EQ(got.watchdog.floor_s, 1.5);
  EXPECT_EQ(got.watchdog.busy_cap_s, 0);
}

// The worker decides each link's kind from the plan it got as the leader
// did from its own: GPU stages beside the cut see a link across hosts, GPU
// stages on one side keep CUDA IPC; a plan whose cut is not between two
// hosts is refused (a GPU stage there would wait for a slot never exported).
TEST(Plan, BothHostsSeeTheCutAsALinkAcrossHosts) {
  WorkerPlan w = sample_plan();
  for (int s = 0; s < 3; ++s) std::snprintf(w.params.stages[s].device, 16, "cuda:%d", s % 2);
  WorkerPlan got;
  ASSERT_TRUE(decode_plan(encode_plan(w), &got).ok());
  EXPECT_EQ(got.params.stages[2].host, 1);
  EXPECT_EQ(ipc::link_kind(got.params, 0), ipc::LinkKind::kCudaIpc);
  EXPECT_EQ(ipc::link_kind(got.params, 1), ipc::LinkKind::kAcrossHosts);
  for (int l = 0; l < 2; ++l) EXPECT_EQ(ipc::link_kind(got.params, l), ipc::link_kind(w.params, l));
  w.params.stages[2].host = 0;  // the cut at stage 2, but both on one host
  const Status s = decode_plan(encode_plan(w), &got);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("stages 1 and 2 are both on host 0"), std::string::npos)
      << s.to_string();
  w = sample_plan(), w.params.stages[2].host = -1;  // out of range
  EXPECT_EQ(decode_plan(encode_plan(w), &got).code(), ErrorCode::kInvalidArgument);
}

TEST(Plan, EveryTruncationAndAnyExtraByteIsRefused) {
  const std::vector<uint8_t> bytes = encode_plan(sample_plan());
  WorkerPlan got;
  ASSERT_TRUE(decode_plan(bytes, &got).ok());
  for (size_t n = 0; n < bytes.size(); ++n)
    ASSERT_EQ(decode_plan(std::span(bytes).first(n), &got).code(), ErrorCode::kInvalidArgument)
        << n << " bytes";
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_EQ(decode_plan(longer, &got).code(), ErrorCode::kInvalidArgument);
}

TEST(Plan, WrongKindFormatTextOrPlanIsRefused) {
  WorkerPlan got;
  const std::vector<uint8_t> good = encode_plan(sample_plan());
  ASSERT_TRUE(decode_plan(good, &got).ok()) << "each case below breaks one thing of a good plan";
  std::vector<uint8_t> b = good;
  b[0] = uint8_t(PlanKind::kSized);
  EXPECT_EQ(decode_plan(b, &got).code(), ErrorCode::kInvalidArgument) << "another kind";
  b = good, b[1] = uint8_t(kPlanFormat + 1);
  Status s = decode_plan(b, &got);
  EXPECT_NE(s.message().find("format " + std::to_string(kPlanFormat + 1)), std::string::npos)
      << s.to_string();
  b = good, b[1] = 3;  // a build before the slice's end: refused, naming both formats
  s = decode_plan(b, &got);
  EXPECT_NE(s.message().find("writes format 3, this build reads 4"), std::string::npos)
      << s.to_string();

  WorkerPlan w = sample_plan();
  std::memset(w.params.model_path, 'x', sizeof w.params.model_path);  // no end
  EXPECT_EQ(decode_plan(encode_plan(w), &got).code(), ErrorCode::kInvalidArgument);
  w = sample_plan(), w.params.n_stages = 1;
  EXPECT_EQ(decode_plan(encode_plan(w), &got).code(), ErrorCode::kInvalidArgument);
  w = sample_plan(), w.first_remote = 3;  // past the tail
  EXPECT_EQ(decode_plan(encode_plan(w), &got).code(), ErrorCode::kInvalidArgument);
  w = sample_plan(), w.first_remote = 0;  // the head stays on the leader
  EXPECT_EQ(decode_plan(encode_plan(w), &got).code(), ErrorCode::kInvalidArgument);
  w = sample_plan(), w.end = 2;  // an empty slice
  EXPECT_EQ(decode_plan(encode_plan(w), &got).code(), ErrorCode::kInvalidArgument);
  w = sample_plan(), w.end = 4;  // past the tail
  s = decode_plan(encode_plan(w), &got);
  EXPECT_NE(s.message().find("a slice 2..3 ends outside stages 2..2"), std::string::npos)
      << s.to_string();
  w = sample_plan(), w.first_remote = 1, w.end = 2;  // a slice that ends before the tail
  w.params.stages[1].host = 1, w.params.stages[2].host = 0;  // and the ring comes back
  ASSERT_TRUE(decode_plan(encode_plan(w), &got).ok());
  EXPECT_EQ(got.end, 2);
  w.params.stages[2].host = 1;  // the slice's end is not between two hosts
  s = decode_plan(encode_plan(w), &got);
  EXPECT_NE(s.message().find("stages 1 and 2 are both on host 1, but the worker's slice ends"),
            std::string::npos)
      << s.to_string();
  // Watchdog limits outside the config's ranges (a k below 1 would kill a
  // batch as slow as its own p99).
  for (ipc::HangLimits l : {ipc::HangLimits{0.5, 1, 1}, ipc::HangLimits{10, -1, 1},
                            ipc::HangLimits{10, 1, 1e9}, ipc::HangLimits{NAN, 1, 1}}) {
    w = sample_plan(), w.watchdog = l;
    EXPECT_EQ(decode_plan(encode_plan(w), &got).code(), ErrorCode::kInvalidArgument) << l.k;
  }
}

TEST(Plan, SizedAndBlocksTravelAndAreChecked) {
  WorkerSized sized;
  ASSERT_TRUE(decode_sized(encode_sized({1234}), &sized).ok());
  EXPECT_EQ(sized.capacity_blocks, 1234);
  EXPECT_FALSE(decode_sized(encode_sized({0}), &sized).ok());
  EXPECT_FALSE(decode_sized(encode_sized({int64_t(1) << 40}), &sized).ok());
  EXPECT_FALSE(decode_sized(encode_blocks({5, 0}), &sized).ok()) << "another kind";

  RingBlocks blocks;
  ASSERT_TRUE(decode_blocks(encode_blocks({900, 120}), &blocks).ok());
  EXPECT_EQ(blocks.kv_blocks, 900);
  EXPECT_EQ(blocks.kv_blocks_swa, 120);
  EXPECT_FALSE(decode_blocks(encode_blocks({0, 0}), &blocks).ok());
  EXPECT_FALSE(decode_blocks(encode_blocks({5, -1}), &blocks).ok());
}

}  // namespace
