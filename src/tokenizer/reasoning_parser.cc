#include "tokenizer/reasoning_parser.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace glint {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

}  // namespace

size_t PartialTagLength(std::string_view text, std::string_view tag) {
  const size_t longest = std::min(text.size(), tag.size() - 1);
  for (size_t length = longest; length > 0; --length) {
    if (text.substr(text.size() - length) == tag.substr(0, length)) return length;
  }
  return 0;
}

void ReasoningParser::Push(std::string_view text, std::string& reasoning, std::string& content) {
  if (state_ == State::kContent) {
    content.append(text);
    return;
  }
  pending_.append(text);
  if (state_ == State::kMaybeOpen) {
    const size_t first =
        static_cast<size_t>(std::find_if_not(pending_.begin(), pending_.end(), IsAsciiBlank) - pending_.begin());
    const std::string_view rest = std::string_view(pending_).substr(first);
    if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
      state_ = State::kReasoning;
      pending_.erase(0, first + kThinkOpen.size());
    } else if (rest.size() < kThinkOpen.size() && kThinkOpen.substr(0, rest.size()) == rest) {
      return;  // blanks and maybe the start of <think>: wait
    } else {
      state_ = State::kContent;
      content.append(pending_);
      pending_.clear();
      return;
    }
  }
  // kReasoning
  const size_t close = pending_.find(kThinkClose);
  if (close != std::string::npos) {
    reasoning.append(pending_, 0, close);
    content.append(pending_, close + kThinkClose.size(), std::string::npos);
    pending_.clear();
    state_ = State::kContent;
    return;
  }
  const size_t hold = PartialTagLength(pending_, kThinkClose);
  reasoning.append(pending_, 0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
}

void ReasoningParser::Finish(std::string& reasoning, std::string& content) {
  if (state_ == State::kReasoning) {
    reasoning.append(pending_);
  } else {
    content.append(pending_);
  }
  pending_.clear();
}

}  // namespace glint
