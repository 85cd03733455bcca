// daemon/api/api.h — the daemon's HTTP API (docs/api.md): one set of routes,
// served on the Unix socket for the CLI and on TCP for OpenAI clients.
//
//   POST /v1/completions, /v1/chat/completions   (stream: true → SSE)
//   GET  /v1/models, /health, /metrics, /kvasir/v1/stats
//   POST /tokenize, /detokenize
//
// docs/api.md documents every route, field and error. The routes are
// transport-free (ApiService::handle takes a parsed request and a Responder);
// the transport is HttpServer (http_server.h).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/api/http_server.h"
#include "daemon/api/model_facts.h"
#include "daemon/api/openai.h"
#include "daemon/engine/engine.h"

namespace kvasir {

struct Config;
class Tokenizer;
class ChatTemplate;

// Incremental detokenizer of one request (UTF-8 safe: holds partial characters).
class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual std::string push(int32_t id) = 0;
  virtual std::string flush() = 0;
};

// What the API needs of the tokenizer and chat template. The daemon adapts
// model/tokenizer.h (make_text_codec); tests use a fake.
class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special,
                                      bool parse_special) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;
  virtual std::unique_ptr<TextStream> stream(bool skip_special) const = 0;
  // Read once, into ModelFacts (model_facts.h); the routes ask those.
  virtual int32_t vocab_size() const = 0;
  virtual bool is_eog(int32_t id) const = 0;
  // The model's chat template applied to `chat` (ChatTurns, openai.h), and
  // the result tokenized with control-token parsing off inside the
  // conversation's own text (model/chat_template.h, encode_prompt: a user
  // cannot forge a turn); never adds BOS. Throws kvasir::Error if the model
  // has no template or the template refuses the conversation (its
  // raise_exception message).
  virtual std::vector<int32_t> encode_chat(const ChatTurns& chat) const = 0;
  // The template's source ("" without one): which tool-call syntax it
  // teaches and what it can render (chat_turns.h, tool_calls.h), read once
  // into ModelFacts.
  virtual std::string chat_template_source() const = 0;
};

// Adapts the model's tokenizer and chat template (chat may be nullptr: then
// chat requests get 400). Both must outlive the codec.
std::shared_ptr<TextCodec> make_text_codec(const Tokenizer& tok, const ChatTemplate* chat);

// Checks structured-output constraints on arrival, so that a bad schema,
// regex or grammar is a 400 before anything is scheduled
// (docs/structured-outputs.md). The compilation against the vocabulary is
// the tail stage's, once, overlapped with the prompt's forward pass.
class GrammarService {
 public:
  virtual ~GrammarService() = default;
  // Checks `c` and calls done(status, spec) once, on this thread or another:
  // ok with the spec in the wire form the engine carries to the tail
  // (GenRequest::grammar), or kInvalidArgument (the constraint is wrong or
  // too large: its message names the kind), kQueueFull (busy: try again),
  // kStopping.
  using Done = std::function<void(Status, std::shared_ptr<const std::string>)>;
  virtual void compile(const OutputConstraint& c, Done done) = 0;
};

struct GrammarServiceOptions {
  size_t max_spec_bytes = 64 << 10;  // a schema, regex or grammar's text
};

// The daemon's grammar service (grammar::check_grammar on a worker thread of
// its own, so a slow check never holds the io thread), or null in a build without the grammar engine: structured
// requests then get 400.
std::shared_ptr<GrammarService> make_grammar_service(const GrammarServiceOptions& options);

