// A small deterministic byte-level BPE trainer that writes a standard tokenizer.json (the layout Tokenizer loads:
// BPE model, Sequence[Split(GLM regex, Isolated), ByteLevel(use_regex false)], ByteLevel decoder, added_tokens).
//
// Used by `glint make-tiny` to give tiny checkpoints a real tokenizer. Algorithm (Sennrich et al. 2016, on bytes):
// pre-tokenize the corpus, count words, start every word as its bytes (byte b has id b), then repeatedly merge the
// most frequent adjacent pair (ties: smallest left id, then smallest right id) into a new token, until the
// vocabulary has `vocab_size` tokens or no pair occurs `min_frequency` times. A merge whose bytes already name a
// token reuses that id (as HF's trainer does). Each step recounts pairs: O(merges × corpus symbols), meant for
// corpora of kilobytes to a few megabytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace glint {

struct BpeTrainerOptions {
  int64_t vocab_size = 0;     // BPE tokens (256 bytes + merges), ids [0, vocab_size); at least 256
  int64_t min_frequency = 2;  // a pair must occur this often (counted over word occurrences) to be merged
  // Added tokens with fixed ids outside [0, vocab_size), e.g. GLM's specials near the end of the embedding.
  std::vector<AddedToken> special_tokens;
  std::string pre_tokenizer_regex = std::string(kGlm4PreTokenizerRegex);
};

struct BpeTrainingResult {
  std::string tokenizer_json;  // the file's text
  int64_t num_merges = 0;      // may be below vocab_size - 256 when the corpus runs out of repeated pairs
  int64_t num_tokens = 0;      // distinct BPE tokens (256 + new tokens)
};

Result<BpeTrainingResult> TrainByteLevelBpe(std::string_view corpus, const BpeTrainerOptions& options);

}  // namespace glint
