// Structured outputs end to end on the ring (docs/structured-outputs.md):
// real stage processes (kvasird --stage N) on a 3-stage plan of a tiny
// random model, constrained rows (JSON schemas, a regex, a choice list, an
// EBNF grammar) and unconstrained rows in the same micro-batches, seeded
// sampling. Run twice: on a roomy KV pool without faults, and on a pool so
// small that sequences are preempted and recomputed, with the tail stage
// SIGKILLed mid-run (a restarted tail has no matchers: it rebuilds them
// from the tokens the recompute resends). Every constrained output must be
// valid for its grammar (ended: complete; cut at max_tokens: a valid
// prefix), and the two runs' tokens must be identical (the draw depends on
// seed and position only, the mask on the output so far only).
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <thread>

#include "grammar/grammar.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "ring_fixture.h"
#include "tests/support/tiny_model.h"

namespace kvasir::test {
namespace {

using grammar::GrammarSpec;

struct Req {
  std::vector<int32_t> prompt;
  int max_new = 0;
  std::optional<GrammarSpec> spec;
  uint64_t seed = 0;
};

std::vector<GrammarSpec> specs() {
  return {
      GrammarSpec::json_schema(
          R"({"type":"object","properties":{"id":{"type":"integer","minimum":0,"maximum":99},
              "tag":{"enum":["a","b"]}},"required":["id","tag"]})"),
      GrammarSpec::json_schema(
          R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":3})"),
      GrammarSpec::json_object(),
      GrammarSpec::regex("[a-c]{2,6}-[0-9]{1,3}"),
      GrammarSpec::choice({"yes", "no", "maybe not"}),
      GrammarSpec::ebnf("root ::= \"(\" [0-9]+ (\"+\" [0-9]+)* \")\""),
  };
}

std::vector<Req> requests(int vocab) {
  std::mt19937_64 rng(17);
  std::vector<Req> v;
  const auto sp = specs();
  for (int i = 0; i < 24; ++i) {
    Req r;
    const int len = 3 + int(rng() % 30);
    for (int j = 0; j < len; ++j) r.prompt.push_back(int32_t(rng() % 256));
    r.max_new = 30 + int(rng() % 50);
    if (i % 2 == 0) r.spec = sp[size_t(i / 2) % sp.size()];
    r.seed = rng();
    (void)vocab;
    v.push_back(std::move(r));
  }
  return v;
}

struct Outputs {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<FinishReason> finish;
  std::vector<std::string> errors;
  EngineStats stats;
};

// Waits for the engine to count `faults` losses and serve again.
bool wait_recovered(Bridge& engine, int64_t faults) {
  for (int i = 0; i < 120000; ++i) {
    const EngineStats st = engine.stats();
    if (st.faults >= faults && st.state == EngineState::kOk) return true;
    if (st.state == EngineState::kFailed) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(250));
  }
  return false;
}

Outputs run(const std::string& model, int n_layers, const std::vector<Req>& reqs,
            const std::vector<int32_t>& eos_ids, const std::string& kv_memory, bool kill_tail,
            const std::string& tag) {
  const std::string dir = temp_dir("structured-" + tag);
  // Three micro-batches in flight, written out: three 1-thread stages on
  // fewer cores would default to one, and a tight pool needs several in
  // flight to preempt.
  Config cfg =
      load_config(write_config(dir, model, plan_toml(n_layers, 3, 1, 3, 6, 64), kv_memory));
  ModelConfig mc = check_config(cfg);
  SupervisorOptions opt;
  opt.exe = kvasird_path();
  opt.recovery.watchdog_floor_s = 1;
  Supervisor sup(cfg, mc, opt);
  sup.start();
  BridgeConfig bc = ring_bridge_config(cfg, mc, sup);
  bc.eos_ids = eos_ids;
  Outputs out;
  {
    Bridge engine(sup.segment(), bc, [&] { return sup.health(); });
    Collector col;
    for (size_t i = 0; i < reqs.size(); ++i) {
      GenRequest g;
      g.prompt = reqs[i].prompt;
      g.max_tokens = reqs[i].max_new;
      g.sampling.temperature = 0.9f;
      g.sampling.seed = reqs[i].seed;
      g.sampling.has_seed = 1;
      if (reqs[i].spec)
        g.grammar = std::make_shared<const std::string>(grammar::encode_spec(*reqs[i].spec));
      EXPECT_NE(engine.submit(g, col.sink(int(i))), 0u);
    }
    if (kill_tail) {
      for (int i = 0; i < 60000 && engine.stats().tokens_generated < 300; ++i)
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      EXPECT_EQ(signal_stage(sup.pids()[2], SIGKILL), 0);
      EXPECT_TRUE(wait_recovered(engine, 1)) << engine.stats().failure;
    }
    EXPECT_TRUE(col.wait_all(reqs.size(), 300)) << "requests hang";
    out.stats = engine.stats();
    std::lock_guard lk(col.mu);
    for (size_t i = 0; i < reqs.size(); ++i) {
      out.tokens.push_back(col.tokens[int(i)]);
      out.finish.push_back(col.finish.count(int(i)) ? col.finish[int(i)] : FinishReason::kNone);
      out.errors.push_back(col.errors[int(i)]);
    }
    engine.shutdown();
  }
  sup.stop();
  std::filesystem::remove_all(dir);
  return out;
}

