#include "base/status.h"

namespace kvasir {

const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kContextLength:
      return "context_length";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kUnauthenticated:
      return "unauthenticated";
    case ErrorCode::kMethodNotAllowed:
      return "method_not_allowed";
    case ErrorCode::kTooLarge:
      return "too_large";
    case ErrorCode::kModelFormat:
      return "model_format";
    case ErrorCode::kModelNotFound:
      return "model_not_found";
    case ErrorCode::kHeaderTooLarge:
      return "header_too_large";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kQueueFull:
      return "queue_full";
    case ErrorCode::kLoading:
      return "loading";
    case ErrorCode::kStopping:
      return "stopping";
    case ErrorCode::kAborted:
      return "aborted";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kBatchRefused:
      return "batch_refused";
    case ErrorCode::kStageFailed:
      return "stage_failed";
    case ErrorCode::kBadResult:
      return "bad_result";
    case ErrorCode::kDevice:
      return "device";
    case ErrorCode::kOutOfMemory:
      return "out_of_memory";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

ErrorCode error_code_from_int(int32_t v) {
  const auto c = static_cast<ErrorCode>(v);
  return std::string_view(error_code_name(c)) == "unknown" ? ErrorCode::kInternal : c;
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", error_code_name(code_), message_);
}

}  // namespace kvasir
