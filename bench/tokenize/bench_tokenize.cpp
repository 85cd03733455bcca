// bench/tokenize — encoding speed in MB/s on one core.
//
//   bench_tokenize [--gguf model.gguf | --hf tokenizer.json] [--chunk BYTES] [--repeat N] FILE
//
// Encodes FILE in chunks (default 4096 bytes, cut at a line end) with
// add_special = false, parse_special = true, on the calling thread only.
// Prints the first pass (cold word cache) and the best of the repeats.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/check.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

using namespace kvasir;

int main(int argc, char** argv) {
  std::string gguf = std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf", hf,
              file;
  size_t chunk = 4096;
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gguf" && i + 1 < argc)
      gguf = argv[++i];
    else if (a == "--hf" && i + 1 < argc)
      hf = argv[++i];
    else if (a == "--chunk" && i + 1 < argc)
      chunk = std::stoul(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc)
      repeat = std::stoi(argv[++i]);
    else
      file = a;
  }
  if (file.empty()) {
    std::fprintf(stderr,
                 "usage: bench_tokenize [--gguf F | --hf F] [--chunk N] [--repeat N] TEXTFILE\n");
    return 2;
  }
  try {
    std::ifstream in(file, std::ios::binary);
    KV_CHECK(in.good(), "cannot open {}", file);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    std::vector<std::string_view> chunks;
    for (size_t off = 0; off < text.size();) {
      size_t end = std::min(text.size(), off + chunk);
      const size_t nl = text.rfind('\n', end);
      if (end < text.size() && nl != std::string::npos && nl > off) end = nl + 1;
      chunks.push_back(std::string_view(text).substr(off, end - off));
      off = end;
    }
    std::unique_ptr<GgufFile> g;
    std::unique_ptr<Tokenizer> tok;
    if (!hf.empty()) {
      tok = Tokenizer::from_hf_json(hf);
    } else {
      g = GgufFile::open(gguf);
      tok = Tokenizer::from_gguf(*g);
    }
    const double mb = double(text.size()) / 1e6;
    size_t n_tokens = 0;
    double best = 0, first = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      size_t n = 0;
      for (auto c : chunks) n += tok->encode(c, false, true).size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      n_tokens = n;
      if (r == 0) first = mb / s;
      best = std::max(best, mb / s);
    }
    std::printf(
        "kvasir: %.2f MB, %zu tokens, %zu chunks: first pass %.2f MB/s, best of %d %.2f MB/s\n", mb,
        n_tokens, chunks.size(), first, repeat, best);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}
