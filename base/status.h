// base/status.h — what went wrong, as a code callers branch on.
//
// Every error in Kvasir has an ErrorCode. Inside a process a failed check
// throws kvasir::Error (base/check.h), which carries one; a function that
// reports failure by value returns a Status. Across process boundaries (ring
// messages, stage exit, the CUDA plugin's C ABI) the code travels as its
// integer value. Callers decide what to do by the code, never by the text:
// the text is for people, and may be reworded freely. The HTTP status and
// OpenAI error type of each code are chosen in one table
// (daemon/api/errors.h); docs/architecture.md, "Errors", lists them.
//
// Values are stable (they cross process boundaries): add, never renumber.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>

namespace kvasir {

enum class ErrorCode : int32_t {
  kOk = 0,
  // The input is wrong; the same input will fail again.
  kInvalidArgument = 1,  // a request field, config key or batch field out of range
  kContextLength = 2,    // prompt + max_tokens exceed the context or the KV cache
  kNotFound = 3,         // no such model, route or file
  kUnauthenticated = 4,  // missing or wrong API key
  kMethodNotAllowed = 5,
  kTooLarge = 6,        // a request body or header over its limit
  kModelFormat = 7,     // a model file is malformed or uses what Kvasir does not support
  kModelNotFound = 8,   // a request names a model this server does not serve
  kHeaderTooLarge = 9,  // an HTTP request head over its limit
  kTimeout = 15,        // a request did not arrive (or finish) in its time
  // The server cannot take it now; the same request may work later.
  kQueueFull = 10,    // the bridge's queue is at scheduler.max_queue
  kLoading = 11,      // the model is still loading
  kStopping = 12,     // the daemon is draining or stopping
  kAborted = 13,      // ended by the daemon (second signal, drain timeout)
  kUnavailable = 14,  // the engine gave up (stage restart limit): fatal
  // Something failed inside Kvasir.
  kBatchRefused = 20,  // a stage refused a ring message or descriptor as malformed
  kStageFailed = 21,   // a stage's forward pass failed
  kBadResult = 22,     // the tail returned something impossible (a token id out of range)
  kDevice = 23,        // a device (CUDA driver, runtime, cuBLAS) call failed
  kOutOfMemory = 24,
  kIo = 25,  // a file or socket operation failed
  kInternal = 26,
};

// "invalid_argument", "queue_full", ... ("unknown" for a value not above).
const char* error_code_name(ErrorCode c);
// A value read from another process: the code, or kInternal if unknown.
ErrorCode error_code_from_int(int32_t v);

// A result without a value: ok, or a code and a message. Cheap when ok.
class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message)
      : code_(code), message_(code == ErrorCode::kOk ? std::string() : std::move(message)) {}

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  // What a person should read ("" when ok).
  const std::string& message() const { return message_; }
  // "queue_full: queue full (1024 requests waiting)", or "ok".
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// Status(code, fmt::format(...)).
template <typename... Args>
Status error_status(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvasir
