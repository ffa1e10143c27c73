// Pre-tokenization: splitting text into the "words" that BPE merges within, with a PCRE2 regex.
//
// Matching uses PCRE2 with UTF (the subject is UTF-8), UCP (\s \d \w and \p{..} follow Unicode properties, as in
// the Oniguruma engine HF `tokenizers` uses) and MATCH_INVALID_UTF: ill-formed UTF-8 in the subject never
// matches any pattern item and is never an error, so arbitrary bytes can be split. Ill-formed bytes therefore
// land in the gaps between matches, and become pieces of their own (see SplitRegex::Split). Patterns are compiled
// once, JIT-compiled when the PCRE2 build has a JIT, and shared read-only between threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint {

// GLM-4's pre-tokenizer (llama.cpp `LLAMA_VOCAB_PRE_TYPE_CHATGLM4`; model doc §11): English contractions, letter
// runs with at most one leading non-letter/non-digit (not a newline), digits in groups of at most 3, punctuation
// runs with an optional leading space and trailing newlines, newline runs with their leading whitespace,
// whitespace not followed by a non-space, and any other whitespace. GLM's tokenizer.json writes the same regex
// (case-insensitive contractions spelled with `(?i:...)`).
inline constexpr std::string_view kGlm4PreTokenizerRegex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's pre-tokenizer: what HF's `ByteLevel` pre-tokenizer applies itself when `use_regex` is true.
inline constexpr std::string_view kGpt2PreTokenizerRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// What happens to the text a pattern matches (HF `SplitDelimiterBehavior`; only these two are implemented).
enum class SplitBehavior {
  kIsolated,  // every match is a piece, and so is every non-empty stretch between matches
  kRemoved,   // matches are dropped; stretches between them are pieces
};

class SplitRegex {
 public:
  // `literal`: the pattern is a plain string (tokenizer.json `{"String": ...}`), not a regex.
  static Result<SplitRegex> Compile(std::string_view pattern, bool literal = false);

  // Appends the pieces of `text`, in order, as views into `text`. Their concatenation is `text` for kIsolated.
  // Fails only when PCRE2 gives up on a match (match or heap limit: a pathological pattern from a file).
  Status Split(std::string_view text, SplitBehavior behavior, std::vector<std::string_view>& pieces) const;

  const std::string& pattern() const;
  bool jit() const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace glint
