#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace glint {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_write_mutex;  // keeps lines from different threads whole
std::string g_prefix;      // set once before any thread logs
}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(level); }
void SetLogPrefix(std::string prefix) { g_prefix = std::move(prefix); }
LogLevel GetLogLevel() { return g_level.load(); }

Result<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  return InvalidArgument("unknown log level '", name, "'; expected one of debug, info, warning, error, off");
}

void LogLine(LogLevel level, std::string_view line) {
  static constexpr const char* kTags[] = {"debug", "info", "warning", "error", ""};
  std::lock_guard<std::mutex> lock(g_write_mutex);
  std::fprintf(stderr, "glint %s%s: %.*s\n", g_prefix.c_str(), kTags[static_cast<int>(level)],
               static_cast<int>(line.size()), line.data());
}

}  // namespace glint
