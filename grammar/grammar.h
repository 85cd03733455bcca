// grammar/grammar.h — the grammar engine for structured outputs: what a
// request may ask the model's output to match, compiled against the model's
// vocabulary, and a per-request matcher that says which tokens may come next.
//
//   auto vocab = grammar::Vocabulary::from_tokenizer(tokenizer);       // once per model
//   grammar::GrammarCompiler compiler;                                 // once per process
//   grammar::PendingGrammar p =                   // returns at once; compiles on a worker
//       compiler.compile_async(grammar::GrammarSpec::json_schema(schema), vocab);
//   ...                                           // other work meanwhile
//   std::shared_ptr<const grammar::CompiledGrammar> g;
//   Status st = p.wait(&g);                       // at most compile_timeout after asking
//   if (!st.ok()) return st;                      // kInvalidArgument: the request is wrong
//   grammar::Matcher m(g);                        // one per request (sequence)
//   std::vector<uint32_t> mask(m.mask_words());
//   while (!m.is_terminated()) {
//     m.fill_next_token_bitmask(mask);            // bit id%32 of word id/32: id may come next
//     int32_t id = sample(logits, mask);          // masked-out logits set to -inf
//     m.accept(id);
//   }
//
// Built on XGrammar's C++ core (docs/structured-outputs.md: why, how it is
// fetched and built, the limits, the cache, the wiring). No XGrammar type
// appears here: this header is the module's face.
//
// Thread safety: Vocabulary and CompiledGrammar are immutable and shared
// freely between threads; GrammarCompiler is thread-safe; a Matcher belongs
// to one request and is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvasir {

class Tokenizer;

namespace grammar {

// What the output must match. The names are the OpenAI/vLLM API's.
enum class GrammarKind : uint8_t {
  kJsonObject,  // response_format {"type":"json_object"}: any JSON object
  kJsonSchema,  // response_format {"type":"json_schema"}, and tool-call arguments
  kRegex,       // a regular expression the whole output matches
  kChoice,      // exactly one of a list of strings
  kEbnf,        // a grammar in XGrammar's EBNF (GBNF-like), start rule "root"
  // XGrammar's structural tag (a JSON document: text, tags and JSON schemas
  // in sequence, alternatives and repetitions): tool calls in a model
  // family's own syntax around each function's parameter schema.
  kStructuralTag,
};

// "json_object", "json_schema", "regex", "choice", "ebnf", "structural_tag".
const char* kind_name(GrammarKind kind);

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonObject;
  // json_schema: the schema (JSON text, an object); regex: the pattern;
  // ebnf: the grammar; structural_tag: the tag (JSON text, an object).
  // Unused for json_object and choice.
  std::string text;
  // choice: the strings, at least one; the output is exactly one of them.
  std::vector<std::string> choices;
  // json_schema: true (the default, as vLLM does) allows no property or array
  // item the schema does not name, as if every object said
  // "additionalProperties": false; false follows the schema's own defaults.
  bool strict = true;

  static GrammarSpec json_object();
  static GrammarSpec json_schema(std::string schema, bool strict = true);
  static GrammarSpec regex(std::string pattern);
  static GrammarSpec choice(std::vector<std::string> choices);
  static GrammarSpec ebnf(std::string grammar);
  static GrammarSpec structural_tag(std::string tag);

  bool operator==(const GrammarSpec&) const = default;
};

// The wire form of a spec, how it travels from the daemon to the tail stage
// (the segment's grammar table, ipc/grammar_table.h): a format version, the
// kind, strict, the text and the choices, each length-prefixed. decode_spec
// trusts nothing: a wrong version, kind or flag, a length past the end, or
// bytes left over is kInvalidArgument naming what is wrong, and *out is
// untouched.
std::string encode_spec(const GrammarSpec& spec);
Status decode_spec(std::string_view bytes, GrammarSpec* out);