struct ApiContext {
  std::shared_ptr<const TextCodec> codec;
  // The model's facts, read off `codec` once at load (model_facts). Null
  // with a codec: ApiService computes them when it is created.
  std::shared_ptr<const ModelFacts> facts;
  std::shared_ptr<GrammarService> grammar;  // null: structured outputs refused (400)
  std::string model_name;                   // the id in /v1/models and responses
  std::vector<std::string> model_aliases;   // also accepted as "model" (e.g. the file name)
  // Also listed by /v1/models after model_name (server.served_model_name's
  // other names); each is accepted as "model" too.
  std::vector<std::string> listed_aliases;
  int32_t max_model_len = 0;                // context length (0 = unknown)
  // The model's sampling defaults (a folder's generation_config.json): what
  // a request gets for temperature, top_p, top_k, min_p and
  // repetition_penalty when it does not set them. Other fields unused.
  SamplingParams sampling_defaults;
  // The plan and scheduler settings as /kvasir/v1/stats reports them
  // ("plan": what kvasir diagnose reasons from); null: not reported.
  nlohmann::json plan;
  // Turning true starts the graceful stop (see run_api). May be null.
  const std::atomic<bool>* stop = nullptr;
  // Turning true during the drain aborts the requests still running (the
  // daemon's second SIGTERM). May be null.
  const std::atomic<bool>* abort = nullptr;
  // Startup progress for /health and `kvasir status` while not ready (may be empty).
  std::function<nlohmann::json()> loading;
  // Called once on run_api's thread when every listener is up (the daemon
  // starts the stages only then, so a second daemon fails before touching them).
  std::function<void()> on_listening;
  // Called on run_api's thread with a line for the daemon's log when the
  // drain ends: how many requests finished and how many were aborted.
  std::function<void(const std::string&)> on_drained;
};

struct ApiOptions {
  std::string api_key;  // "" = none; checked on TCP requests only
  ParseLimits limits;
};

// The routes. Create with the HttpServer's post function (to get engine
// events back on the io thread). Keep it alive while the server runs.
class ApiService : public std::enable_shared_from_this<ApiService> {
 public:
  ApiService(Engine& engine, ApiContext ctx, ApiOptions opts,
             std::function<void(std::function<void()>)> post);
  ~ApiService();
  void handle(HttpRequest req, std::shared_ptr<Responder> res);
  // Detaches from the engine: later engine events are dropped, in-flight
  // requests are cancelled.
  void shutdown();
  // New generation requests get 503 from now on (the daemon is stopping);
  // /health says "stopping".
  void begin_drain();
  // Generation requests not yet answered.
  size_t in_flight() const;
  // Ends every generation request still running with `message` (503): an
  // error body if nothing was sent yet, else an SSE error event and [DONE],
  // so a stream never ends silently. Cancels them in the engine. Io thread.
  // Returns how many were aborted.
  size_t abort_all(const std::string& message);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// An Engine that is not there yet: lets the API serve (health 503 with
// ctx.loading progress, `kvasir status` while the model loads) before the
// stages are up. Before attach(), ready() is false, submit() refuses with
// kLoading and ring_report() is `planned` (the stages' layers and devices,
// no counters yet); after, everything forwards. Thread-safe.
class DeferredEngine : public Engine {
 public:
  explicit DeferredEngine(RingReport planned = {}) : planned_(std::move(planned)) {}
  void attach(Engine* e) { engine_.store(e); }
  RequestId submit(GenRequest req, EventSink sink) override;
  void cancel(RequestId id) override;
  void stop_choice(RequestId id, int32_t index) override;
  EngineStats stats() const override;
  RingReport ring_report() const override;
  bool ready() const override;
  int32_t max_sequence_tokens() const override;

 private:
  const RingReport planned_;
  std::atomic<Engine*> engine_{nullptr};
};

// Serves the API on cfg.server.socket and (if set) cfg.server.http until
// *ctx.stop turns true. Then the graceful stop: new generation requests get
// 503 ("stopping") while running ones finish, for up to
// cfg.server.drain_timeout seconds; at the timeout, or when *ctx.abort turns
// true, the rest are ended with an error (abort_all). Once the last bytes are
// written (at most write_timeout more) every connection closes, the socket
// file is removed and run_api returns. One io thread (the caller's). Returns
// 0 if every request finished, 1 if some were aborted; throws kvasir::Error
// if a listener cannot be set up.
int run_api(const Config& cfg, Engine& engine, const ApiContext& ctx);

// Constant-time comparison (API keys).
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace kvasir
