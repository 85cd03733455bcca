// The tail's structured outputs (stages/tail_grammar.h): a matcher per
// sequence kept equal to the sequence's output as the batches' rows tell
// it, through decodes, a recompute after preemption, a lost step (rolled
// back), a restarted tail (rebuilt from the resent tokens), and the ways a
// row fails. On a hand-made vocabulary, so every mask is known.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "grammar/grammar.h"
#include "ipc/grammar_table.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "stages/tail_grammar.h"
#include "stages/tail_sampler.h"

namespace kvasir {
namespace {

// 0 "a", 1 "b", 2 "c", 3 "ab", 4 "ba", 5 "x", 6 end of text.
constexpr int32_t kEos = 6;
std::shared_ptr<const grammar::Vocabulary> vocab() {
  static auto v = grammar::Vocabulary::from_tokens({"a", "b", "c", "ab", "ba", "x", ""}, {kEos});
  return v;
}

struct Table {
  Table() : mem(ipc::GrammarTable::bytes_for(4, 1024), 0), view(mem.data(), 4, 1024) {}
  std::vector<char> mem;
  ipc::GrammarTable view;
};

struct RowIn {
  uint64_t seq;
  int32_t pos0;
  std::vector<int32_t> tokens;
  int32_t n_prompt;
  bool sample;
  uint32_t entry = 1;  // 0: unconstrained
  uint64_t id = 1;
};

ipc::Batch batch(const std::vector<RowIn>& rows) {
  ipc::Batch b;
  for (const RowIn& r : rows) {
    ipc::DescRow d;
    d.seq_id = r.seq;
    d.pos0 = r.pos0;
    d.n_tokens = int32_t(r.tokens.size());
    d.n_prompt = r.n_prompt;
    d.sample = r.sample;
    b.rows.push_back(d);
    b.tokens.insert(b.tokens.end(), r.tokens.begin(), r.tokens.end());
    SamplingParams sp;
    sp.grammar_entry = r.entry;
    sp.grammar_id = r.id;
    b.sampling.push_back(sp);
  }
  b.n_tokens = int32_t(b.tokens.size());
  return b;
}

std::vector<int32_t> allowed(const uint32_t* mask) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < 7; ++id)
    if (mask[0] >> id & 1u) ids.push_back(id);
  return ids;
}

using Ids = std::vector<int32_t>;

// One tail over a table holding "(ab)+c" at entry 1 (id 1): its records
// (stages/tail_sequences.h) and its grammar, as TailSampler drives them.
struct Tail {
  explicit Tail(Table& t, const char* regex = "(ab)+c", TailGrammarOptions o = {}) {
    t.view.write(0, 1, grammar::encode_spec(grammar::GrammarSpec::regex(regex)));
    g = TailGrammar::create(vocab(), t.view, o);
  }
  // Prepares one batch and returns the allowed ids of its row r (or the error).
  Ids step(const std::vector<RowIn>& rows, int32_t r, std::string* error = nullptr,
           ErrorCode* code = nullptr) {
    last = batch(rows);
    seqs.feed_batch(last, int32_t(rows.size()), ++batch_id);
    g->prepare(last, int32_t(rows.size()), batch_id, seqs);
    const uint32_t* m = nullptr;
    const Status st = g->mask(r, &m);
    if (error) *error = st.message();
    if (code) *code = st.code();
    if (!st.ok()) {
      EXPECT_EQ(m, nullptr);
    }
    return m ? allowed(m) : Ids{-1};
  }
  // Row r of the last step drew `token`.
  void accept(int32_t r, int32_t token, bool row_ends = true) {
    seqs.append(*seqs.find(last.rows[r].seq_id), token);
    g->accept(r, row_ends);
  }
  std::unique_ptr<TailGrammar> g;
  TailSequences seqs;  // after g: its records (and their jobs) go first
  ipc::Batch last;
  uint64_t batch_id = 0;
};

