// write_tiny_model FAMILY OUT.gguf — writes tiny_family(FAMILY) as a GGUF
// file, for scripts that run the same tiny model through another engine
// (tests/reference/moe/make_refs.py).
#include <cstdio>

#include "base/check.h"
#include "tests/support/tiny_model.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_tiny_model FAMILY OUT.gguf\n");
    return 2;
  }
  try {
    kvasir::test::write_tiny_gguf(argv[2], kvasir::test::tiny_family(argv[1]));
  } catch (const kvasir::Error& e) {
    std::fprintf(stderr, "write_tiny_model: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
