// Stop strings on streamed text: text is released as soon as it can no longer be the start of a stop string, so a
// stop string never reaches the client, not even in part.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace glint {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Adds generated text. Returns the text that is now safe to release. When a stop string completes, stopped()
  // becomes true and the returned text ends just before the earliest one; later calls return nothing.
  std::string Push(std::string_view text);
  // The end of generation (not by a stop string): releases the held-back text.
  std::string Flush();
  bool stopped() const { return stopped_; }
  // Once stopped: the stop string that matched (the earliest in the text; Anthropic's `stop_sequence` names it).
  const std::string& matched() const { return matched_; }
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // the longest suffix of the text so far that is a proper prefix of some stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace glint
