// Turns GLM's tool calls in a streamed output into OpenAI tool calls, incrementally.
//
// GLM writes `<tool_call>NAME<arg_key>K1</arg_key><arg_value>V1</arg_value>...</tool_call>` (model doc §11), values as
// plain text for strings and as JSON for everything else (that is how its chat template renders past calls). The
// parser emits, as soon as each is known: the call's name (once it is complete), then the JSON arguments string in
// fragments: `{"K1": V1` when a non-string value is complete, `{"K1": "` and then the string's escaped text as it
// arrives for a string value, `}` at </tool_call>. Concatenating a call's fragments gives its `arguments` (valid
// JSON even when the output stops inside a call: Finish closes it). Text outside calls is content; whitespace
// between or after calls is dropped.
//
// A value is a string when the request's tool schema says its parameter is a "string"; otherwise it is parsed as
// JSON if it parses, else kept as a string (so an unknown tool still gets numbers and objects right).
// A call whose name is empty, too long or has spaces or angle brackets is not a call: its text stays content.
// Like ReasoningParser, tags cut across pieces are held back; the result does not depend on the chunking.
#pragma once

#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace glint {

// From the request's `tools`: for each function, the parameters whose schema type is "string".
struct ToolParameterTypes {
  std::map<std::string, std::set<std::string>> string_parameters;  // function name → parameter names
};

struct ToolCallDelta {
  int index = 0;          // which call of this output (0, 1, ...)
  std::string name;       // the function name, on the call's first delta only
  std::string arguments;  // the next fragment of the call's JSON arguments (may be empty on the first delta)
};

class ToolCallParser {
 public:
  // `types` may be null (every value is parsed as JSON when it can be). It must outlive the parser.
  explicit ToolCallParser(const ToolParameterTypes* types = nullptr) : types_(types) {}

  // For tool_choice "required" or a named function, the prompt already ends with `<tool_call>` (name empty) or
  // `<tool_call>NAME` (the name is emitted with the first delta): the output starts inside that call.
  void StartInsideCall(std::string_view forced_name);

  // Appends the content and tool-call deltas that `text` completes.
  void Push(std::string_view text, std::string& content, std::vector<ToolCallDelta>& calls);
  // End of output: an unfinished call is closed (its arguments stay valid JSON); held-back text is emitted.
  void Finish(std::string& content, std::vector<ToolCallDelta>& calls);

  int num_calls() const { return num_calls_; }  // calls started (a call counts once its name was emitted)

 private:
  enum class State {
    kContent,      // outside calls, looking for <tool_call>
    kName,         // after <tool_call>, reading the name
    kAfterName,    // name known; before <arg_key> or </tool_call> (other text is ignored)
    kKey,          // inside <arg_key>
    kBeforeValue,  // after </arg_key>, before <arg_value>
    kValue,        // inside <arg_value>
    kAfterValue,   // after </arg_value>, before the next <arg_key> or </tool_call>
  };

  // One step on buffer_, by state; returns false when it needs more text. `at_end`: no more text will come, so
  // nothing is held back in case it starts a tag.
  bool Step(std::string& content, std::vector<ToolCallDelta>& calls, bool at_end);
  bool StepContent(std::string& content, bool at_end);
  bool StepName(std::string& content, std::vector<ToolCallDelta>& calls, bool at_end);
  bool StepBetweenTags(std::vector<ToolCallDelta>& calls, bool at_end);  // kAfterName, kBeforeValue, kAfterValue
  bool StepKey(std::vector<ToolCallDelta>& calls, bool at_end);
  bool StepValue(std::vector<ToolCallDelta>& calls, bool at_end);
  // Content outside calls (whitespace after a call is held in blank_run_ until other content follows).
  void EmitContent(std::string& content, std::string_view text);
  void Consume(size_t bytes);  // drops the first `bytes` of buffer_
  // How many bytes at the end of buffer_ could start one of `tags` (0 at the end of the output).
  size_t HoldFor(std::initializer_list<std::string_view> tags, bool at_end) const;
  // Ends the current argument value: the closing quote of a string, or the converted value of another type.
  void CloseValue(std::vector<ToolCallDelta>& calls);
  void EmitName(std::vector<ToolCallDelta>& calls);
  void EmitArguments(std::vector<ToolCallDelta>& calls, std::string fragment);
  void CloseCall(std::vector<ToolCallDelta>& calls);
  bool ValueIsString() const;
  std::string ConvertValue(std::string_view raw) const;

  const ToolParameterTypes* types_;
  State state_ = State::kContent;
  std::string buffer_;    // input not consumed yet
  std::string raw_call_;  // kName: the text of the call so far, in case it turns out not to be a call
  std::string name_;      // the current call's function name
  std::string key_;       // the current argument name
  std::string value_;     // kValue, non-string: the value text so far
  bool value_is_string_ = false;
  bool arguments_opened_ = false;  // "{" emitted for the current call
  bool name_emitted_ = false;
  std::string blank_run_;  // whitespace held after a call: emitted only if content follows
  int num_calls_ = 0;
};

}  // namespace glint
