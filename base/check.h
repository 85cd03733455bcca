// base/check.h — the one error family of Kvasir.
//
// Inside a process, a failed check throws kvasir::Error carrying an
// ErrorCode (base/status.h), the file and line of the check and a message
// for the user. Across process boundaries (rings, stage exit codes, the CUDA
// plugin) errors travel as codes, never as exceptions. Callers branch on
// Error::code(), never on the message.
//
//   KV_CHECK(n <= limit, "tensor '{}': {} elements exceed {}", name, n, limit);
//   KV_CHECK_CODE(ok, ErrorCode::kModelFormat, "tensor '{}' is missing", name);
//   KV_FAIL("unknown tensor type {}", t);
//   KV_FAIL_CODE(ErrorCode::kDevice, "cudaMalloc: {}", why);
//   KV_RETURN_IF_ERROR(validate(x));   // in a function returning Status
//
// KV_CHECK and KV_FAIL say kInvalidArgument: a check validates its input.
// Checks are always on (Release included): never use assert() for validation.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "base/status.h"

namespace kvasir {

class Error : public std::runtime_error {
 public:
  Error(const char* file, int line, ErrorCode code, std::string message)
      : std::runtime_error(message),
        file_(file),
        line_(line),
        code_(code),
        message_(std::move(message)) {}
  Error(const char* file, int line, std::string message)
      : Error(file, line, ErrorCode::kInvalidArgument, std::move(message)) {}
  const char* file() const { return file_; }
  int line() const { return line_; }
  ErrorCode code() const { return code_; }
  // The message without the location: what the user should read.
  const std::string& message() const { return message_; }
  // "message (at file:line)" — for logs.
  std::string describe() const { return fmt::format("{} (at {}:{})", message_, file_, line_); }
  Status status() const { return Status(code_, message_); }

 private:
  const char* file_;
  int line_;
  ErrorCode code_;
  std::string message_;
};

namespace detail {
[[noreturn]] inline void throw_error(const char* file, int line, ErrorCode code,
                                     std::string message) {
  throw Error(file, line, code, std::move(message));
}
}  // namespace detail

// Throws a non-ok Status as an Error (at the caller's line); ok does nothing.
#define KV_THROW_IF_ERROR(expr)                                                                   \
  do {                                                                                            \
    ::kvasir::Status kv_status_ = (expr);                                                         \
    if (!kv_status_.ok()) [[unlikely]]                                                            \
      ::kvasir::detail::throw_error(__FILE__, __LINE__, kv_status_.code(), kv_status_.message()); \
  } while (0)

// Returns a non-ok Status to the caller (a function returning Status).
#define KV_RETURN_IF_ERROR(expr)          \
  do {                                    \
    ::kvasir::Status kv_status_ = (expr); \
    if (!kv_status_.ok()) [[unlikely]]    \
      return kv_status_;                  \
  } while (0)

}  // namespace kvasir

#define KV_FAIL_CODE(code, ...) \
  ::kvasir::detail::throw_error(__FILE__, __LINE__, (code), ::fmt::format(__VA_ARGS__))
#define KV_FAIL(...) KV_FAIL_CODE(::kvasir::ErrorCode::kInvalidArgument, __VA_ARGS__)

#define KV_CHECK_CODE(cond, code, ...)                                                       \
  do {                                                                                       \
    if (!(cond)) [[unlikely]]                                                                \
      ::kvasir::detail::throw_error(__FILE__, __LINE__, (code), ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define KV_CHECK(cond, ...) KV_CHECK_CODE(cond, ::kvasir::ErrorCode::kInvalidArgument, __VA_ARGS__)