TEST(TailGrammar, DecodeFollowsTheGrammar) {
  Table t;
  Tail tail(t);
  // Prompt of 3 tokens (7, 8, 9 are the prompt's: never read), sampled.
  EXPECT_EQ(tail.step({{1, 0, {5, 5, 5}, 3, true}}, 0), (Ids{0, 3}));
  tail.accept(0, 3);  // "ab"
  EXPECT_EQ(tail.step({{1, 3, {3}, 3, true}}, 0), (Ids{0, 2, 3}));
  tail.accept(0, 0);  // "a"
  EXPECT_EQ(tail.step({{1, 4, {0}, 3, true}}, 0), (Ids{1, 4}));
  tail.accept(0, 1);  // "b"
  EXPECT_EQ(tail.step({{1, 5, {1}, 3, true}}, 0), (Ids{0, 2, 3}));
  tail.accept(0, 2);  // "c": complete
  EXPECT_EQ(tail.step({{1, 6, {2}, 3, true}}, 0), (Ids{kEos}));
  tail.accept(0, kEos);
  // Past the end (a request that ignores EOS): only the stop token.
  EXPECT_EQ(tail.step({{1, 7, {kEos}, 3, true}}, 0), (Ids{kEos}));
  const TailGrammarStats s = tail.g->stats();
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.rollbacks, 0u);
  EXPECT_EQ(s.fast_forwards, 0u);
  EXPECT_EQ(s.sequences, 1u);
}

// A request that goes on past its stop token (ignore_eos, or a stop id the
// scheduler does not end on): the mask allows only stop tokens, and each
// one drawn joins the output without failing the sequence, through a
// recompute and a lost step too.
TEST(TailGrammar, StopTokensPastTheEndKeepTheSequence) {
  Table t;
  Tail tail(t);
  tail.step({{1, 0, {5}, 1, true}}, 0);
  tail.accept(0, 3);  // "ab"
  tail.step({{1, 1, {3}, 1, true}}, 0);
  tail.accept(0, 2);  // "c": complete
  EXPECT_EQ(tail.step({{1, 2, {2}, 1, true}}, 0), (Ids{kEos}));
  tail.accept(0, kEos);  // the end
  EXPECT_EQ(tail.step({{1, 3, {kEos}, 1, true}}, 0), (Ids{kEos}));
  tail.accept(0, kEos);  // past the end
  std::string e;
  EXPECT_EQ(tail.step({{1, 4, {kEos}, 1, true}}, 0, &e), (Ids{kEos})) << e;
  tail.accept(0, kEos);
  EXPECT_EQ(tail.step({{1, 5, {kEos}, 1, true}}, 0, &e), (Ids{kEos})) << e;
  // A recompute resends all of it: the matcher stands there already.
  EXPECT_EQ(tail.step({{1, 0, {5, 3, 2, kEos, kEos, kEos}, 1, true}}, 0, &e), (Ids{kEos})) << e;
  EXPECT_EQ(tail.g->stats().rollbacks, 0u);
  // Lost steps back to before the end: the stop tokens past it roll back
  // first, then the end itself.
  EXPECT_EQ(tail.step({{1, 0, {5, 3}, 1, true}}, 0, &e), (Ids{0, 2, 3})) << e;
  EXPECT_EQ(tail.g->stats().rollbacks, 4u);
  tail.accept(0, 3);  // "ab" this time
  EXPECT_EQ(tail.step({{1, 2, {3}, 1, true}}, 0, &e), (Ids{0, 2, 3})) << e;
  EXPECT_EQ(tail.g->stats().failures, 0u);
}

// A request that ignores EOS goes on drawing the stop token after its
// output ended: each one is kept, not given to the (terminated) matcher,
// and a step lost past the end rolls back without touching it.
TEST(TailGrammar, StopTokensPastTheEnd) {
  Table t;
  Tail tail(t);
  tail.step({{1, 0, {5}, 1, true}}, 0);
  tail.accept(0, 3);  // "ab"
  tail.step({{1, 1, {3}, 1, true}}, 0);
  tail.accept(0, 2);  // "c": complete
  tail.step({{1, 2, {2}, 1, true}}, 0);
  tail.accept(0, kEos);
  for (int32_t pos = 3; pos < 6; ++pos) {
    std::string e;
    EXPECT_EQ(tail.step({{1, pos, {kEos}, 1, true}}, 0, &e), (Ids{kEos})) << pos << ": " << e;
    tail.accept(0, kEos);
  }
  // Recompute from position 0 sampling position 4 again: two stop tokens
  // dropped, the matcher still past the end.
  EXPECT_EQ(tail.step({{1, 0, {5, 3, 2, kEos, kEos}, 1, true}}, 0), (Ids{kEos}));
  EXPECT_EQ(tail.g->stats().rollbacks, 2u);
  // Recompute sampling position 3 (the first stop token) again: the
  // matcher rolls back over the stop token it accepted, the output is
  // complete again, not ended.
  EXPECT_EQ(tail.step({{1, 0, {5, 3, 2}, 1, true}}, 0), (Ids{kEos}));
  tail.accept(0, kEos);
  EXPECT_EQ(tail.step({{1, 3, {kEos}, 1, true}}, 0), (Ids{kEos}));
  EXPECT_EQ(tail.g->stats().failures, 0u);
  // Anything else past the end breaks the grammar.
  tail.accept(0, 0);
  std::string e;
  EXPECT_EQ(tail.step({{1, 4, {0}, 1, true}}, 0, &e), (Ids{-1}));
  EXPECT_NE(e.find("breaks the grammar"), std::string::npos) << e;
}

