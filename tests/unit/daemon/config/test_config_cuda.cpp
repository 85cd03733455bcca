// The plan rules for GPU stages (daemon/config.h): cuda:N devices, the KV
// share of device memory, and what check_against_model leaves to the stage
// (the plugin and the driver are checked after exec: stages/cuda_plugin.h).
#include <gtest/gtest.h>

#include <tuple>

#include "base/check.h"
#include "daemon/config/config.h"
#include "tests/unit/daemon/config/refusal.h"

namespace kvasir {
namespace {

std::string plan(const std::string& dev0, const std::string& dev1, const std::string& kv = "") {
  return R"(
[model]
path = "m.gguf"
[[stages]]
layers = "0-14"
device = ")" +
         dev0 + R"("
[[stages]]
layers = "15-29"
device = ")" +
         dev1 + R"("
[kv]
memory = "100KiB"
)" + kv;
}

using test::refusal;

ModelConfig model30() {
  ModelConfig m;
  m.n_layers = 30;
  m.hidden = 576;
  m.n_heads = 9;
  m.n_kv_heads = 3;
  m.head_dim = 64;
  return m;
}

TEST(ConfigCuda, GpuDevicesParse) {
  Config c = parse_config(plan("cuda:0", "cuda:1"), "/base");
  ASSERT_EQ(c.plan.stages.size(), 2u);
  EXPECT_EQ(c.plan.stages[0].device, "cuda:0");
  EXPECT_TRUE(c.plan.stages[0].is_gpu());
  EXPECT_TRUE(c.plan.stages[1].is_gpu());
  c = parse_config(plan("cpu", "cuda:12"), "/base");
  EXPECT_FALSE(c.plan.stages[0].is_gpu());
  EXPECT_EQ(c.plan.stages[1].device, "cuda:12");
}

TEST(ConfigCuda, MalformedGpuDevicesRefused) {
  for (const char* bad : {"cuda:", "cuda:x", "cuda:-1", "cuda:1234", "cuda0", "CUDA:0", "gpu:0",
                          "cuda:0 ", "cuda:1a"}) {
    auto m = refusal(plan("cpu", bad));
    EXPECT_NE(m.find("stages[1].device"), std::string::npos) << bad << ": " << m;
  }
}

// Two stages on one GPU are two processes on one device: refused by the
// plan (one stage per GPU), as docs/architecture.md says.
TEST(ConfigCuda, OneStagePerGpu) {
  auto m = refusal(plan("cuda:3", "cuda:3"));
  EXPECT_NE(m.find("stages[1].device: cuda:3 is already used"), std::string::npos) << m;
}

TEST(ConfigCuda, GpuMemoryUtilization) {
  EXPECT_DOUBLE_EQ(parse_config(plan("cpu", "cuda:0"), "/base").kv.gpu_memory_utilization, 0.9);
  EXPECT_DOUBLE_EQ(parse_config(plan("cpu", "cuda:0", "gpu_memory_utilization = 0.5\n"), "/base")
                       .kv.gpu_memory_utilization,
                   0.5);
  EXPECT_DOUBLE_EQ(parse_config(plan("cpu", "cuda:0", "gpu_memory_utilization = 1\n"), "/base")
                       .kv.gpu_memory_utilization,
                   1.0);
  for (const char* bad : {"0", "0.0", "-0.5", "1.01", "\"0.5\"", "nan", "inf"}) {
    auto m = refusal(plan("cpu", "cuda:0", std::string("gpu_memory_utilization = ") + bad + "\n"));
    EXPECT_NE(m.find("kv.gpu_memory_utilization"), std::string::npos) << bad << ": " << m;
  }
}

// kv.memory bounds CPU stages only: a GPU stage sizes its KV on the device.
// Layer ranges are still checked for every stage.
TEST(ConfigCuda, ModelChecksLeaveKvSizingOfGpuStagesToTheStage) {
  ModelConfig m = model30();
  // 100 KiB holds no block of 15 layers (15 × K,V × 3 heads × 64 × 16 tokens × 2 bytes
  // = 180 KiB): refused on a CPU stage, fine on a GPU stage.
  Config gpu = parse_config(plan("cuda:0", "cuda:1"), "/base");
  EXPECT_NO_THROW(check_against_model(gpu, m));
  Config mixed = parse_config(plan("cpu", "cuda:0"), "/base");
  try {
    check_against_model(mixed, m);
    ADD_FAILURE() << "a CPU stage whose kv.memory holds no block was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("stages[0]"), std::string::npos) << e.message();
  }
  Config past = parse_config(plan("cuda:0", "cuda:1"), "/base");
  past.plan.stages[1].last = 40;
  try {
    check_against_model(past, m);
    ADD_FAILURE() << "a GPU stage past the model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("goes past"), std::string::npos) << e.message();
  }
}

TEST(ConfigCuda, CudaTableGraphsAndQuantize) {
  Config d = parse_config(plan("cpu", "cuda:0"), "/base");
  EXPECT_FALSE(d.cuda.graphs);  // off until the graph path has run on a GPU
  EXPECT_TRUE(parse_config(plan("cpu", "cuda:0") + "[cuda]\ngraphs = true\n", "/base").cuda.graphs);
  EXPECT_EQ(d.cuda.quantize, "none");
  Config c =
      parse_config(plan("cpu", "cuda:0") + "[cuda]\ngraphs = false\nquantize = \"fp8\"\n", "/base");
  EXPECT_FALSE(c.cuda.graphs);
  EXPECT_EQ(c.cuda.quantize, "fp8");
  const std::pair<std::string, std::string> bad[] = {
      {"graphs = 1\n", "cuda.graphs: must be true or false"},
      {"graphs = \"yes\"\n", "cuda.graphs"},
      {"quantize = \"int8\"\n", "cuda.quantize: \"int8\" is not none or fp8"},
      {"quantize = 8\n", "cuda.quantize: must be a string"},
      {"graph = true\n", "cuda.graph: unknown key"},
  };
  for (const auto& [body, want] : bad) {
    auto m = refusal(plan("cpu", "cuda:0") + "[cuda]\n" + body);
    EXPECT_NE(m.find(want), std::string::npos) << body << ": " << m;
  }
  auto m = refusal(plan("cpu", "cpu") + "[cuda]\nquantize = \"fp8\"\n");
  EXPECT_NE(m.find("cuda.quantize: \"fp8\" but no stage is on a GPU"), std::string::npos) << m;
  EXPECT_NO_THROW(parse_config(plan("cpu", "cpu") + "[cuda]\ngraphs = false\n", "/base"));
}

// The CPU backend does not read FP8 weights: a plan with a CPU stage is
// refused for such a model, naming the stage.
TEST(ConfigCuda, CpuStagesRefuseFp8Models) {
  ModelConfig m = model30();
  m.fp8_weights = true;
  EXPECT_NO_THROW(check_against_model(parse_config(plan("cuda:0", "cuda:1"), "/base"), m));
  for (const auto& [a, b, stage] :
       {std::tuple{"cpu", "cuda:0", "stages[0]"}, std::tuple{"cuda:0", "cpu", "stages[1]"}}) {
    Config c = parse_config(plan(a, b), "/base");
    try {
      check_against_model(c, m);
      ADD_FAILURE() << "a CPU stage for FP8 weights was accepted";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(std::string(stage) + ".device: cpu cannot run this model"),
                std::string::npos)
          << e.message();
      EXPECT_NE(e.message().find("FP8"), std::string::npos) << e.message();
    }
  }
}

