// Token-level constraint matching for structured output (docs/structured-output.md).
//
// The matcher is a byte-level pushdown automaton run nondeterministically: its state is a set of stacks of grammar
// positions (each position is the next element to match in an alternative), the state llama.cpp's GBNF sampler
// also keeps. A byte advances every stack whose top element accepts it and expands rule references at the top
// until each top is a byte range (or the stack is empty: the text so far is a complete sentence). Why this and
// not Earley: each step costs the number of live stacks, which is 1 to 3 for JSON schemas, regexes and choices
// (they are nearly deterministic), the state is a small canonical vector that hashes well (the mask cache's key),
// and copying it is all a fork (n > 1) or a rollback needs. Earley's chart grows with the text; it is kept as the
// independent reference (reference.h) the tests compare against.
//
// Token masks: a token is allowed when feeding its bytes keeps the state non-empty. The fast path walks a trie of
// the vocabulary's byte strings in preorder, advancing the state once per trie node and skipping a whole subtree
// as soon as a prefix dies, and caches the result per state (the adaptive mask cache: a state recurs for every
// character of a string, digit of a number, repeated structure, and across requests of the same schema).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace glint::grammar {

// The tokenizer's vocabulary as byte strings, and a trie over the tokens that are text (not special).
class TokenVocabulary {
 public:
  // token_bytes: [V] each id's raw bytes ("" for gaps: never allowed); special: [V] added special tokens (allowed
  // only by grammars that allow special tokens, checked one by one); end_ids: the ids that end generation, allowed
  // exactly when the text is complete.
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<bool> special, const std::vector<int32_t>& end_ids);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  std::string_view bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_end(int32_t id) const { return is_end_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& end_ids() const { return end_ids_; }
  const std::vector<int32_t>& special_ids() const { return special_ids_; }
  int64_t trie_nodes() const { return static_cast<int64_t>(nodes_.size()); }

  // Preorder trie: node 0 is the root (depth 0); node i's subtree is [i, subtree_end). Tokens ending at a node are
  // token_ids_[first_token, first_token + num_tokens).
  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;
    int32_t subtree_end = 0;
    int32_t first_token = 0;
    int32_t num_tokens = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  std::span<const int32_t> NodeTokens(const Node& node) const {
    return {token_ids_.data() + node.first_token, static_cast<size_t>(node.num_tokens)};
  }
  int max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> is_end_;
  std::vector<int32_t> end_ids_;
  std::vector<int32_t> special_ids_;
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  int max_depth_ = 0;
};

