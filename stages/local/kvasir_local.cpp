// kvasir-local — the whole model in one process, for tests and debugging.
//
// Not a serving path: it exists to check the ring against. It loads the
// model, runs one sequence greedily (prefill in chunks, then one token at a
// time) and prints the continuation; optionally it dumps logits.
//
//   kvasir-local --model models/SmolLM2-135M-Instruct.Q4_1.gguf --prompt "The capital of France is"
//   kvasir-local --model M --ids 504,3458,282 --max-tokens 8 --print-ids
//   kvasir-local --simd-info [--model M ...]   the CPU, its SIMD levels and the
//                level each matmul kernel runs at (after the run with a model;
//                alone: every quantised kernel measured at 576 / 768 columns)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/check.h"
#include "kernels/cpu/simd.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/hf_folder.h"
#include "model/tokenizer.h"
#include "stages/forward.h"

using namespace kvasir;

namespace {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    long v = std::stol(item, &used);
    KV_CHECK(used == item.size() && v >= INT32_MIN && v <= INT32_MAX,
             "--ids: '{}' is not a token id", item);
    ids.push_back(int32_t(v));
  }
  return ids;
}

int32_t argmax(const float* v, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

struct Options {
  std::string model, prompt, ids, logits_path;
  int threads = 1, max_tokens = 32, chunk = 256;
  bool chat = false, print_ids = false, ignore_eos = false, quiet = false, simd_info = false;
};

// Without a model: every quantised kernel chosen at SmolLM2-135M's width.
void print_simd_info(bool measure) {
  if (measure)
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q4_K, DType::Q5_K,
                    DType::Q6_K})
      for (auto rc : {cpu::RowsClass::kDecode, cpu::RowsClass::kBatch})
        cpu::simd_kernel_choice(t, rc, dtype_info(t).block == 256 ? 768 : 576);
  fmt::print(stderr, "{}", cpu::simd_report());
}

// The prompt's token ids: --ids as given, or --prompt encoded (in the chat
// template with --chat).
std::vector<int32_t> prompt_ids(const Options& o, const ModelFile& model, const Tokenizer* tok) {
  std::vector<int32_t> prompt;
  if (!o.ids.empty()) {
    prompt = parse_ids(o.ids);
  } else {
    KV_CHECK(tok != nullptr, "this model has no tokenizer in its file: pass --ids");
    std::string text = o.prompt;
    if (o.chat) {
      ChatTemplate tpl = model.gguf() ? ChatTemplate::from_gguf(*model.gguf())
                                      : ChatTemplate::from_hf_dir(model.path());
      text = tpl.render({{"user", o.prompt}}, true);
    }
    prompt = tok->encode(text, true, o.chat);
  }
  KV_CHECK(!prompt.empty(), "empty prompt");
  return prompt;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += fmt::format("{}{}", s.empty() ? "" : ",", id);
  return s;
}

// One sequence through one executor, its blocks 0..n_blocks-1 in order.
struct Session {
  SliceExecutor& exec;
  std::vector<int32_t> table;
  std::vector<float> logits;  // [vocab]: the last forward's
  int32_t pos = 0;

  void forward(const int32_t* ids, int32_t n, bool want_logits) {
    ForwardRow row{pos, n, table.data(), int32_t(table.size()), want_logits};
    ForwardBatch b{&row, 1, ids, n};
    exec.forward(b, nullptr, nullptr, logits.data());
    pos += n;
  }
};

// Greedy decoding from the prefill's logits: up to max_tokens ids, printed
// as they come (unless quiet), each step's logits dumped when asked.
std::vector<int32_t> decode(const Options& o, Session& s, const Tokenizer* tok,
                            std::ofstream& dump) {
  const int32_t vocab = int32_t(s.logits.size());
  std::unique_ptr<StreamDecoder> dec;
  if (tok && !o.quiet) dec = std::make_unique<StreamDecoder>(*tok);
  std::vector<int32_t> out;
  for (int i = 0; i < o.max_tokens; ++i) {
    if (dump) dump.write(reinterpret_cast<const char*>(s.logits.data()), s.logits.size() * 4);
    const int32_t next = argmax(s.logits.data(), vocab);
    out.push_back(next);
    if (dec) {
      fmt::print("{}", dec->push(next));
      std::fflush(stdout);
    }
    if (!o.ignore_eos && tok && tok->is_eog(next)) break;
    if (i + 1 == o.max_tokens) break;
    s.forward(&next, 1, true);
  }
  if (dec) fmt::print("{}\n", dec->flush());
  return out;
}