// The output against its grammar: every token accepted in order; ended
// with the stop token exactly when the grammar could end there.
void expect_valid(const GrammarSpec& spec, const std::vector<int32_t>& tokens, FinishReason f,
                  const Tokenizer& tok, const std::shared_ptr<const grammar::Vocabulary>& vocab,
                  size_t i) {
  static grammar::GrammarCompiler compiler;
  std::shared_ptr<const grammar::CompiledGrammar> g;
  ASSERT_TRUE(compiler.compile(spec, vocab, &g).ok());
  grammar::Matcher m(g);
  EXPECT_EQ(m.accept_all(tokens), tokens.size())
      << "request " << i << ": '" << tok.decode(tokens, true) << "'";
  if (f == FinishReason::kStop) {
    EXPECT_TRUE(m.is_terminated()) << "request " << i;
    const std::string text = tok.decode(tokens, true);
    if (spec.kind == grammar::GrammarKind::kJsonSchema ||
        spec.kind == grammar::GrammarKind::kJsonObject) {
      EXPECT_TRUE(nlohmann::json::accept(text)) << text;
    }
    if (spec.kind == grammar::GrammarKind::kRegex) {
      EXPECT_TRUE(std::regex_match(text, std::regex(spec.text))) << text;
    }
    if (spec.kind == grammar::GrammarKind::kChoice) {
      EXPECT_NE(std::find(spec.choices.begin(), spec.choices.end(), text), spec.choices.end());
    }
  } else {
    EXPECT_EQ(f, FinishReason::kLength) << "request " << i;
  }
}

TEST(StructuredRing, ValidThroughPreemptionAndATailRestart) {
  const std::string dir = temp_dir("structured-model");
  const std::string model = dir + "/tiny.gguf";
  TinySpec spec;
  spec.layers = 6;
  spec.hidden = 128;
  spec.ffn = 256;
  write_tiny_gguf(model, spec);
  auto file = ModelFile::open(model);
  auto tok = Tokenizer::from_gguf(*file->gguf());
  auto vocab = grammar::Vocabulary::from_tokenizer(*tok, spec.vocab);
  const std::vector<Req> reqs = requests(spec.vocab);
  // The engine ends a request on every end-of-generation id, as kvasird
  // configures it (daemon/main.cpp): the same ids the grammar's Vocabulary
  // takes as its stop tokens (<|endoftext|> and <|im_end|> here).
  std::vector<int32_t> eos_ids;
  for (int32_t id = 0; id < tok->vocab_size(); ++id)
    if (tok->is_eog(id)) eos_ids.push_back(id);
  EXPECT_EQ(eos_ids, vocab->stop_ids());

  const Outputs roomy = run(model, spec.layers, reqs, eos_ids, "16MiB", false, "roomy");
  // 40 blocks of 16 tokens for 24 requests of up to 7 blocks each.
  const Outputs tight = run(model, spec.layers, reqs, eos_ids, "320KiB", true, "tight");
  EXPECT_GT(tight.stats.preemptions, 0);
  EXPECT_EQ(tight.stats.restarts, 1);
  int constrained_ended = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_TRUE(roomy.finish[i] == FinishReason::kStop || roomy.finish[i] == FinishReason::kLength)
        << roomy.errors[i];
    EXPECT_EQ(tight.tokens[i], roomy.tokens[i]);
    EXPECT_EQ(tight.finish[i], roomy.finish[i]) << tight.errors[i];
    if (!reqs[i].spec) continue;
    expect_valid(*reqs[i].spec, roomy.tokens[i], roomy.finish[i], *tok, vocab, i);
    expect_valid(*reqs[i].spec, tight.tokens[i], tight.finish[i], *tok, vocab, i);
    constrained_ended += roomy.finish[i] == FinishReason::kStop;
  }
  std::printf(
      "structured ring: %zu requests (12 constrained, %d ended by their grammar), "
      "%lld preemptions, %lld requeued, %lld restarts\n",
      reqs.size(), constrained_ended, (long long)tight.stats.preemptions,
      (long long)tight.stats.requeued, (long long)tight.stats.restarts);
  EXPECT_GE(constrained_ended, 6);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvasir::test