// A set of allowed token ids, as a bitset: bit (id % 64) of word id / 64.
struct TokenMask {
  std::vector<uint64_t> words;
  void Reset(int64_t vocab) { words.assign(static_cast<size_t>((vocab + 63) / 64), 0); }
  void Set(int32_t id) { words[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
  bool Test(int32_t id) const { return (words[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
  int64_t Count() const;
};

// A state of the automaton: stacks laid out flat as [length, positions...] one after another, in a canonical
// order (sorted) so that equal states compare and hash equal.
using State = std::vector<int32_t>;

// A grammar flattened for matching, immutable after construction except for its mask cache. Shared by every
// request that uses the same schema (the server caches them by hash).
class CompiledGrammar {
 public:
  static Result<std::shared_ptr<CompiledGrammar>> Compile(const Grammar& grammar, bool allow_special_tokens = false);

  const State& initial_state() const { return initial_; }
  bool allow_special_tokens() const { return allow_special_tokens_; }
  // Advances `from` by one byte into `to` (cleared first); false (and `to` empty) when no stack accepts it, or
  // when the state would hold more than kMaxStacks stacks (an ambiguity the matcher refuses to track; `overflow`,
  // when given, is set then).
  bool AdvanceByte(const State& from, uint8_t byte, State& to, bool* overflow = nullptr) const;
  bool AdvanceBytes(State& state, std::string_view bytes) const;
  static bool IsAccepting(const State& state);  // some stack is empty: the text is a complete sentence
  static bool CanContinue(const State& state);  // some stack is not empty: more bytes may follow
  static constexpr int64_t kMaxStacks = 256;
  static constexpr int64_t kMaxStackDepth = 4096;  // positions in one stack: nesting beyond it is refused
  // States Compile explores (breadth first, every byte from each) looking for one whose next byte would exceed
  // kMaxStacks: a grammar such as ^((a*){0,300})$ does after its first byte, and would otherwise end a request
  // mid-output; found here, it is refused at compile time naming the limit.
  static constexpr size_t kAmbiguityProbeStates = 256;

  // Masks: the fast one (trie walk, cached per state) and the reference (every token fed byte by byte).
  void FillMask(const TokenVocabulary& vocabulary, const State& state, TokenMask& mask) const;
  void FillMaskReference(const TokenVocabulary& vocabulary, const State& state, TokenMask& mask) const;
  // The reference verdict for one token, the reference mask's bit: its bytes fed one by one from `state` (an end
  // token: the state accepts; a special token: only where the grammar allows them).
  bool AllowsReference(const TokenVocabulary& vocabulary, const State& state, int32_t id) const;
  // The uncached trie walk (for the benchmark and tests). The first `memo_states` states it reaches get a
  // transition table (1 KiB each); tests pass small values to exercise the walk beyond the tables.
  static constexpr size_t kWalkMemoStates = 4096;
  void ComputeMask(const TokenVocabulary& vocabulary, const State& state, TokenMask& mask,
                   size_t memo_states = kWalkMemoStates) const;
  struct CacheStats {
    int64_t hits = 0, misses = 0, entries = 0, bytes = 0;
  };
  CacheStats cache_stats() const;

 private:
  CompiledGrammar() = default;
  bool IsEnd(int32_t position) const { return elements_[static_cast<size_t>(position)].rule == kEndMarker; }
  // Pushes every expansion of `stack` (rule references at the top replaced by their alternatives) into `out`.
  bool Expand(std::vector<int32_t>& stack, std::vector<std::vector<int32_t>>& out, int depth) const;
  void Canonicalise(std::vector<std::vector<int32_t>>& stacks, State& state) const;
  // The probe above: an error naming the limit and the output that reaches it.
  Status ProbeAmbiguity() const;
  // The allowed special and end tokens of `state` (not in the trie).
  void AddNonTrieTokens(const TokenVocabulary& vocabulary, const State& state, TokenMask& mask) const;

  static constexpr int32_t kEndMarker = -2;
  std::vector<Element> elements_;                   // every alternative's elements, each followed by an end marker
  std::vector<std::vector<int32_t>> alternatives_;  // [rules] start positions
  State initial_;
  bool allow_special_tokens_ = false;

  // The adaptive mask cache, per vocabulary: state → allowed ids, stored as the shorter of the allowed and the
  // disallowed lists (most states allow a handful of tokens or nearly all of them).
  struct CachedMask {
    bool inverted = false;  // ids lists the disallowed tokens
    std::vector<int32_t> ids;
  };
  struct StateHash {
    size_t operator()(const State& state) const;
  };
  struct Cache {
    std::unordered_map<State, CachedMask, StateHash> masks;
    int64_t bytes = 0;
  };
  static constexpr int64_t kMaxCacheBytes = int64_t{64} << 20;  // per grammar and vocabulary; cleared when full
  mutable std::mutex cache_mutex_;
  mutable std::map<const TokenVocabulary*, Cache> caches_;
  mutable CacheStats stats_;
};

// One sequence's matcher: the compiled grammar, the vocabulary and the current state.
class Matcher {
 public:
  Matcher(std::shared_ptr<const CompiledGrammar> grammar, const TokenVocabulary* vocabulary)
      : grammar_(std::move(grammar)), vocabulary_(vocabulary), state_(grammar_->initial_state()) {}

  // Accepts the token (its bytes; an end id when the text is complete ends the matcher, and once ended only end
  // ids are accepted). False if the token is not allowed: the state is then unchanged.
  bool Advance(int32_t token);
  // The tokens Advance accepts now (fast path: trie walk, cached per state).
  void FillMask(TokenMask& mask) const;
  bool IsAccepting() const { return CompiledGrammar::IsAccepting(state_); }
  bool CanContinue() const { return !ended_ && CompiledGrammar::CanContinue(state_); }
  bool ended() const { return ended_; }
  const State& state() const { return state_; }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  const TokenVocabulary* vocabulary_;
  State state_;
  bool ended_ = false;
};

}  // namespace glint::grammar