TEST(TailGrammar, UnconstrainedAndNonSampledRowsHaveNoMask) {
  Table t;
  Tail tail(t);
  const ipc::Batch b =
      batch({{1, 0, {5, 5}, 2, false}, {2, 0, {5}, 1, true, 0, 0}, {3, 0, {5}, 1, true}});
  tail.seqs.feed_batch(b, 3, 1);
  tail.g->prepare(b, 3, 1, tail.seqs);
  const uint32_t* m = nullptr;
  EXPECT_TRUE(tail.g->mask(0, &m).ok());
  EXPECT_EQ(m, nullptr);  // a prefill chunk: samples nothing
  EXPECT_TRUE(tail.g->mask(1, &m).ok());
  EXPECT_EQ(m, nullptr);  // unconstrained
  EXPECT_TRUE(tail.g->mask(2, &m).ok());
  EXPECT_NE(m, nullptr);
  EXPECT_TRUE(tail.g->mask(7, &m).ok());
  EXPECT_EQ(m, nullptr);  // no such row
}

// Preemption: the sequence's KV is dropped and it is recomputed from
// position 0, its generated tokens resent as part of the prefill (in
// chunks). The matcher already stands there: no rollback, no fast-forward.
TEST(TailGrammar, RecomputeFindsTheMatcherWhereItWas) {
  Table t;
  Tail tail(t);
  tail.step({{1, 0, {5, 5}, 2, true}}, 0);
  tail.accept(0, 3);  // "ab"
  tail.step({{1, 2, {3}, 2, true}}, 0);
  tail.accept(0, 0);  // "a"
  // Recompute: [5 5 ab] then [a] sampled; an unconstrained row beside it.
  EXPECT_EQ(tail.step({{1, 0, {5, 5, 3}, 2, false}, {9, 0, {5}, 1, true, 0, 0}}, 0), (Ids{-1}));
  EXPECT_EQ(tail.step({{1, 3, {0}, 2, true}}, 0), (Ids{1, 4}));
  const TailGrammarStats s = tail.g->stats();
  EXPECT_EQ(s.rollbacks, 0u);
  EXPECT_EQ(s.fast_forwards, 0u);
}

// A step lost with a stage: its token was accepted at the tail but never
// reached the scheduler, so the recompute samples that position again: the
// matcher rolls the token back.
TEST(TailGrammar, LostStepRollsBack) {
  Table t;
  Tail tail(t);
  tail.step({{1, 0, {5}, 1, true}}, 0);
  tail.accept(0, 3);  // "ab"
  tail.step({{1, 1, {3}, 1, true}}, 0);
  tail.accept(0, 2);  // "c": the step that will be lost
  // Recompute of [5 ab], sampling position 2 again.
  EXPECT_EQ(tail.step({{1, 0, {5, 3}, 1, true}}, 0), (Ids{0, 2, 3}));
  EXPECT_EQ(tail.g->stats().rollbacks, 1u);
  tail.accept(0, 0);  // a different draw this time: "a"
  EXPECT_EQ(tail.step({{1, 2, {0}, 1, true}}, 0), (Ids{1, 4}));
}

// A row that rewrites a position with another token: what follows it is
// not the output any more.
TEST(TailGrammar, RewrittenPositionDropsWhatFollows) {
  Table t;
  Tail tail(t);
  tail.step({{1, 0, {5}, 1, true}}, 0);
  tail.accept(0, 3);  // ab
  tail.step({{1, 1, {3}, 1, true}}, 0);
  tail.accept(0, 3);  // ab ab
  tail.step({{1, 2, {3}, 1, true}}, 0);
  tail.accept(0, 0);  // ab ab a
  // Resent with position 1 changed to "a", not sampling: then sampled.
  tail.step({{1, 0, {5, 0}, 1, false}}, 0);
  EXPECT_EQ(tail.step({{1, 2, {1}, 1, true}}, 0), (Ids{0, 2, 3}));  // "ab" again
}