// Bounds on what a request may ask for, checked before compiling (all but
// the last two) so that a huge or deep spec costs its caller nothing.
struct GrammarLimits {
  // Schema, regex or grammar text in bytes; for choice, all choices together.
  size_t max_text_bytes = 64 * 1024;
  // json_schema and structural_tag: nesting of the document (each object or
  // array is one level); regex and ebnf: nesting of ( ) groups.
  int max_nesting_depth = 64;
  // json_schema and structural_tag: "properties" entries, summed over the
  // whole document.
  size_t max_properties = 1024;
  // json_schema: "enum" values summed over the schema; choice: the choices.
  size_t max_enum_values = 1024;
  // The grammar XGrammar derives from the spec, printed as EBNF, in bytes:
  // bounds the automaton the compiler preprocesses against the vocabulary.
  size_t max_grammar_bytes = 1024 * 1024;
  // How long a compilation may take, queued and running, counted from when
  // it was asked (compile_async, compile).
  std::chrono::milliseconds compile_timeout{10000};
};

// Checks `spec` against `limits` without compiling: the text sizes, a schema
// that is valid JSON and an object, its nesting, property and enum counts, a
// choice list that is not empty, the group nesting of a regex or grammar.
// Returns ok or kInvalidArgument with a message that names the kind and what
// is wrong ("json_schema: nesting depth 80 exceeds the limit of 64").
// Whether a regex or grammar compiles is known only by compiling it.
Status check_spec(const GrammarSpec& spec, const GrammarLimits& limits);

// The model's vocabulary as the grammar engine sees it: each token id's byte
// string (what the detokenizer emits for it), which ids end generation, and
// the width of the logits row. Immutable.
class Vocabulary {
 public:
  // From a Kvasir tokenizer: each id's bytes are Tokenizer::piece(id), which
  // decodes the GPT-2 byte alphabet (byte-level BPE), U+2581 as a space and
  // <0xNN> byte-fallback tokens (SentencePiece). Control and unknown tokens
  // (Tokenizer::is_special) can never be produced by a grammar; the ids that
  // end generation (Tokenizer::is_eog) are the stop tokens, allowed exactly
  // when the output is complete. `size` is the logits row width (>= the
  // tokenizer's vocab_size; ids above it are padding, never allowed); 0 means
  // the tokenizer's vocab_size. Throws kvasir::Error on a size below it.
  static std::shared_ptr<const Vocabulary> from_tokenizer(const Tokenizer& tokenizer,
                                                          int32_t size = 0);
  // From explicit byte strings: "" marks a token no grammar may produce;
  // `stop_ids` end generation. Throws kvasir::Error on a stop id out of range
  // or a size below tokens.size().
  static std::shared_ptr<const Vocabulary> from_tokens(std::vector<std::string> tokens,
                                                       std::vector<int32_t> stop_ids,
                                                       int32_t size = 0);
  ~Vocabulary();

  int32_t size() const;       // ids 0..size()-1: the width of a mask
  size_t mask_words() const;  // (size() + 31) / 32
  // The bytes of a token ("" for specials, stops and padding); throws
  // kvasir::Error on an id out of range.
  const std::string& token_bytes(int32_t id) const;
  const std::vector<int32_t>& stop_ids() const;
  // A 64-bit hash of the token bytes, stop ids and size: the vocabulary's
  // part of the compile cache's key.
  uint64_t fingerprint() const;

  struct Impl;  // the XGrammar side (grammar/xgrammar_bridge.h)
  const Impl& impl() const { return *impl_; }

