#include "router/health.h"

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "server/http_message.h"

namespace glint::router {
namespace {

constexpr size_t kMaxHealthBytes = 64 << 10;

// The verdict on one /health answer: "" when healthy, else why not.
std::string Judge(Backend& backend, int status, const std::string& body) {
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status != 200) {
    std::string why = json.is_object() && json.contains("reason") ? json["reason"].dump() : body.substr(0, 200);
    return StrCat("/health answered ", status, ": ", server::EscapeForLog(why));
  }
  if (!json.is_object()) return "/health answered 200 without a JSON object";
  const std::string expected(HealthRoleName(backend.role));
  const auto role = json.find("role");
  const std::string reported = role == json.end() ? "both" : role->is_string() ? role->get<std::string>() : "?";
  if (reported != expected) {
    return StrCat("/health reports role '", server::EscapeForLog(reported), "' but it was listed as a '", expected,
                  "' server");
  }
  if (backend.role != BackendRole::kPrefill) return "";
  const auto port = json.find("transfer_port");
  if (port == json.end() || !port->is_number_integer() || port->get<int64_t>() < 1 || port->get<int64_t>() > 65535) {
    return "/health of a prefill server has no transfer_port in [1, 65535]";
  }
  backend.transfer_port.store(static_cast<int>(port->get<int64_t>()));
  return "";
}

}  // namespace

void CheckBackend(Backend& backend, const UpstreamTimeouts& timeouts, const std::function<bool()>& keep_going) {
  UpstreamCall call(backend.url, timeouts);
  std::string verdict;
  Status started = call.Start({"GET", "/health", {}, ""}, keep_going);
  if (!keep_going()) return;
  if (started.ok()) {
    Result<std::string> body = call.ReadAll(kMaxHealthBytes, keep_going);
    verdict = body.ok() ? Judge(backend, call.status(), *body) : body.status().message();
  } else {
    verdict = started.message();
  }
  const bool was_healthy = backend.healthy.load();
  const std::string previous = backend.reason();
  backend.SetHealth(verdict.empty(), verdict);
  if (verdict.empty() && !was_healthy) LogInfo("router: backend ", backend.url.text, " is healthy");
  if (!verdict.empty() && (was_healthy || previous != verdict)) {
    LogWarning("router: backend ", backend.url.text, " is skipped: ", verdict);
  }
}

}  // namespace glint::router