// A restarted tail has no matchers: the recompute resends every position
// from 0 and the matcher is rebuilt by a fast-forward.
TEST(TailGrammar, RestartedTailRebuildsFromTheResentTokens) {
  Table t;
  Ids before;
  {
    Tail tail(t);
    tail.step({{1, 0, {5}, 1, true}}, 0);
    tail.accept(0, 3);
    tail.step({{1, 1, {3}, 1, true}}, 0);
    tail.accept(0, 3);
    before = tail.step({{1, 2, {3}, 1, true}}, 0);
  }
  Tail restarted(t);
  EXPECT_EQ(restarted.step({{1, 0, {5, 3, 3}, 1, true}}, 0), before);
  EXPECT_EQ(restarted.g->stats().fast_forwards, 1u);  // 2 tokens: 1 beyond a normal step
}

TEST(TailGrammar, RowsThatFail) {
  Table t;
  Tail tail(t);
  std::string e;
  ErrorCode code = ErrorCode::kOk;
  // A restarted (or evicting) tail met mid-sequence, nothing resent: lost.
  EXPECT_EQ(tail.step({{1, 5, {3}, 2, true}}, 0, &e, &code), (Ids{-1}));
  EXPECT_NE(e.find("no record of positions 0..4"), std::string::npos) << e;
  EXPECT_EQ(code, ErrorCode::kNotFound);
  // An entry id the table does not hold.
  EXPECT_EQ(tail.step({{2, 0, {5}, 1, true, 1, 99}}, 0, &e), (Ids{-1}));
  EXPECT_NE(e.find("holds id 1"), std::string::npos) << e;
  // A spec that does not decode, and one that does not compile.
  t.view.write(1, 2, "garbage");
  EXPECT_EQ(tail.step({{3, 0, {5}, 1, true, 2, 2}}, 0, &e), (Ids{-1}));
  EXPECT_NE(e.find("grammar spec on the wire"), std::string::npos) << e;
  t.view.write(2, 3, grammar::encode_spec(grammar::GrammarSpec::regex("(")));
  EXPECT_EQ(tail.step({{4, 0, {5}, 1, true, 3, 3}}, 0, &e, &code), (Ids{-1}));
  EXPECT_NE(e.find("did not compile"), std::string::npos) << e;
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  // A token the grammar refuses (a device that ignored the mask): the next
  // step of that sequence fails.
  tail.step({{5, 0, {5}, 1, true}}, 0);
  tail.accept(0, 5);  // "x"
  EXPECT_EQ(tail.step({{5, 1, {5}, 1, true}}, 0, &e), (Ids{-1}));
  EXPECT_NE(e.find("breaks the grammar"), std::string::npos) << e;
  EXPECT_GE(tail.g->stats().failures, 3u);
}

// The bridge may move a spec to another entry (under a new id) between two
// batches of one request: the sequence keeps its matcher.
TEST(TailGrammar, SameSpecUnderANewIdKeepsTheRecord) {
  Table t;
  Tail tail(t);
  tail.step({{1, 0, {5}, 1, true}}, 0);
  tail.accept(0, 3);
  t.view.write(3, 77, grammar::encode_spec(grammar::GrammarSpec::regex("(ab)+c")));
  EXPECT_EQ(tail.step({{1, 1, {3}, 1, true, 4, 77}}, 0), (Ids{0, 2, 3}));
  EXPECT_EQ(tail.g->stats().fast_forwards, 0u);
}