 private:
  explicit Vocabulary(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A spec compiled against one vocabulary: the grammar and, for each of its
// states, the tokens it allows, preprocessed. Immutable; shared by every
// matcher of every request with the same spec.
class CompiledGrammar {
 public:
  ~CompiledGrammar();
  const GrammarSpec& spec() const;
  const std::shared_ptr<const Vocabulary>& vocabulary() const;
  size_t memory_bytes() const;     // XGrammar's estimate
  double compile_seconds() const;  // wall time of the compilation
  // What XGrammar said it ignored while compiling, in its words ("pattern
  // combined with minLength/maxLength is not supported; ignoring
  // minLength/maxLength"). Most unsupported schema keywords it ignores
  // without a word (docs/structured-outputs.md).
  const std::vector<std::string>& warnings() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }
  explicit CompiledGrammar(std::unique_ptr<Impl> impl);  // made by GrammarCompiler

 private:
  std::unique_ptr<Impl> impl_;
};

struct CompilerOptions {
  GrammarLimits limits;
  // Compiled grammars kept, least recently used evicted first; 0 keeps none.
  // Refusals that came from compiling (a bad regex) are kept too.
  size_t cache_capacity = 128;
  // Compile worker threads: how many compilations run at once, and so the
  // most CPU that runaway compilations can hold.
  int workers = 2;
  // XGrammar's own threads within one compilation.
  int threads_per_compile = 1;
  // json_object and json_schema: the most whitespace characters allowed
  // between two JSON tokens (a model left free to emit whitespace can loop
  // on it); 0 means unbounded.
  int json_max_whitespace = 16;
};

// What GrammarCompiler::compile would refuse as the spec's own fault, short
// of its deadline, without a vocabulary: check_spec, then XGrammar building
// the grammar from the spec (a bad schema, regex or EBNF) and the size of
// what it builds (max_grammar_bytes). Synchronous, and cheap next to a
// compilation (no pass over the vocabulary): whoever accepts requests can
// refuse a bad one at once and leave the compilation to whoever needs the
// grammar. Ok or kInvalidArgument, worded as compile's; *warnings (if not
// null) gets what XGrammar said it ignored.
Status check_grammar(const GrammarSpec& spec, const CompilerOptions& options,
                     std::vector<std::string>* warnings = nullptr);

struct CacheStats {
  uint64_t hits = 0;       // compile_async() found its key (done or in progress)
  uint64_t misses = 0;     // compile_async() queued a compilation
  uint64_t evictions = 0;  // entries dropped to stay within cache_capacity
  size_t entries = 0;      // entries now
};

// A compilation asked of a GrammarCompiler: in progress on its worker, or
// done (from the cache, or refused at once). Cheap to copy; every copy
// shares the one compilation. The deadline (compile_timeout) counts from
// when compile_async() was called, so the caller may do other work first
// and wait() only when it needs the grammar. May outlive its compiler:
// queued work dropped by the compiler's destructor answers kStopping.
class PendingGrammar {
 public:
  PendingGrammar() = default;  // !valid(): nothing asked
  bool valid() const { return state_ != nullptr; }
  // The outcome is known: wait() returns at once.
  bool ready() const;
  // Sets *out to the compiled grammar, waiting until the deadline at most.
  // Errors (*out untouched) as GrammarCompiler::compile. Throws
  // kvasir::Error if !valid() or out is null.
  Status wait(std::shared_ptr<const CompiledGrammar>* out) const;

  struct State;  // grammar/compiler.cpp
  explicit PendingGrammar(std::shared_ptr<const State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<const State> state_;
};

// Compiles specs on its worker threads and keeps the results in a bounded
// LRU cache keyed by (kind, text, choices, strict, vocabulary fingerprint).
// The only threads that compile: callers ask with compile_async() and wait
// on the handle when they need the grammar (or block in compile()).
// Thread-safe. A compilation that outlives compile_timeout keeps its worker
// until it ends (XGrammar cannot be interrupted); its result is then cached,
// so a pathological spec costs one worker however often it is sent.
class GrammarCompiler {
 public:
  explicit GrammarCompiler(CompilerOptions options = {});
  // Waits for the compilations in progress; queued ones are dropped (their
  // waiters, if any are left, get kStopping).
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Starts compiling (spec, vocab) on a worker, or finds it in the cache
  // (done or in progress: concurrent askers share one compilation), and
  // returns at once. A spec check_spec refuses is a ready handle with that
  // refusal. A null vocab is a bug: throws kvasir::Error.
  PendingGrammar compile_async(const GrammarSpec& spec,
                               const std::shared_ptr<const Vocabulary>& vocab);

