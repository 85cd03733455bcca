// make_moe_model OUT.gguf [LAYERS EXPERTS TOP_K HIDDEN EXPERT_FFN] — a random
// Qwen3-MoE for bench/moe/run.sh (docs/expert-groups.md, "Benchmark"),
// written with the tests' model writer (tests/support/tiny_model.h): Q8_0
// matrices, defaults 8 layers, 64 experts, top 8, hidden 512, expert width
// 384, so a token's expert FFNs (8 x 3 x 512 x 384 per layer) outweigh its
// attention (4 x 512 x 512) about 4.5 to 1.
#include <cstdio>
#include <cstdlib>

#include "base/check.h"
#include "tests/support/tiny_model.h"

int main(int argc, char** argv) {
  if (argc != 2 && argc != 7) {
    std::fprintf(stderr,
                 "usage: make_moe_model OUT.gguf [LAYERS EXPERTS TOP_K HIDDEN EXPERT_FFN]\n");
    return 2;
  }
  kvasir::test::TinySpec s = kvasir::test::tiny_family("qwen3moe");
  s.layers = 8;
  s.experts = 64;
  s.experts_used = 8;
  s.hidden = 512;
  s.expert_ffn = 384;
  if (argc == 7) {
    s.layers = std::atoi(argv[2]);
    s.experts = std::atoi(argv[3]);
    s.experts_used = std::atoi(argv[4]);
    s.hidden = std::atoi(argv[5]);
    s.expert_ffn = std::atoi(argv[6]);
  }
  s.heads = 8;
  s.kv_heads = 4;
  s.head_dim = s.hidden / s.heads;
  s.ctx = 4096;
  s.matrix_type = kvasir::DType::Q8_0;
  try {
    kvasir::test::write_tiny_gguf(argv[1], s);
  } catch (const kvasir::Error& e) {
    std::fprintf(stderr, "make_moe_model: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
