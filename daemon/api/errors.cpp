// daemon/api/errors.cpp — the table of errors/HTTP (see errors.h; docs/api.md, "Errors").
#include "daemon/api/errors.h"

namespace kvasir {

namespace {
constexpr std::string_view kInvalidRequest = "invalid_request_error";
constexpr std::string_view kServerError = "server_error";
}  // namespace

// A switch without default: a new ErrorCode does not compile silently
// (-Wswitch) until it has its row here, in docs/api.md and in
// tests/unit/daemon/api/test_errors.cpp.
HttpError http_error(ErrorCode code) {
  switch (code) {
    // The request is wrong: the same request will fail again.
    case ErrorCode::kInvalidArgument:
      return {400, kInvalidRequest, ""};
    case ErrorCode::kContextLength:
      return {400, kInvalidRequest, "context_length_exceeded"};
    case ErrorCode::kUnauthenticated:
      return {401, kInvalidRequest, "invalid_api_key"};
    case ErrorCode::kNotFound:
      return {404, kInvalidRequest, "not_found"};
    case ErrorCode::kModelNotFound:
      return {404, kInvalidRequest, "model_not_found"};
    case ErrorCode::kMethodNotAllowed:
      return {405, kInvalidRequest, ""};
    case ErrorCode::kTimeout:
      return {408, kInvalidRequest, ""};
    case ErrorCode::kTooLarge:
      return {413, kInvalidRequest, ""};
    case ErrorCode::kHeaderTooLarge:
      return {431, kInvalidRequest, ""};
    // The server cannot take it now: the same request may work later.
    case ErrorCode::kQueueFull:
      return {429, "rate_limit_error", "queue_full"};
    case ErrorCode::kLoading:
      return {503, kServerError, "not_ready"};
    case ErrorCode::kStopping:
      return {503, kServerError, "stopping"};
    case ErrorCode::kAborted:
      return {503, kServerError, "aborted"};
    case ErrorCode::kUnavailable:
      return {503, kServerError, "unavailable"};
    // Something failed inside Kvasir (not the request's fault).
    case ErrorCode::kModelFormat:
    case ErrorCode::kBatchRefused:
    case ErrorCode::kStageFailed:
    case ErrorCode::kBadResult:
    case ErrorCode::kDevice:
    case ErrorCode::kOutOfMemory:
    case ErrorCode::kIo:
    case ErrorCode::kInternal:
    case ErrorCode::kOk:  // not an error: a bug if it gets here
      break;
  }
  return {500, kServerError, ""};
}

nlohmann::json error_body(const HttpError& e, const std::string& message,
                          const std::string& param) {
  auto opt = [](std::string_view s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(s));
  };
  return {{"error",
           {{"message", message},
            {"type", std::string(e.type)},
            {"param", opt(param)},
            {"code", opt(e.code)}}}};
}

nlohmann::json error_body(const ApiError& e) {
  return error_body(e.http(), e.what(), e.param);
}

void bad_param(const std::string& param, const std::string& message) {
  throw ApiError(ErrorCode::kInvalidArgument, message, param);
}

}  // namespace kvasir
