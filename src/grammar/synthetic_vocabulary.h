// A deterministic vocabulary shaped like a byte-level BPE tokenizer's, for the mask benchmark (`glint
// bench-grammar`) and tests when the released tokenizer.json is not at hand: the 256 bytes, JSON punctuation
// merges (`{"`, `":`, `", "`, `"}`, …), numbers, space-prefixed and bare pseudo-words in several casings, CJK
// characters and pairs, Cyrillic and accented Latin words, emoji, pieces of UTF-8 characters (a lead byte with part
// of its continuation), whitespace runs, and GLM's special tokens at the end (three of them end ids).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace glint::grammar {

struct SyntheticVocabulary {
  std::vector<std::string> token_bytes;  // [size]
  std::vector<bool> special;             // [size]
  std::vector<int32_t> end_ids;
};

// `size` tokens (at least 512); the same size gives the same vocabulary on every machine.
SyntheticVocabulary MakeSyntheticVocabulary(int64_t size);

inline constexpr int64_t kGlmVocabularySize = 154880;  // GLM-5.3-Flash's vocab_size

}  // namespace glint::grammar
