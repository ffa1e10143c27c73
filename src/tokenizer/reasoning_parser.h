// Splits a model's streamed output into reasoning (between <think> and </think>) and content, the way GLM
// emits it: the generation prompt ends with `<|assistant|><think>`, so the output starts inside the reasoning and
// `</think>` ends it. Text arrives in arbitrary pieces (a tag can be cut anywhere); a piece that might be the start
// of a tag is held back until the next piece decides it. The concatenation of everything emitted is the input with
// the tags removed, whatever the chunking (tested at every split point).
#pragma once

#include <string>
#include <string_view>

namespace glint {

// The length of the longest suffix of `text` that is a proper prefix of `tag` (0 if none): how much to hold back.
size_t PartialTagLength(std::string_view text, std::string_view tag);

class ReasoningParser {
 public:
  enum class Start {
    kReasoning,  // the prompt opened <think>: output is reasoning until </think>
    kContent,    // the prompt closed thinking (or has none): output is content, except that a <think> at its very
                 // start (after whitespace) opens reasoning
  };
  explicit ReasoningParser(Start start) : state_(start == Start::kReasoning ? State::kReasoning : State::kMaybeOpen) {}

  // Appends the reasoning and content that `text` completes.
  void Push(std::string_view text, std::string& reasoning, std::string& content);
  // End of output: whatever was held back is emitted as what it would have been.
  void Finish(std::string& reasoning, std::string& content);

  bool in_reasoning() const { return state_ == State::kReasoning; }

 private:
  enum class State { kMaybeOpen, kReasoning, kContent };
  State state_;
  std::string pending_;  // held back: a possible tag start (and leading whitespace in kMaybeOpen)
};

}  // namespace glint
