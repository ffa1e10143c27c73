// OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}} with the HTTP status that goes with them.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace glint::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the offending request field ("" → null)
  std::string code;   // a machine-readable code ("" → null)
};

inline ApiError BadRequest(std::string message, std::string param = "", std::string code = "") {
  return {400, "invalid_request_error", std::move(message), std::move(param), std::move(code)};
}

// The JSON body of an error response.
std::string ErrorBody(const ApiError& error);

// A value or the ApiError that explains why there is none (like Result, but carrying HTTP semantics).
template <typename T>
class ApiOr {
 public:
  ApiOr(T value) : state_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  ApiOr(ApiError error) : state_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return std::holds_alternative<T>(state_); }
  T& value() & { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  const T& value() const& { return std::get<T>(state_); }
  const ApiError& error() const { return std::get<ApiError>(state_); }

 private:
  std::variant<T, ApiError> state_;
};

}  // namespace glint::server

// Returns the ApiError of `expr` (a std::optional<ApiError>) if it holds one.
#define API_RETURN_IF_ERROR(expr)                                 \
  do {                                                            \
    std::optional<::glint::server::ApiError> api_error_ = (expr); \
    if (api_error_) return std::move(*api_error_);                \
  } while (0)

#define GLINT_API_CONCAT_INNER(a, b) a##b
#define GLINT_API_CONCAT(a, b) GLINT_API_CONCAT_INNER(a, b)
// `lhs = value of expr` (an ApiOr), or return its ApiError.
#define API_ASSIGN_OR_RETURN(lhs, expr) API_ASSIGN_OR_RETURN_IMPL(GLINT_API_CONCAT(api_result_, __LINE__), lhs, expr)
#define API_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.error();              \
  lhs = std::move(tmp).value()
