// The merge loop of byte-level BPE (Sennrich et al. 2016; GPT-2's byte-level variant).
//
// A word (one pre-token, raw bytes) starts as one symbol per byte. Repeatedly, the adjacent pair whose merge has the
// lowest rank (its index in tokenizer.json's `merges`) is replaced by the merged token; among equal ranks the
// leftmost pair goes first, which is what HF `tokenizers` does (`Word::merge_all`: a heap ordered by rank, then
// position). Stops when no adjacent pair has a merge. A heap of candidate pairs with lazy invalidation makes a word
// of n bytes cost O(n log n), so long words (a 100 KB run of spaces) stay cheap.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace glint {

class BpeMerger {
 public:
  struct Merge {
    int32_t rank;    // priority: lower merges first
    int32_t merged;  // id of the token that replaces the pair
  };

  // `byte_tokens[b]`: id of the one-byte token b (all 256 must exist for byte-level BPE).
  explicit BpeMerger(const std::array<int32_t, 256>& byte_tokens) : byte_tokens_(byte_tokens) {}
  BpeMerger() { byte_tokens_.fill(-1); }

  // Returns false when the pair already has a merge (the first one is kept).
  bool AddMerge(int32_t left, int32_t right, Merge merge);
  const Merge* FindMerge(int32_t left, int32_t right) const;
  size_t num_merges() const { return merges_.size(); }

  // Appends the token ids of `word` (non-empty raw bytes) to `out`.
  void Encode(std::string_view word, std::vector<int32_t>& out) const;

 private:
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::array<int32_t, 256> byte_tokens_;
  std::unordered_map<uint64_t, Merge> merges_;  // PairKey(left, right) → merge
};

}  // namespace glint
