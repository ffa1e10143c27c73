// Errors as values at boundaries (files, configs, requests, flags) and checks with source locations inside.
//
// Status carries a code and a message that says what was wrong and what was expected. Result<T> is a value or a
// Status. GLINT_CHECK is for internal invariants only: a failed check is a bug in glint, never bad user input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace glint {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,     // bad input: a file, a config value, a flag, a request field
  kNotFound,            // a file, tensor or name that does not exist
  kOutOfRange,          // an index or size past a limit
  kFailedPrecondition,  // the call is valid but the state does not allow it
  kUnimplemented,       // a feature that is known but not (yet) supported; the message says what is missing
  kResourceExhausted,   // memory pools, queues
  kUnavailable,         // the service cannot take work now, through no fault of the caller (stopping, damaged)
  kIo,                  // the operating system refused (open, mmap, read, write)
  kDataLoss,            // bytes read back are not those written: a checksum mismatch, a file changed while in use
  kInternal,            // a bug
};

std::string_view ErrorCodeName(ErrorCode code);

// Concatenates anything that has an operator<< into one string: StrCat("tensor ", name, " has ", n, " dims").
template <typename... Parts>
std::string StrCat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message" — used to add the file or tensor name as an error travels outwards.
  Status WithContext(std::string_view context) const {
    if (ok()) return *this;
    return Status(code_, StrCat(context, ": ", message_));
  }
  std::string ToString() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

template <typename... Parts>
Status InvalidArgument(const Parts&... parts) {
  return Status(ErrorCode::kInvalidArgument, StrCat(parts...));
}
template <typename... Parts>
Status NotFound(const Parts&... parts) {
  return Status(ErrorCode::kNotFound, StrCat(parts...));
}
template <typename... Parts>
Status OutOfRange(const Parts&... parts) {
  return Status(ErrorCode::kOutOfRange, StrCat(parts...));
}
template <typename... Parts>
Status FailedPrecondition(const Parts&... parts) {
  return Status(ErrorCode::kFailedPrecondition, StrCat(parts...));
}
template <typename... Parts>
Status Unimplemented(const Parts&... parts) {
  return Status(ErrorCode::kUnimplemented, StrCat(parts...));
}
template <typename... Parts>
Status ResourceExhausted(const Parts&... parts) {
  return Status(ErrorCode::kResourceExhausted, StrCat(parts...));
}
template <typename... Parts>
Status Unavailable(const Parts&... parts) {
  return Status(ErrorCode::kUnavailable, StrCat(parts...));
}
template <typename... Parts>
Status IoError(const Parts&... parts) {
  return Status(ErrorCode::kIo, StrCat(parts...));
}
template <typename... Parts>
Status DataLoss(const Parts&... parts) {
  return Status(ErrorCode::kDataLoss, StrCat(parts...));
}
template <typename... Parts>
Status InternalError(const Parts&... parts) {
  return Status(ErrorCode::kInternal, StrCat(parts...));
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}        // NOLINT(google-explicit-constructor): implicit on purpose
  Result(Status status) : state_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(state_).ok()) state_ = Status(ErrorCode::kInternal, "Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

// File and line of a check. (std::source_location is not usable with clang 14 + libstdc++ 12, which the
// fuzz targets are built with.)
struct SourceLocation {
  const char* file;
  int line;
};

[[noreturn]] void CheckFailed(const char* condition, const std::string& message, SourceLocation where);

}  // namespace glint

#define GLINT_CONCAT_INNER(a, b) a##b
#define GLINT_CONCAT(a, b) GLINT_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define GLINT_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::glint::Status glint_status_ = (expr);        \
    if (!glint_status_.ok()) return glint_status_; \
  } while (0)

// `lhs = value of expr`, or return its Status from the enclosing function.
#define GLINT_ASSIGN_OR_RETURN(lhs, expr) GLINT_ASSIGN_OR_RETURN_IMPL(GLINT_CONCAT(glint_result_, __LINE__), lhs, expr)
#define GLINT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

// Internal invariant. GLINT_CHECK(i < n) << "i=" << i; aborts with file:line and the message. Never for bad input.
#define GLINT_CHECK(condition) \
  if (condition) {             \
  } else                       \
    ::glint::internal::CheckMessage(#condition, ::glint::SourceLocation{__FILE__, __LINE__})

namespace glint::internal {
class CheckMessage {
 public:
  CheckMessage(const char* condition, SourceLocation where) : condition_(condition), where_(where) {}
  template <typename T>
  CheckMessage& operator<<(const T& part) {
    stream_ << part;
    return *this;
  }
  [[noreturn]] ~CheckMessage() { CheckFailed(condition_, stream_.str(), where_); }

 private:
  const char* condition_;
  SourceLocation where_;
  std::ostringstream stream_;
};
}  // namespace glint::internal
