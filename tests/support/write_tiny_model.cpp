// write_tiny_model FAMILY OUT.gguf [OUT_DIR [GENERATION_JSON]] — writes
// tiny_family(FAMILY) as a GGUF file, for scripts that run the same tiny
// model through another engine (tests/reference/moe/make_refs.py); with
// OUT_DIR, also as a Hugging Face folder of the same weights and tokenizer
// (safetensors, tokenizer.json, tokenizer_config.json and a
// generation_config.json holding GENERATION_JSON, default {}), for the
// daemon's end-to-end folder test (tests/integration/test_hf_folder.sh).
#include <cstdio>

#include "base/check.h"
#include "tests/support/tiny_model.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: write_tiny_model FAMILY OUT.gguf [OUT_DIR [GENERATION_JSON]]\n");
    return 2;
  }
  try {
    const kvasir::test::TinySpec spec = kvasir::test::tiny_family(argv[1]);
    kvasir::test::write_tiny_gguf(argv[2], spec);
    if (argc >= 4) {
      kvasir::test::write_tiny_safetensors(argv[3], spec);
      kvasir::test::write_tiny_hf_tokenizer(argv[3], spec, argc == 5 ? argv[4] : "{}");
    }
  } catch (const kvasir::Error& e) {
    std::fprintf(stderr, "write_tiny_model: %s\n", e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_tiny_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
