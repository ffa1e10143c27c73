#include "engine/stop.h"

#include <algorithm>

namespace glint {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {}

std::string StopStringMatcher::Push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // The earliest complete stop string wins (on equal starts, any: the text before it is the same).
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = held_.find(stop);
    if (at < first) {
      first = at;
      matched_ = stop;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string released = held_.substr(0, first);
    held_.clear();
    return released;
  }
  // Any future match must start inside the longest suffix that is a proper prefix of a stop string (everything
  // before it can never be part of one), so that suffix is all we hold back.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t length = std::min(held_.size(), stop.size() - 1); length > keep; --length) {
      if (std::string_view(held_).substr(held_.size() - length) == std::string_view(stop).substr(0, length)) {
        keep = length;
        break;
      }
    }
  }
  std::string released = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return released;
}

std::string StopStringMatcher::Flush() {
  std::string released = std::move(held_);
  held_.clear();
  return released;
}

}  // namespace glint