// The CUDA backend runs neither experts nor Qwen3's q/k norms: a plan with a
// GPU stage is refused for such a model (kModelFormat), naming the stage
// and the feature; the same plan on cpu stages is fine.
TEST(ConfigCuda, GpuStagesRefuseMoeAndQkNormModels) {
  // Mixtral-style (llama with experts) runs on GPU stages; other MoE
  // families and the kernels' limits are refused with their reason.
  ModelConfig mixtral = model30();
  mixtral.arch = "llama";
  mixtral.n_experts = 8;
  mixtral.n_experts_used = 2;
  Config gpu = parse_config(plan("cuda:0", "cpu"), "/base");
  gpu.kv.memory = uint64_t(64) << 20;  // for the cpu stage after it
  EXPECT_NO_THROW(check_against_model(gpu, mixtral));
  ModelConfig q3moe = mixtral;
  q3moe.arch = "qwen3moe";
  q3moe.qk_norm = true;
  ModelConfig q2moe = mixtral;
  q2moe.arch = "qwen2moe";
  q2moe.n_experts = 5;
  q2moe.shared_expert_ffn = 64;
  ModelConfig fp8 = mixtral;
  fp8.fp8_weights = true;
  ModelConfig wide = mixtral;
  wide.n_experts = 2048;
  ModelConfig qk = model30();
  qk.arch = "qwen3";
  qk.qk_norm = true;
  for (const auto& [m, feature] :
       {std::pair{q3moe, "qwen3moe mixture of experts (8 experts, top 2, per-head q/k RMSNorm)"},
        std::pair{q2moe, "qwen2moe mixture of experts (5 experts, top 2, a shared expert)"},
        std::pair{fp8, "llama mixture of experts (8 experts, top 2, FP8 experts)"},
        std::pair{wide, "at most 1024 experts, top 64"},
        std::pair{qk, "per-head q/k RMSNorm (qwen3)"}}) {
    if (!m.fp8_weights) {
      Config cpu = parse_config(plan("cpu", "cpu"), "/base");
      cpu.kv.memory = uint64_t(64) << 20;  // 100 KiB holds no block on a cpu stage
      EXPECT_NO_THROW(check_against_model(cpu, m));
    }
    try {
      check_against_model(parse_config(plan("cuda:0", "cpu"), "/base"), m);
      ADD_FAILURE() << "a GPU stage was accepted for " << feature;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kModelFormat);
      EXPECT_NE(e.message().find("stages[0].device"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(feature), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace kvasir