// The compilation starts when the spec arrives and runs beside the forward
// pass: prepare() does not wait for it; mask() of the sequence's first
// sampled row does, for what is left of it. On the default model's
// vocabulary, where this regex takes about a second to compile.
TEST(TailGrammar, CompilationStartsWhenTheSpecArrives) {
  const std::string path =
      std::string(KVASIR_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no default model at " << path;
  const auto tok = Tokenizer::from_gguf(*GgufFile::open(path));
  Table t;
  t.view.write(0, 1, grammar::encode_spec(grammar::GrammarSpec::regex("[a-z]{1,2000}")));
  auto g = TailGrammar::create(grammar::Vocabulary::from_tokenizer(*tok), t.view);
  TailSequences seqs;
  const ipc::Batch b = batch({{1, 0, {5, 5}, 2, true}});
  seqs.feed_batch(b, 1, 1);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  g->prepare(b, 1, 1, seqs);
  const auto prepare_ns = std::chrono::nanoseconds(Clock::now() - t0).count();
  EXPECT_LT(prepare_ns, 200'000'000);  // no compilation in it
  EXPECT_EQ(g->stats().masks, 0u);     // no mask job either: its grammar is not compiled yet
  const uint32_t* m = nullptr;
  ASSERT_TRUE(g->mask(0, &m).ok());
  ASSERT_NE(m, nullptr);
  const TailGrammarStats s = g->stats();
  EXPECT_EQ(s.masks, 1u);
  EXPECT_EQ(s.waits, 1u);
  EXPECT_GT(s.wait_ns, uint64_t(prepare_ns));  // the compilation was waited for here
  g.reset();
}

// The tail's sampler: a constrained row samples under its mask (greedy
// takes the best allowed token, not the best), an unconstrained row beside
// it is untouched, and the drawn token moves the grammar on.
TEST(TailGrammar, SamplerAppliesTheMask) {
  Table t;
  t.view.write(0, 1, grammar::encode_spec(grammar::GrammarSpec::regex("(ab)+c")));
  TailSampler sampler;
  sampler.set_grammar(TailGrammar::create(vocab(), t.view));
  SamplingParams greedy;
  greedy.temperature = 0;
  ipc::Batch b = batch({{1, 0, {5}, 1, true}, {2, 0, {5}, 1, true, 0, 0}});
  b.sampling[0].temperature = b.sampling[1].temperature = 0;
  // Both rows' logits prefer "x" (5), then "ab" (3).
  std::vector<float> logits = {0, 0, 0, 2, 0, 9, 1, 0, 0, 0, 2, 0, 9, 1};
  std::vector<int32_t> dev_token = {-1, -1}, token(2), n_top(2);
  std::vector<float> dev_lp(2), lp(2);
  std::vector<ipc::TopLogprob> top(2 * kMaxLogprobs);
  ipc::ResultView out;
  out.token = token.data();
  out.logprob = lp.data();
  out.n_top = n_top.data();
  out.top = top.data();
  sampler.prepare(b, 1, 2);
  sampler.sample(b, 1, 2, {logits.data(), 7, dev_token.data(), dev_lp.data()}, out);
  EXPECT_EQ(token[0], 3);  // "ab": the best the grammar allows
  EXPECT_EQ(token[1], 5);  // unconstrained: "x"
  // The logprob is that of the masked distribution ("a" or "ab" allowed).
  EXPECT_NEAR(lp[0], 2.0 - std::log(std::exp(0.0) + std::exp(2.0)), 1e-5);
  // Next step: "ab" was accepted.
  b = batch({{1, 1, {3}, 1, true}});
  b.sampling[0].temperature = 0;
  sampler.prepare(b, 2, 1);
  const uint32_t* const* m = sampler.masks(1);
  ASSERT_NE(m[0], nullptr);
  EXPECT_EQ(allowed(m[0]), (Ids{0, 2, 3}));
}

// The forced tokens are found only for a row's last token of the batch
// (a verifying row's earlier positions do not ask for them), and once
// found they need not wait for the next mask.
TEST(TailGrammar, ForcedTokensOnlyWhereTheRowEnds) {
  Table t;
  TailGrammarOptions o;
  o.forced_drafts = 4;
  Tail tail(t, "ab(ab)*cab", o);
  EXPECT_EQ(tail.step({{1, 0, {5}, 1, true}}, 0), (Ids{0, 3}));
  tail.accept(0, 3);  // "ab"
  // A verifying row [ab, d1 = ab]: "ab" then "c" drawn in one batch; only
  // the last position asks, and after "ababc" the grammar forces "ab".
  EXPECT_EQ(tail.step({{1, 1, {3, 3}, 1, true}}, 0), (Ids{0, 2, 3}));
  tail.accept(0, 3, /*row_ends=*/false);
  EXPECT_TRUE(tail.g->forced(0).empty());
  const uint32_t* m = nullptr;
  ASSERT_TRUE(tail.g->mask(0, &m).ok());
  EXPECT_EQ(allowed(m), (Ids{0, 2, 3}));
  tail.accept(0, 2, /*row_ends=*/true);
  const std::span<const int32_t> f = tail.g->forced(0);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0], 3);
  ASSERT_TRUE(tail.g->mask(0, &m).ok());  // the next mask still comes ("a" + "b" spell it too)
  EXPECT_EQ(allowed(m), (Ids{0, 3}));
  // The same output reached by one plain row per token forces the same.
  Table t2;
  Tail plain(t2, "ab(ab)*cab", o);
  const int32_t in[] = {5, 3, 3}, drawn[] = {3, 3, 2};  // the prompt "x", then each draw
  for (int32_t pos = 0; pos < 3; ++pos) {
    EXPECT_TRUE(pos == 0 || plain.g->forced(0).empty()) << pos;  // "ab" or "c" may follow
    plain.step({{1, pos, {in[pos]}, 1, true}}, 0);
    plain.accept(0, drawn[pos]);
  }
  ASSERT_EQ(plain.g->forced(0).size(), 1u);
  EXPECT_EQ(plain.g->forced(0)[0], 3);
  EXPECT_EQ(tail.g->stats().failures, 0u);
}

