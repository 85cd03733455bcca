// daemon/api/errors.h — how an error reaches an HTTP client: one table.
//
// Every error the front door answers with is an ErrorCode (base/status.h);
// http_error() is the one place that says which HTTP status, OpenAI error
// `type` and `code` each one gets (docs/api.md, "Errors", lists them). The
// status is chosen by the code, never by the message text.
//
// ApiError is what a route throws: a code, a message for the client and
// optionally the parameter at fault; its status, type and code string come
// from the table only.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kvasir {

// What the client sees of an error besides the message and the parameter.
struct HttpError {
  int status = 500;
  std::string_view type;  // OpenAI error type: "invalid_request_error", "server_error", ...
  std::string_view code;  // OpenAI error code ("" → null in the body)
};

// The table row of `code` (kOk, not an error, gets kInternal's row: a bug
// if it ever reaches a client).
HttpError http_error(ErrorCode code);

// {"error": {"message", "type", "param", "code"}} ("" param and code → null).
nlohmann::json error_body(const HttpError& e, const std::string& message,
                          const std::string& param = "");

// An error the client sees: the route that throws it says what went wrong
// (the code) and to whom (the message, the parameter at fault).
class ApiError : public std::runtime_error {
 public:
  ApiError(ErrorCode code, std::string message, std::string param = "")
      : std::runtime_error(std::move(message)),
        status(http_error(code).status),
        param(std::move(param)),
        code_(code) {}
  ErrorCode code() const { return code_; }
  // The table row: HTTP status, OpenAI type and code.
  HttpError http() const { return http_error(code_); }

  const int status;         // http().status
  const std::string param;  // the parameter at fault ("" → null)

 private:
  ErrorCode code_;
};

// The error body of an ApiError.
nlohmann::json error_body(const ApiError& e);

// 400 invalid_request_error naming `param` (kInvalidArgument).
[[noreturn]] void bad_param(const std::string& param, const std::string& message);

}  // namespace kvasir
