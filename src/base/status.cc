#include "base/status.h"

namespace glint {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kOutOfRange:
      return "out of range";
    case ErrorCode::kFailedPrecondition:
      return "failed precondition";
    case ErrorCode::kUnimplemented:
      return "unimplemented";
    case ErrorCode::kResourceExhausted:
      return "resource exhausted";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kIo:
      return "i/o error";
    case ErrorCode::kDataLoss:
      return "data loss";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "unknown error";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return StrCat(ErrorCodeName(code_), ": ", message_);
}

void CheckFailed(const char* condition, const std::string& message, SourceLocation where) {
  std::fprintf(stderr, "glint: internal check failed at %s:%d: %s %s\n", where.file, where.line, condition,
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace glint