// Speculative decoding under a grammar: a drafting row's t_i is sampled
// under the mask for the output holding t_0..t_{i-1} (here the best logit
// is always "x", which the grammar never allows: unmasked, no draft would
// match), and the tokens the grammar forces after what the row emitted
// come back in its ForcedRecord (the scheduler's next drafts).
TEST(TailGrammar, SamplerVerifiesDraftsUnderTheMaskAndForcesTheRest) {
  Table t;
  t.view.write(0, 1, grammar::encode_spec(grammar::GrammarSpec::regex("ab(ab)*cab")));
  TailGrammarOptions o;
  o.forced_drafts = 4;
  TailSampler sampler;
  sampler.set_grammar(TailGrammar::create(vocab(), t.view, o));
  std::vector<int32_t> dev_token(4, -1), token(4), n_top(4);
  std::vector<float> dev_lp(4), lp(4);
  std::vector<ipc::TopLogprob> top(4 * kMaxLogprobs);
  std::vector<ipc::DraftRecord> drafts(8);
  std::vector<ipc::ForcedRecord> forced(4);
  ipc::ResultView out{nullptr,    token.data(), lp.data(),     n_top.data(),
                      top.data(), nullptr,      drafts.data(), forced.data()};
  // Prefers "x" (5), then the given id, then "a" (0).
  auto prefer = [](int32_t id) {
    std::vector<float> l = {1, 0, 0, 0, 0, 9, 0};
    l[size_t(id)] = 5;
    return l;
  };
  // Step 1: the first token, "ab" (the only way to start); nothing forced
  // after it ("ab" or "c" may follow).
  ipc::Batch b = batch({{1, 0, {5}, 1, true}});
  b.sampling[0].temperature = 0;
  std::vector<float> logits = prefer(3);
  sampler.prepare(b, 1, 1);
  sampler.sample(b, 1, 1, {logits.data(), 7, dev_token.data(), dev_lp.data()}, out);
  EXPECT_EQ(token[0], 3);
  EXPECT_EQ(forced[0].n, 0);
  // Step 2: "ab" then drafts "ab", "x": t_0 = "ab" (the draft), t_1 = "c"
  // (the draft "x" rejected: the mask never allows it). After "ababc" the
  // grammar forces "ab".
  auto run = [&](const std::vector<int32_t>& tokens, int32_t pos0, std::vector<int32_t> prefs) {
    b = batch({{1, pos0, tokens, 1, true}});
    b.rows[0].n_draft = int32_t(tokens.size()) - 1;
    b.sampling[0].temperature = 0;
    logits.clear();
    for (int32_t p : prefs)
      for (float v : prefer(p)) logits.push_back(v);
    drafts.assign(8, ipc::DraftRecord{});
    sampler.prepare(b, uint64_t(pos0) + 1, 1);
    sampler.sample(b, uint64_t(pos0) + 1, 1, {logits.data(), 7, dev_token.data(), dev_lp.data()},
                   out);
  };
  run({3, 3, 5}, 1, {3, 2, 0});
  EXPECT_EQ(token[0], 3);
  EXPECT_EQ(drafts[1].token, 2);   // t_1, at the index of draft d_1
  EXPECT_EQ(drafts[2].token, -1);  // d_2 rejected: nothing after it
  ASSERT_EQ(forced[0].n, 1);
  EXPECT_EQ(forced[0].token[0], 3);
  // Step 3: the forced "ab" as the draft: accepted, then the end (the
  // only token the complete output allows, whatever the logits say).
  run({2, 3}, 3, {3, 0});
  EXPECT_EQ(token[0], 3);
  EXPECT_EQ(drafts[1].token, kEos);
  EXPECT_EQ(forced[0].n, 0);
}

}  // namespace
}  // namespace kvasir
