// tests/fuzz/fuzz_safetensors.cpp — the safetensors reader on arbitrary bytes.
//
// Any kvasir::Error is a clean refusal; anything else is a bug. A file that
// opens has every tensor's bytes read and its name mapped.
#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "model/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

using namespace kvasir;

uint64_t g_sink_st;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file;
  const std::string& path = file.set(data, size);
  std::unique_ptr<SafetensorsFile> f;
  try {
    f = SafetensorsFile::open(path);
  } catch (const Error&) {
    return 0;
  }
  for (const auto& t : f->tensors()) {
    g_sink_st += fuzz::touch(t.view.data, t.view.nbytes);
    g_sink_st += t.view.row_bytes() + t.shape.size();
    if (f->find(t.name) == nullptr) __builtin_trap();
    g_sink_st += hf_to_gguf_name(t.name).has_value();
  }
  return 0;
}
