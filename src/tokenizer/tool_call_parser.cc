#include "tokenizer/tool_call_parser.h"

#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "tokenizer/reasoning_parser.h"
#include "tokenizer/utf8.h"

namespace glint {
namespace {

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kKeyOpen = "<arg_key>";
constexpr std::string_view kKeyClose = "</arg_key>";
constexpr std::string_view kValueOpen = "<arg_value>";
constexpr std::string_view kValueClose = "</arg_value>";

constexpr size_t kMaxNameBytes = 256;

std::string_view Trim(std::string_view text) {
  while (!text.empty() && IsAsciiBlank(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsAsciiBlank(text.back())) text.remove_suffix(1);
  return text;
}

// JSON string escaping byte by byte: quotes, backslashes and control characters are escaped, every other byte is
// copied, so escaping pieces of a string cut anywhere (even inside a UTF-8 character) concatenates to the escaping
// of the whole.
std::string JsonEscape(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (byte < 0x20) {
          out += "\\u00";
          out += kHex[byte >> 4];
          out += kHex[byte & 0xF];
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string JsonQuote(std::string_view text) { return "\"" + JsonEscape(text) + "\""; }

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  return std::none_of(name.begin(), name.end(), [](char c) { return IsAsciiBlank(c) || c == '<' || c == '>'; });
}

struct TagHit {
  size_t position = std::string::npos;
  std::string_view tag;
};

// The earliest of `tags` in `text`.
TagHit FindFirst(std::string_view text, std::initializer_list<std::string_view> tags) {
  TagHit hit;
  for (std::string_view tag : tags) {
    const size_t at = text.find(tag);
    if (at < hit.position) hit = {at, tag};
  }
  return hit;
}

// How much of the end of `text` could be the start of one of `tags`.
size_t HoldBack(std::string_view text, std::initializer_list<std::string_view> tags) {
  size_t hold = 0;
  for (std::string_view tag : tags) hold = std::max(hold, PartialTagLength(text, tag));
  return hold;
}

}  // namespace

void ToolCallParser::StartInsideCall(std::string_view forced_name) {
  raw_call_.clear();
  name_.assign(forced_name);
  state_ = forced_name.empty() ? State::kName : State::kAfterName;
  name_emitted_ = false;
  arguments_opened_ = false;
}

void ToolCallParser::EmitName(std::vector<ToolCallDelta>& calls) {
  calls.push_back({num_calls_, std::string(Trim(name_)), "", false, false});
  name_emitted_ = true;
  ++num_calls_;
}

void ToolCallParser::EmitArguments(std::vector<ToolCallDelta>& calls, std::string fragment) {
  if (fragment.empty()) return;
  const int index = num_calls_ - 1;
  if (!calls.empty() && calls.back().index == index && !calls.back().done) {
    calls.back().arguments += fragment;
  } else {
    calls.push_back({index, "", std::move(fragment), false, false});
  }
}

void ToolCallParser::MarkDone(std::vector<ToolCallDelta>& calls, bool truncated) {
  const int index = num_calls_ - 1;
  if (calls.empty() || calls.back().index != index || calls.back().done) calls.push_back({index, "", "", false, false});
  calls.back().done = true;
  calls.back().truncated = truncated;
}

void ToolCallParser::ResetCall() {
  state_ = State::kContent;
  name_.clear();
  key_.clear();
  value_.clear();
  raw_call_.clear();
  arguments_opened_ = false;
  name_emitted_ = false;
  value_opened_ = false;
  value_emitted_ = 0;
  blank_run_.clear();
}

void ToolCallParser::CloseCall(std::vector<ToolCallDelta>& calls) {
  if (!name_emitted_) EmitName(calls);
  EmitArguments(calls, arguments_opened_ ? "}" : "{}");
  MarkDone(calls, /*truncated=*/false);
  ResetCall();
}

void ToolCallParser::TruncateCall(std::vector<ToolCallDelta>& calls) {
  if (!name_emitted_) EmitName(calls);
  if (state_ == State::kValue) {
    if (value_streams_raw_) {
      StreamRawValue(calls);
    } else if (!value_is_string_) {
      OpenValue(calls, Trim(value_));  // the value's text so far, unconverted: it may be cut anywhere
    }
  }
  MarkDone(calls, /*truncated=*/true);
  ResetCall();
}

bool ToolCallParser::ValueIsString() const {
  if (types_ == nullptr) return false;
  const auto it = types_->string_parameters.find(std::string(Trim(name_)));
  return it != types_->string_parameters.end() && it->second.count(key_) > 0;
}

bool ToolCallParser::ValueStreamsRaw() const {
  if (types_ == nullptr) return false;
  const auto it = types_->constrained_json_parameters.find(std::string(Trim(name_)));
  return it != types_->constrained_json_parameters.end() && it->second.count(key_) > 0;
}

std::string ToolCallParser::ConvertValue(std::string_view raw) const {
  const std::string_view trimmed = Trim(raw);
  nlohmann::json parsed = nlohmann::json::parse(trimmed, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_discarded() && !trimmed.empty()) {
    return parsed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return JsonQuote(raw);
}

void ToolCallParser::EmitContent(std::string& content, std::string_view text) {
  if (text.empty()) return;
  if (num_calls_ == 0) {
    content.append(text);
    return;
  }
  // After a call, whitespace is held until something else follows (it may be just the gap before the next
  // call, or trailing); cutting at the last non-blank keeps the result independent of the chunking.
  const auto last = std::find_if_not(text.rbegin(), text.rend(), IsAsciiBlank);
  if (last == text.rend()) {
    blank_run_.append(text);
    return;
  }
  const size_t kept = static_cast<size_t>(text.rend() - last);
  content.append(blank_run_);
  content.append(text.substr(0, kept));
  blank_run_.assign(text.substr(kept));
}

void ToolCallParser::Consume(size_t bytes) { buffer_.erase(0, bytes); }

size_t ToolCallParser::HoldFor(std::initializer_list<std::string_view> tags, bool at_end) const {
  return at_end ? 0 : HoldBack(buffer_, tags);
}

void ToolCallParser::OpenValue(std::vector<ToolCallDelta>& calls, std::string_view opening) {
  EmitArguments(calls, (arguments_opened_ ? ", " : "{") + JsonQuote(key_) + ": " + std::string(opening));
  arguments_opened_ = true;
}

void ToolCallParser::StreamRawValue(std::vector<ToolCallDelta>& calls) {
  const auto last = std::find_if_not(value_.rbegin(), value_.rend(), IsAsciiBlank);
  if (last == value_.rend()) return;  // blanks only so far
  const size_t end = static_cast<size_t>(value_.rend() - last);
  if (!value_opened_) {
    value_emitted_ = static_cast<size_t>(std::find_if_not(value_.begin(), value_.end(), IsAsciiBlank) - value_.begin());
    OpenValue(calls, "");
    value_opened_ = true;
  }
  EmitArguments(calls, value_.substr(value_emitted_, end - value_emitted_));
  value_emitted_ = end;
}

void ToolCallParser::CloseValue(std::vector<ToolCallDelta>& calls) {
  if (value_is_string_) {
    EmitArguments(calls, "\"");
  } else if (value_streams_raw_) {
    StreamRawValue(calls);
    if (!value_opened_) OpenValue(calls, "\"\"");  // an empty value, which no constraint allows: as before
  } else {
    OpenValue(calls, ConvertValue(value_));
  }
  value_opened_ = false;
  value_emitted_ = 0;
}

bool ToolCallParser::Step(std::string& content, std::vector<ToolCallDelta>& calls, bool at_end) {
  switch (state_) {
    case State::kContent:
      return StepContent(content, at_end);
    case State::kName:
      return StepName(content, calls, at_end);
    case State::kAfterName:
    case State::kBeforeValue:
    case State::kAfterValue:
      return StepBetweenTags(calls, at_end);
    case State::kKey:
      return StepKey(calls, at_end);
    case State::kValue:
      return StepValue(calls, at_end);
  }
  return false;
}

bool ToolCallParser::StepContent(std::string& content, bool at_end) {
  const std::string_view buffer = buffer_;
  const TagHit hit = FindFirst(buffer, {kCallOpen});
  if (hit.position == std::string::npos) {
    const size_t keep = HoldFor({kCallOpen}, at_end);
    EmitContent(content, buffer.substr(0, buffer.size() - keep));
    Consume(buffer.size() - keep);
    return false;
  }
  EmitContent(content, buffer.substr(0, hit.position));
  blank_run_.clear();
  Consume(hit.position + hit.tag.size());
  state_ = State::kName;
  raw_call_ = kCallOpen;
  name_.clear();
  return true;
}

bool ToolCallParser::StepName(std::string& content, std::vector<ToolCallDelta>& calls, bool at_end) {
  // The name ends at the first '<': there it must be <arg_key> or </tool_call> (else this is no call). Deciding
  // at the first '<', not at the first tag, keeps the result independent of how the text is cut: a later
  // <tool_call> is never swallowed into a broken name.
  const std::string_view buffer = buffer_;
  const size_t angle = buffer.find('<');
  const std::string_view rest = angle == std::string::npos ? std::string_view() : buffer.substr(angle);
  const bool at_key = rest.substr(0, kKeyOpen.size()) == kKeyOpen;
  const bool at_close = rest.substr(0, kCallClose.size()) == kCallClose;
  const bool undecided = !at_end && angle != std::string::npos && !at_key && !at_close &&
                         ((rest.size() < kKeyOpen.size() && kKeyOpen.substr(0, rest.size()) == rest) ||
                          (rest.size() < kCallClose.size() && kCallClose.substr(0, rest.size()) == rest));
  const size_t take = angle == std::string::npos ? buffer.size() : angle;
  name_.append(buffer.substr(0, take));
  raw_call_.append(buffer.substr(0, take));
  Consume(take);
  const std::string_view name = Trim(name_);
  if (undecided || (angle == std::string::npos && name.size() <= kMaxNameBytes)) return false;
  if (name.size() > kMaxNameBytes || !(at_key || at_close) || !ValidName(name)) {
    // Not a call after all: its text is content, and scanning resumes where the name ended.
    EmitContent(content, raw_call_);
    raw_call_.clear();
    name_.clear();
    state_ = State::kContent;
    return true;
  }
  EmitName(calls);
  Consume(at_key ? kKeyOpen.size() : kCallClose.size());
  if (at_key) {
    key_.clear();
    state_ = State::kKey;
  } else {
    CloseCall(calls);
  }
  return true;
}

bool ToolCallParser::StepBetweenTags(std::vector<ToolCallDelta>& calls, bool at_end) {
  if (!name_emitted_) EmitName(calls);
  const std::string_view buffer = buffer_;
  const TagHit hit = state_ == State::kBeforeValue ? FindFirst(buffer, {kValueOpen, kKeyOpen, kCallClose})
                                                   : FindFirst(buffer, {kKeyOpen, kCallClose});
  if (hit.position == std::string::npos) {  // text between tags means nothing: dropped
    Consume(buffer.size() - HoldFor({kValueOpen, kKeyOpen, kCallClose}, at_end));
    return false;
  }
  Consume(hit.position + hit.tag.size());
  if (hit.tag == kCallClose) {
    CloseCall(calls);
  } else if (hit.tag == kKeyOpen) {
    key_.clear();
    state_ = State::kKey;
  } else {  // <arg_value>
    value_.clear();
    value_is_string_ = ValueIsString();
    value_streams_raw_ = !value_is_string_ && ValueStreamsRaw();
    value_opened_ = false;
    value_emitted_ = 0;
    if (value_is_string_) OpenValue(calls, "\"");
    state_ = State::kValue;
  }
  return true;
}

bool ToolCallParser::StepKey(std::vector<ToolCallDelta>& calls, bool at_end) {
  const std::string_view buffer = buffer_;
  const TagHit hit = FindFirst(buffer, {kKeyClose, kCallClose});
  if (hit.position == std::string::npos) {
    const size_t take = buffer.size() - HoldFor({kKeyClose, kCallClose}, at_end);
    key_.append(buffer.substr(0, take));
    Consume(take);
    return false;
  }
  key_.append(buffer.substr(0, hit.position));
  Consume(hit.position + hit.tag.size());
  key_ = std::string(Trim(key_));
  if (hit.tag == kCallClose) {
    CloseCall(calls);  // a key without a value is dropped
  } else {
    state_ = State::kBeforeValue;
  }
  return true;
}

bool ToolCallParser::StepValue(std::vector<ToolCallDelta>& calls, bool at_end) {
  const std::string_view buffer = buffer_;
  const TagHit hit = FindFirst(buffer, {kValueClose, kCallClose});
  const size_t take =
      hit.position != std::string::npos ? hit.position : buffer.size() - HoldFor({kValueClose, kCallClose}, at_end);
  if (value_is_string_) {
    EmitArguments(calls, JsonEscape(buffer.substr(0, take)));
  } else {
    value_.append(buffer.substr(0, take));
    if (value_streams_raw_) StreamRawValue(calls);
  }
  Consume(take);
  if (hit.position == std::string::npos) return false;
  Consume(hit.tag.size());
  CloseValue(calls);
  value_.clear();
  if (hit.tag == kCallClose) {
    CloseCall(calls);
  } else {
    state_ = State::kAfterValue;
  }
  return true;
}

void ToolCallParser::Push(std::string_view text, std::string& content, std::vector<ToolCallDelta>& calls) {
  buffer_.append(text);
  while (Step(content, calls, /*at_end=*/false)) {
  }
}

void ToolCallParser::Finish(std::string& content, std::vector<ToolCallDelta>& calls) {
  // Inside a key or a value, text that may start a closing tag is the model's unfinished tag, not data: dropped,
  // so no part of `</arg_value>` ever lands in a value.
  if (state_ == State::kValue) buffer_.resize(buffer_.size() - HoldBack(buffer_, {kValueClose, kCallClose}));
  if (state_ == State::kKey) buffer_.resize(buffer_.size() - HoldBack(buffer_, {kKeyClose, kCallClose}));
  while (Step(content, calls, /*at_end=*/true)) {
  }
  switch (state_) {
    case State::kContent:
      break;
    case State::kName:
      if (ValidName(Trim(name_))) {  // e.g. the output stopped right after the name
        TruncateCall(calls);
      } else {
        content.append(raw_call_);
      }
      break;
    default:
      TruncateCall(calls);
  }
  buffer_.clear();
  blank_run_.clear();
  raw_call_.clear();
  state_ = State::kContent;
}

}  // namespace glint