int run(const Options& o) {
  auto model = ModelFile::open(o.model);
  const ModelConfig& cfg = model->config();
  // A GGUF file's tokenizer, or a folder's tokenizer.json (as kvasird
  // loads them).
  std::unique_ptr<Tokenizer> tok =
      model->gguf() ? Tokenizer::from_gguf(*model->gguf()) : hf_folder_tokenizer(model->path());
  const std::vector<int32_t> prompt = prompt_ids(o, *model, tok.get());
  if (o.print_ids) fmt::print(stderr, "prompt ids: {}\n", join_ids(prompt));

  const int64_t total = int64_t(prompt.size()) + o.max_tokens;
  KvSpec kv;
  kv.block_size = 16;
  kv.n_blocks = int32_t((total + kv.block_size - 1) / kv.block_size);
  SliceExecutor exec(*model, SliceSpec{0, cfg.n_layers - 1, true, true}, kv, o.threads, o.chunk);
  Session s{exec, std::vector<int32_t>(size_t(kv.n_blocks)), std::vector<float>(size_t(cfg.vocab))};
  for (int32_t i = 0; i < kv.n_blocks; ++i) s.table[size_t(i)] = i;
  std::ofstream dump;
  if (!o.logits_path.empty()) dump.open(o.logits_path, std::ios::binary);

  auto t0 = std::chrono::steady_clock::now();
  // Prefill in chunks of at most o.chunk tokens; the last chunk samples.
  while (s.pos < int32_t(prompt.size())) {
    const int32_t n = std::min<int32_t>(o.chunk, int32_t(prompt.size()) - s.pos);
    s.forward(prompt.data() + s.pos, n, s.pos + n == int32_t(prompt.size()));
  }
  auto t1 = std::chrono::steady_clock::now();
  const std::vector<int32_t> out = decode(o, s, tok.get(), dump);
  auto t2 = std::chrono::steady_clock::now();
  if (o.print_ids) fmt::print("{}\n", join_ids(out));
  const double pre = std::chrono::duration<double>(t1 - t0).count();
  const double gen = std::chrono::duration<double>(t2 - t1).count();
  fmt::print(stderr,
             "prefill {} tokens in {:.3f} s ({:.1f} tok/s); decode {} tokens in {:.3f} s ({:.1f} "
             "tok/s)\n",
             prompt.size(), pre, double(prompt.size()) / pre, out.size() > 0 ? out.size() - 1 : 0,
             gen, out.size() > 1 ? double(out.size() - 1) / gen : 0.0);
  if (o.simd_info) print_simd_info(false);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvasir-local: the whole model in one process (tests and debugging, not serving)"};
  Options o;
  app.add_option("-m,--model", o.model, "GGUF file or safetensors folder");
  app.add_option("-p,--prompt", o.prompt, "prompt text");
  app.add_option("--ids", o.ids, "prompt token ids, comma-separated (instead of --prompt)");
  app.add_option("-n,--max-tokens", o.max_tokens, "tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-t,--threads", o.threads, "threads")->check(CLI::Range(1, 1024));
  app.add_option("--chunk", o.chunk, "prefill chunk size")->check(CLI::Range(1, 1 << 16));
  app.add_option("--logits", o.logits_path, "write each step's logits (f32 [steps, vocab]) here");
  app.add_flag("--chat", o.chat, "wrap the prompt in the model's chat template");
  app.add_flag("--print-ids", o.print_ids, "print prompt and generated token ids");
  app.add_flag("--ignore-eos", o.ignore_eos, "do not stop at end-of-generation tokens");
  app.add_flag("-q,--quiet", o.quiet, "do not print text");
  app.add_flag("--simd-info", o.simd_info,
               "print the CPU, its SIMD levels and each matmul kernel's level (stderr)");
  CLI11_PARSE(app, argc, argv);
  if (o.model.empty()) {
    if (o.simd_info) {
      print_simd_info(true);
      return 0;
    }
    fmt::print(stderr, "kvasir-local: --model is required\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const Error& e) {
    fmt::print(stderr, "kvasir-local: {}\n", e.message());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvasir-local: {}\n", e.what());
    return 1;
  }
}
