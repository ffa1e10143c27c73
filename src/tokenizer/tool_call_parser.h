// Turns GLM's tool calls in a streamed output into JSON-argument tool calls, incrementally.
//
// GLM writes `<tool_call>NAME<arg_key>K1</arg_key><arg_value>V1</arg_value>...</tool_call>` (model doc §11), values as
// plain text for strings and as JSON for everything else (that is how its chat template renders past calls).
//
// The output is a sequence of ToolCallDelta, the one interface every API formats from (chat `tool_calls` deltas,
// Anthropic `tool_use` blocks with `input_json_delta`, Responses `function_call_arguments.delta`):
//   - a call's first delta has its `index` (0, 1, ... in the order written) and its `name`, sent once the name is
//     complete; its `arguments` may be empty;
//   - later deltas of the same index carry the next fragment of its JSON arguments, as the model writes them:
//     `{"K1": "` then the escaped text of a string value as it arrives; for a non-string value of a constrained
//     call (ToolParameterTypes::constrained_json_parameters: the grammar guarantees valid JSON) its text as it arrives;
//     for a non-string value of an unconstrained call, the value once complete (parsed as JSON when it parses,
//     else quoted as a string); `}` at </tool_call>;
//   - the call's last delta has `done` set. Concatenating a call's fragments gives its whole `arguments`: valid
//     JSON when the call was closed (a call with no arguments gives `{}`), or, when the output ended inside the call
//     (max_tokens, a stop string), `truncated` is set too and the arguments are exactly the text generated so far
//     (possibly "" or an unclosed prefix such as `{"a": 4.6`): never a made-up `{}`, and never part of a closing
//     tag inside a value.
// Calls are done in index order: a call is done before the next one starts.
//
// Text outside calls is content; whitespace between or after calls is dropped. A call whose name is empty, too
// long or has spaces or angle brackets is not a call: its text stays content. Like ReasoningParser, tags cut across
// pieces are held back; the result does not depend on the chunking.
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
  // The declared non-string parameters of functions whose calls the grammar constrains to their schema
  // (tool_choice required or named, strict with auto): their values are valid JSON of the schema's type by
  // construction, so they stream as written. function name → parameter names.
  std::map<std::string, std::set<std::string>> constrained_json_parameters;
};

struct ToolCallDelta {
  int index = 0;           // which call of this output (0, 1, ...)
  std::string name;        // the function name, on the call's first delta only
  std::string arguments;   // the next fragment of the call's JSON arguments (may be empty)
  bool done = false;       // the call's last delta
  bool truncated = false;  // with done: the output ended inside the call (its arguments are the text so far)
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
  // End of output: an unfinished call is done and truncated (its arguments are what was written, a held-back part
  // of a closing tag dropped); held-back content is emitted.
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
  // A raw-streamed value: emits its text up to its last non-blank byte (blanks wait for what follows).
  void StreamRawValue(std::vector<ToolCallDelta>& calls);
  void OpenValue(std::vector<ToolCallDelta>& calls, std::string_view opening);  // `{"K": ` or `, "K": ` + opening
  void EmitName(std::vector<ToolCallDelta>& calls);
  void EmitArguments(std::vector<ToolCallDelta>& calls, std::string fragment);
  void CloseCall(std::vector<ToolCallDelta>& calls);
  // The output ended inside the current call: what was written of it, then its done + truncated delta.
  void TruncateCall(std::vector<ToolCallDelta>& calls);
  void MarkDone(std::vector<ToolCallDelta>& calls, bool truncated);
  void ResetCall();
  bool ValueIsString() const;
  bool ValueStreamsRaw() const;  // a non-string value of a constrained call
  std::string ConvertValue(std::string_view raw) const;

  const ToolParameterTypes* types_;
  State state_ = State::kContent;
  std::string buffer_;    // input not consumed yet
  std::string raw_call_;  // kName: the text of the call so far, in case it turns out not to be a call
  std::string name_;      // the current call's function name
  std::string key_;       // the current argument name
  std::string value_;     // kValue, non-string: the value text so far
  bool value_is_string_ = false;
  bool value_streams_raw_ = false;  // non-string value of a constrained call: emitted as it arrives
  bool value_opened_ = false;       // raw: `"K": ` emitted (at the value's first non-blank byte)
  size_t value_emitted_ = 0;        // raw: bytes of value_ emitted
  bool arguments_opened_ = false;   // "{" emitted for the current call
  bool name_emitted_ = false;
  std::string blank_run_;  // whitespace held after a call: emitted only if content follows
  int num_calls_ = 0;
};

}  // namespace glint