  // compile_async(spec, vocab).wait(out): sets *out to the compiled grammar
  // for (spec, vocab), waiting at most compile_timeout.
  // Errors (*out untouched):
  //   kInvalidArgument — check_spec refused the spec; XGrammar refused it
  //     ("json_schema: ...", "regex: ...", "ebnf: ..." with its reason); the
  //     derived grammar exceeds max_grammar_bytes; or its compilation ran
  //     past compile_timeout (the spec is too complex).
  //   kQueueFull — compile_timeout passed before a worker was free: busy,
  //     the same call may succeed later.
  //   kStopping — the compiler was destroyed while the spec was queued.
  // A null vocab or out is a bug: throws kvasir::Error.
  Status compile(const GrammarSpec& spec, const std::shared_ptr<const Vocabulary>& vocab,
                 std::shared_ptr<const CompiledGrammar>* out);

  CacheStats cache_stats() const;
  void clear_cache();  // compilations in progress finish; their waiters still get them
  const CompilerOptions& options() const { return options_; }

 private:
  struct Impl;
  CompilerOptions options_;
  std::unique_ptr<Impl> impl_;
};

// One request's position in its grammar. Starts at the beginning of the
// output; every accepted token moves it on. Not thread-safe.
//
// Preemption and recompute: a request keeps its Matcher while it is
// preempted. If it is recomputed from its prompt plus the tokens it has
// generated, its matcher still stands after those tokens: nothing to do.
// If tokens the matcher accepted are dropped (a step that is re-run,
// speculative tokens refused), rollback(n) undoes the last n. A matcher
// rebuilt elsewhere catches up with accept_all(generated tokens).
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  int32_t vocab_size() const;
  size_t mask_words() const;  // (vocab_size() + 31) / 32

  // Writes the set of tokens allowed next into mask[0, mask_words()): bit
  // (id % 32) of word (id / 32) is 1 iff token id may come next; a stop
  // token's bit is 1 iff the output may end here. Returns false iff every
  // token is allowed (the sampler may skip the mask). Throws kvasir::Error
  // (kInternal) if is_terminated() or the span is shorter than mask_words().
  bool fill_next_token_bitmask(std::span<uint32_t> mask);

  // Accepts the next token if the grammar allows it and returns true;
  // returns false and leaves the state as it was otherwise (an id out of
  // range, a special token, a token the grammar refuses, or any token once
  // terminated).
  bool accept(int32_t id);
  // Fast-forward: accepts ids in order until one is refused; returns how many
  // were accepted (ids.size() when all were).
  size_t accept_all(std::span<const int32_t> ids);

  // Undoes the last n accepted tokens (a stop token included: rolling it back
  // un-terminates the matcher). Returns false and does nothing if
  // n > num_accepted().
  bool rollback(size_t n);
  void reset();  // back to the beginning of the output

  // Grammar-forced continuation (speculative decoding's drafts under a
  // grammar): the longest string the grammar admits as the only way on
  // from here (XGrammar's jump-forward string), cut into at most `max`
  // vocabulary tokens by greedy longest match. The model's own
  // tokenization of that string may differ (a draft it then rejects); the
  // string itself is certain. Empty once the output is complete or ended.
  // Leaves the state unchanged.
  std::vector<int32_t> forced_tokens(size_t max) const;
  // That string itself (empty at the end), for a caller that tokenizes it
  // as the model's tokenizer would.
  std::string forced_string();

  bool is_terminated() const;  // a stop token was accepted: the output is complete
  bool can_terminate() const;  // the output so far is complete: a stop token is allowed
  size_t num_accepted() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace grammar
}  // namespace kvasir
