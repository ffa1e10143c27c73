// Minimal leveled logging to stderr. The level is process-wide configuration set once by the CLI (--log-level);
// library code only writes through these functions.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace glint {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

void SetLogLevel(LogLevel level);
// Written after "glint" on every line, e.g. "rank 1 " in a multi-rank run (set once at start-up).
void SetLogPrefix(std::string prefix);
LogLevel GetLogLevel();
Result<LogLevel> ParseLogLevel(std::string_view name);  // "debug", "info", "warning", "error", "off"
void LogLine(LogLevel level, std::string_view line);

template <typename... Parts>
void LogInfo(const Parts&... parts) {
  if (GetLogLevel() <= LogLevel::kInfo) LogLine(LogLevel::kInfo, StrCat(parts...));
}
template <typename... Parts>
void LogDebug(const Parts&... parts) {
  if (GetLogLevel() <= LogLevel::kDebug) LogLine(LogLevel::kDebug, StrCat(parts...));
}
template <typename... Parts>
void LogWarning(const Parts&... parts) {
  if (GetLogLevel() <= LogLevel::kWarning) LogLine(LogLevel::kWarning, StrCat(parts...));
}
template <typename... Parts>
void LogError(const Parts&... parts) {
  if (GetLogLevel() <= LogLevel::kError) LogLine(LogLevel::kError, StrCat(parts...));
}

}  // namespace glint
