#include "daemon/engine/warmup.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <string>

namespace kvasir {

namespace {

struct Done {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  bool ok = false;
};

// Token ids spread over the vocabulary, a different run for each request.
GenRequest warmup_request(int32_t prompt, int32_t max_tokens, int32_t vocab, uint32_t seed,
                          const std::string& salt) {
  GenRequest r;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  for (int32_t i = 0; i < prompt; ++i) r.prompt.push_back(id(rng));
  r.max_tokens = max_tokens;
  r.ignore_eos = true;  // the decode steps happen whatever is sampled
  r.cache_salt = salt;
  return r;
}

}  // namespace

WarmupResult warm_up(Engine& engine, int32_t vocab, double timeout_s,
                     const std::function<bool()>& stop) {
  WarmupResult res;
  if (vocab <= 0) return res;
  const auto t0 = std::chrono::steady_clock::now();
  // A salt no client can guess: its blocks are never a client's prefix hit.
  const std::string salt = "kvasir-warmup-" + std::to_string(std::random_device{}());
  const struct { int32_t prompt, max_tokens; } shapes[] = {{16, 1}, {64, 4}, {160, 1}};
  uint32_t seed = 1;
  for (const auto& s : shapes) {
    auto done = std::make_shared<Done>();
    const RequestId id = engine.submit(
        warmup_request(s.prompt, s.max_tokens, vocab, seed++, salt), [done](const TokenEvent& ev) {
          if (ev.finish == FinishReason::kNone) return;
          std::lock_guard lk(done->mu);
          done->finished = true;
          done->ok = ev.finish == FinishReason::kStop || ev.finish == FinishReason::kLength;
          done->cv.notify_all();
        });
    std::unique_lock lk(done->mu);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    bool finished = false;
    while (!(finished = done->cv.wait_for(lk, std::chrono::milliseconds(100),
                                          [&] { return done->finished; })) &&
           std::chrono::steady_clock::now() < until && !(stop && stop())) {
    }
    if (!finished) {
      lk.unlock();
      if (id != 0) engine.cancel(id);
      res.failed++;
      break;
    }
    if (!done->ok) {
      res.failed++;
      break;
    }
    res.requests++;
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace kvasir
