// tests/fuzz/fuzz_gguf.cpp — the GGUF reader on arbitrary bytes.
//
// Any kvasir::Error is a clean refusal; anything else (a crash, a sanitizer
// report, another exception type) is a bug. A file that opens is then read
// the way the daemon reads one: every metadata accessor, every tensor's
// bytes, the model config and the tokenizer built from it.
#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

using namespace kvasir;

uint64_t g_sink_gguf;  // results land here, so no call is optimised away

namespace {

void read_value(const std::string& key, const GgufValue& v) {
  // Each accessor either returns or throws kvasir::Error on a type mismatch.
  try { g_sink_gguf += v.as_uint(key); } catch (const Error&) {}
  try { g_sink_gguf += uint64_t(v.as_int(key)); } catch (const Error&) {}
  try { g_sink_gguf += uint64_t(v.as_float(key) != 0); } catch (const Error&) {}
  try { g_sink_gguf += v.as_bool(key); } catch (const Error&) {}
  try { g_sink_gguf += v.as_string(key).size(); } catch (const Error&) {}
  try {
    const GgufArray& a = v.as_array(key);
    g_sink_gguf += fuzz::touch(a.data, a.nbytes);
    for (auto s : a.strings) g_sink_gguf += fuzz::touch(s.data(), s.size());
    // First, last and one past the end: the last must throw, not read.
    for (uint64_t i : {uint64_t(0), a.count ? a.count - 1 : 0, a.count}) {
      try { g_sink_gguf += uint64_t(a.int_at(i, key)); } catch (const Error&) {}
      try { g_sink_gguf += uint64_t(a.float_at(i, key) != 0); } catch (const Error&) {}
    }
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file;
  const std::string& path = file.set(data, size);
  std::unique_ptr<GgufFile> f;
  try {
    f = GgufFile::open(path);
  } catch (const Error&) {
    return 0;
  }
  g_sink_gguf += f->version() + f->alignment() + f->data_start() + f->file_size();
  for (const auto& [k, v] : f->metadata()) read_value(k, v);
  for (const auto& t : f->tensors()) {
    g_sink_gguf += fuzz::touch(t.view.data, t.view.nbytes);
    g_sink_gguf += t.view.row_bytes();
    if (f->find_tensor(t.name) == nullptr) __builtin_trap();
  }
  try { (void)config_from_gguf(*f); } catch (const Error&) {}
  try {
    auto tok = Tokenizer::from_gguf(*f);
    auto ids = tok->encode("Hello, world! <|im_start|> 123 \xe2\x96\x81 \xff", true, true);
    (void)tok->decode(ids);
    for (int32_t id : {0, tok->vocab_size() - 1}) {
      try { (void)tok->token_text(id); } catch (const Error&) {}
    }
  } catch (const Error&) {
  }
  return 0;
}
