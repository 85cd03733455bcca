// base/check.h — the one error family of Kvasir.
//
// Inside a process, a failed check throws kvasir::Error carrying the file and
// line of the check and a hint for the user. Across process boundaries (rings,
// stage exit codes) errors travel as status codes, never as exceptions.
//
//   KV_CHECK(n <= limit, "tensor '{}': {} elements exceed {}", name, n, limit);
//   KV_FAIL("unknown tensor type {}", t);
//
// Checks are always on (Release included): never use assert() for validation.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvasir {

class Error : public std::runtime_error {
 public:
  Error(const char* file, int line, std::string message)
      : std::runtime_error(message), file_(file), line_(line), message_(std::move(message)) {}
  const char* file() const { return file_; }
  int line() const { return line_; }
  // The message without the location: what the user should read.
  const std::string& message() const { return message_; }
  // "message (at file:line)" — for logs.
  std::string describe() const { return fmt::format("{} (at {}:{})", message_, file_, line_); }

 private:
  const char* file_;
  int line_;
  std::string message_;
};

namespace detail {
[[noreturn]] inline void throw_error(const char* file, int line, std::string message) {
  throw Error(file, line, std::move(message));
}
}  // namespace detail

}  // namespace kvasir

#define KV_FAIL(...) ::kvasir::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

#define KV_CHECK(cond, ...)                                                            \
  do {                                                                                 \
    if (!(cond)) [[unlikely]]                                                          \
      ::kvasir::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__));   \
  } while (0)
