// tests/fuzz/fuzz_tokenizer.cpp — the tokenizers on arbitrary text and ids.
//
// Loaded once: the tokenizers of tests/data/tokenizer (Hugging Face JSON for
// GPT-2, Llama 3, Qwen2, SmolLM, SentencePiece; tiny GGUF ones) and the
// default model's when models/ has it. Input byte 0 picks a tokenizer and
// the flags, the rest is text: encode, decode, stream-decode; the same bytes
// read as int32 ids go through decode / token_text / StreamDecoder, where an
// id out of range must throw kvasir::Error. Input byte 0 == 0xFF instead
// loads the rest as a Hugging Face tokenizer.json (the loader itself).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

using namespace kvasir;

size_t g_sink_tok;  // results land here, so no call is optimised away

namespace {
std::vector<std::unique_ptr<Tokenizer>> g_toks;

void load_all() {
  namespace fs = std::filesystem;
  const std::string dir = fuzz::source_dir() + "/tests/data/tokenizer/";
  for (const char* n : {"hf_gpt2.json", "hf_llama3.json", "hf_qwen2.json", "hf_smollm.json",
                        "hf_spm.json"}) {
    if (fs::exists(dir + n)) g_toks.push_back(Tokenizer::from_hf_json(dir + n));
  }
  std::vector<std::string> ggufs;
  for (const char* n : {"tiny_llama3.gguf", "tiny_qwen2.gguf", "tiny_spm.gguf"})
    ggufs.push_back(dir + n);
  ggufs.push_back(fuzz::source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  for (const auto& p : ggufs) {
    if (!fs::exists(p)) continue;
    auto f = GgufFile::open(p);
    g_toks.push_back(Tokenizer::from_gguf(*f));  // copies what it needs
  }
  if (g_toks.empty()) {
    std::fprintf(stderr, "fuzz_tokenizer: no tokenizer found under %s\n", dir.c_str());
    std::abort();
  }
  std::fprintf(stderr, "fuzz_tokenizer: %zu tokenizers\n", g_toks.size());
}

void run_ids(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  try { g_sink_tok += tok.decode(ids, skip).size(); } catch (const Error&) {}
  StreamDecoder sd(tok, skip, true);
  for (int32_t id : ids) {
    try { g_sink_tok += sd.push(id).size(); } catch (const Error&) {}
    try { g_sink_tok += tok.token_text(id).size(); } catch (const Error&) {}
    try { g_sink_tok += tok.piece(id, skip).size(); } catch (const Error&) {}
    g_sink_tok += tok.is_eog(id) + tok.is_special(id);
  }
  g_sink_tok += sd.flush().size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (g_toks.empty()) load_all();
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  if (sel == 0xFF) {
    static fuzz::MemFile file;
    const std::string& path = file.set(data + 1, size - 1);
    try {
      auto tok = Tokenizer::from_hf_json(path);
      auto ids = tok->encode("Hello world \xe2\x96\x81 <s> \xff", true, true);
      run_ids(*tok, ids, false);
    } catch (const Error&) {
    }
    return 0;
  }

  const Tokenizer& tok = *g_toks[(sel & 0x0F) % g_toks.size()];
  const bool add_special = sel & 0x10, parse_special = sel & 0x20, skip = sel & 0x40;
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, add_special, parse_special);
  } catch (const Error&) {
    // encode never refuses text (bad UTF-8 becomes U+FFFD): a throw is a bug.
    __builtin_trap();
  }
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  run_ids(tok, ids, skip);
  if (sel & 0x80) {  // the bytes as raw ids: out-of-range ids must throw, not read
    std::vector<int32_t> raw(text.size() / 4);
    if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
    run_ids(tok, raw, skip);
  }
  return 0;
}
