#include "grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <bitset>
#include <deque>
#include <numeric>
#include <set>

namespace glint::grammar {
namespace {

// Appends the stack [stack] to the flat state unless a scan finds it there already. The scan stops once the state
// holds kScannedStacks stacks: past that, repeats are appended and SortUniqueStacks removes them, since a scan per
// append is quadratic in the stacks (256 × 256 stack compares at the limit). Below it the scan is cheaper than
// sorting repeats out (small states are the common case: a JSON schema's hold a few stacks).
constexpr int64_t kScannedStacks = 16;
void AddStack(const std::vector<int32_t>& stack, State& state, int64_t& count) {
  if (count <= kScannedStacks) {
    for (size_t at = 0; at < state.size(); at += static_cast<size_t>(state[at]) + 1) {
      const size_t length = static_cast<size_t>(state[at]);
      if (length == stack.size() && std::equal(stack.begin(), stack.end(), state.begin() + at + 1)) return;
    }
  }
  state.push_back(static_cast<int32_t>(stack.size()));
  state.insert(state.end(), stack.begin(), stack.end());
  ++count;
}

// FNV-1a over the state's values (the mask cache's and the trie walk's key).
size_t HashState(const State& state) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ state.size();
  for (int32_t v : state) h = (h ^ static_cast<uint32_t>(v)) * 0x100000001B3ULL;
  return static_cast<size_t>(h ^ (h >> 29));
}

// Sorts the stacks of a flat state and drops repeats (the canonical form, so equal sets are equal vectors);
// `count` becomes the number of distinct stacks. O(n log n) stack compares for n stacks.
void SortUniqueStacks(State& state, int64_t& count) {
  if (count < 2) return;
  std::vector<std::pair<size_t, size_t>> spans;  // (offset of the first position, length)
  spans.reserve(static_cast<size_t>(count));
  for (size_t at = 0; at < state.size(); at += static_cast<size_t>(state[at]) + 1) {
    spans.emplace_back(at + 1, static_cast<size_t>(state[at]));
  }
  const auto begin = [&](const std::pair<size_t, size_t>& span) { return state.begin() + span.first; };
  const auto end = [&](const std::pair<size_t, size_t>& span) { return state.begin() + span.first + span.second; };
  std::sort(spans.begin(), spans.end(), [&](const auto& a, const auto& b) {
    return std::lexicographical_compare(begin(a), end(a), begin(b), end(b));
  });
  spans.erase(std::unique(spans.begin(), spans.end(),
                          [&](const auto& a, const auto& b) { return std::equal(begin(a), end(a), begin(b), end(b)); }),
              spans.end());
  State sorted;
  sorted.reserve(state.size());
  for (const auto& span : spans) {
    sorted.push_back(static_cast<int32_t>(span.second));
    sorted.insert(sorted.end(), begin(span), end(span));
  }
  state.swap(sorted);
  count = static_cast<int64_t>(spans.size());
}

}  // namespace

int64_t TokenMask::Count() const {
  int64_t count = 0;
  for (uint64_t word : words) count += std::popcount(word);
  return count;
}

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, std::vector<bool> special,
                                 const std::vector<int32_t>& end_ids)
    : bytes_(std::move(token_bytes)), is_end_(bytes_.size(), false) {
  special.resize(bytes_.size(), false);
  for (int32_t id : end_ids) {
    if (id >= 0 && id < size() && !is_end_[static_cast<size_t>(id)]) {
      is_end_[static_cast<size_t>(id)] = true;
      end_ids_.push_back(id);
    }
  }
  std::vector<int32_t> text_ids;
  for (int32_t id = 0; id < size(); ++id) {
    if (is_end_[static_cast<size_t>(id)] || bytes_[static_cast<size_t>(id)].empty()) continue;
    (special[static_cast<size_t>(id)] ? special_ids_ : text_ids).push_back(id);
  }
  std::stable_sort(text_ids.begin(), text_ids.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
  // Preorder build: walk the sorted byte strings keeping the path of open nodes; a node's subtree ends when a later
  // string leaves its prefix.
  nodes_.push_back({0, 0, 0, 0, 0});
  std::vector<int32_t> path = {0};  // path[d] = node at depth d of the current prefix
  std::string_view previous;
  for (int32_t id : text_ids) {
    const std::string_view text = bytes(id);
    size_t common = 0;
    while (common < previous.size() && common < text.size() && previous[common] == text[common]) ++common;
    while (path.size() > common + 1) {
      nodes_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < text.size(); ++d) {
      const uint16_t depth = static_cast<uint16_t>(std::min<size_t>(d + 1, UINT16_MAX));
      nodes_.push_back({static_cast<uint8_t>(text[d]), depth, 0, static_cast<int32_t>(token_ids_.size()), 0});
      path.push_back(static_cast<int32_t>(nodes_.size() - 1));
    }
    Node& last = nodes_[static_cast<size_t>(path.back())];
    if (last.num_tokens == 0) last.first_token = static_cast<int32_t>(token_ids_.size());
    token_ids_.push_back(id);  // equal strings are adjacent in the sorted order, so a node's ids are contiguous
    ++last.num_tokens;
    max_depth_ = std::max(max_depth_, static_cast<int>(text.size()));
    previous = text;
  }
  while (!path.empty()) {
    nodes_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(nodes_.size());
    path.pop_back();
  }
}

Result<std::shared_ptr<CompiledGrammar>> CompiledGrammar::Compile(const Grammar& grammar, bool allow_special_tokens) {
  if (Status status = grammar.Validate(); !status.ok()) return status;
  std::shared_ptr<CompiledGrammar> compiled(new CompiledGrammar());
  compiled->allow_special_tokens_ = allow_special_tokens;
  const std::vector<Rule>& rules = grammar.rules();
  compiled->alternatives_.resize(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    for (const Sequence& sequence : rules[r].alternatives) {
      compiled->alternatives_[r].push_back(static_cast<int32_t>(compiled->elements_.size()));
      compiled->elements_.insert(compiled->elements_.end(), sequence.begin(), sequence.end());
      compiled->elements_.push_back({Element::Kind::kRule, 0, 0, kEndMarker});
    }
  }
  // The initial state: the root's expansions (a root element followed by an end marker, never matched itself).
  compiled->elements_.push_back(Element::Rule(grammar.root()));
  compiled->elements_.push_back({Element::Kind::kRule, 0, 0, kEndMarker});
  std::vector<int32_t> stack = {static_cast<int32_t>(compiled->elements_.size() - 2)};
  std::vector<std::vector<int32_t>> stacks;
  if (!compiled->Expand(stack, stacks, 0)) {
    return InvalidArgument("the grammar is too ambiguous or too deeply nested at its start (more than ", kMaxStacks,
                           " parses or ", kMaxStackDepth, " nested rules)");
  }
  compiled->Canonicalise(stacks, compiled->initial_);
  GLINT_RETURN_IF_ERROR(compiled->ProbeAmbiguity());
  return compiled;
}

Status CompiledGrammar::ProbeAmbiguity() const {
  struct Reached {
    State state;
    std::string text;  // the bytes that lead here (for the message)
  };
  std::deque<Reached> queue = {{initial_, ""}};
  std::set<State> seen = {initial_};
  State next;
  while (!queue.empty() && seen.size() < kAmbiguityProbeStates) {
    const Reached from = std::move(queue.front());
    queue.pop_front();
    // Bytes that fall in the same byte ranges of every stack top lead to the same state: one byte of each class.
    std::bitset<257> class_starts;
    class_starts.set(0);
    for (size_t at = 0; at < from.state.size(); at += static_cast<size_t>(from.state[at]) + 1) {
      const size_t length = static_cast<size_t>(from.state[at]);
      if (length == 0) continue;
      const Element& top = elements_[static_cast<size_t>(from.state[at + length])];
      class_starts.set(top.lo);
      class_starts.set(static_cast<size_t>(top.hi) + 1);
    }
    for (int byte = 0; byte < 256; ++byte) {
      if (!class_starts.test(static_cast<size_t>(byte))) continue;
      bool overflow = false;
      if (!AdvanceByte(from.state, static_cast<uint8_t>(byte), next, &overflow)) {
        if (!overflow) continue;
        std::string text = from.text + static_cast<char>(byte);
        return InvalidArgument("the grammar is too ambiguous to follow: after the output '", text.substr(0, 64),
                               "' it would track more than ", kMaxStacks, " parses at once or nest more than ",
                               kMaxStackDepth,
                               " rules (the matcher's limits); simplify the pattern or schema (nested or "
                               "repeated optional parts, e.g. (a*){0,300}, multiply the parses)");
      }
      if (seen.size() < kAmbiguityProbeStates && seen.insert(next).second) {
        queue.push_back({next, from.text + static_cast<char>(byte)});
      }
    }
  }
  return Status::Ok();
}

bool CompiledGrammar::Expand(std::vector<int32_t>& stack, std::vector<std::vector<int32_t>>& out, int depth) const {
  if (static_cast<int64_t>(stack.size()) > kMaxStackDepth || depth > kMaxStackDepth) return false;
  if (stack.empty() || elements_[static_cast<size_t>(stack.back())].kind == Element::Kind::kBytes) {
    if (std::find(out.begin(), out.end(), stack) == out.end()) out.push_back(stack);
    return static_cast<int64_t>(out.size()) <= kMaxStacks;
  }
  const int32_t position = stack.back();
  const int32_t rule = elements_[static_cast<size_t>(position)].rule;
  stack.pop_back();
  const bool has_rest = !IsEnd(position + 1);  // a reference in tail position leaves no frame (a tail call)
  if (has_rest) stack.push_back(position + 1);
  bool ok = true;
  for (int32_t start : alternatives_[static_cast<size_t>(rule)]) {
    if (IsEnd(start)) {
      ok = Expand(stack, out, depth + 1);
    } else {
      stack.push_back(start);
      ok = Expand(stack, out, depth + 1);
      stack.pop_back();
    }
    if (!ok) break;
  }
  if (has_rest) stack.pop_back();
  stack.push_back(position);
  return ok;
}

void CompiledGrammar::Canonicalise(std::vector<std::vector<int32_t>>& stacks, State& state) const {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  state.clear();
  for (const auto& stack : stacks) {
    state.push_back(static_cast<int32_t>(stack.size()));
    state.insert(state.end(), stack.begin(), stack.end());
  }
}

bool CompiledGrammar::AdvanceByte(const State& from, uint8_t byte, State& to, bool* overflow) const {
  to.clear();
  thread_local std::vector<int32_t> stack;
  thread_local std::vector<std::vector<int32_t>> expanded;
  int64_t count = 0;
  for (size_t at = 0; at < from.size(); at += static_cast<size_t>(from[at]) + 1) {
    const size_t length = static_cast<size_t>(from[at]);
    if (length == 0) continue;
    const int32_t top = from[at + length];
    const Element& e = elements_[static_cast<size_t>(top)];
    if (e.kind != Element::Kind::kBytes || byte < e.lo || byte > e.hi) continue;
    stack.assign(from.begin() + at + 1, from.begin() + at + length);
    if (!IsEnd(top + 1)) {
      stack.push_back(top + 1);
      if (elements_[static_cast<size_t>(top) + 1].kind == Element::Kind::kBytes) {
        AddStack(stack, to, count);  // the common case: the next element is a byte range, nothing to expand
        continue;
      }
    } else if (stack.empty() || elements_[static_cast<size_t>(stack.back())].kind == Element::Kind::kBytes) {
      AddStack(stack, to, count);
      continue;
    }
    expanded.clear();
    if (!Expand(stack, expanded, 0)) {
      to.clear();
      if (overflow != nullptr) *overflow = true;
      return false;
    }
    for (const auto& s : expanded) AddStack(s, to, count);
    if (count > kMaxStacks) SortUniqueStacks(to, count);  // only distinct stacks count against the limit
    if (count > kMaxStacks) {
      to.clear();
      if (overflow != nullptr) *overflow = true;
      return false;
    }
  }
  SortUniqueStacks(to, count);
  return count > 0;
}

bool CompiledGrammar::AdvanceBytes(State& state, std::string_view bytes) const {
  State next;
  for (char c : bytes) {
    if (!AdvanceByte(state, static_cast<uint8_t>(c), next)) return false;
    state.swap(next);
  }
  return true;
}

bool CompiledGrammar::IsAccepting(const State& state) {
  for (size_t at = 0; at < state.size(); at += static_cast<size_t>(state[at]) + 1) {
    if (state[at] == 0) return true;
  }
  return false;
}

bool CompiledGrammar::CanContinue(const State& state) {
  for (size_t at = 0; at < state.size(); at += static_cast<size_t>(state[at]) + 1) {
    if (state[at] != 0) return true;
  }
  return false;
}

void CompiledGrammar::AddNonTrieTokens(const TokenVocabulary& vocabulary, const State& state, TokenMask& mask) const {
  if (IsAccepting(state)) {
    for (int32_t id : vocabulary.end_ids()) mask.Set(id);
  }
  if (!allow_special_tokens_) return;
  State copy;
  for (int32_t id : vocabulary.special_ids()) {
    copy = state;
    if (AdvanceBytes(copy, vocabulary.bytes(id))) mask.Set(id);
  }
}

namespace {

// The states one trie walk reaches, interned, with their byte transitions memoised (kUnknown until first taken,
// kDead when no stack accepts the byte). Inside a string or a repetition, nearly every byte leads back to one of a
// few states, so most trie nodes cost a table lookup instead of an AdvanceByte. Only the first `memo_states`
// states get a table (256 ids each, 1 KiB): beyond that a transition is computed every time, so memory stays
// bounded.
class WalkStates {
 public:
  static constexpr int32_t kUnknown = -2, kDead = -1;

  void Reset(size_t memo_states) {
    ids_.clear();
    states_.clear();
    transitions_.clear();
    memo_states_ = memo_states;
  }
  int32_t Intern(State&& state) {
    const auto [it, added] = ids_.try_emplace(state, static_cast<int32_t>(states_.size()));
    if (added) {
      states_.push_back(std::move(state));
      if (states_.size() <= memo_states_) transitions_.resize(states_.size() * 256, kUnknown);
    }
    return it->second;
  }
  const State& state(int32_t id) const { return states_[static_cast<size_t>(id)]; }
  // The memo slot of (id, byte), or null when id has no table.
  int32_t* Slot(int32_t id, uint8_t byte) {
    return static_cast<size_t>(id) < memo_states_ ? &transitions_[static_cast<size_t>(id) * 256 + byte] : nullptr;
  }

 private:
  struct Hash {
    size_t operator()(const State& state) const { return HashState(state); }
  };
  std::unordered_map<State, int32_t, Hash> ids_;
  std::vector<State> states_;
  std::vector<int32_t> transitions_;  // [min(states, memo_states_) × 256]
  size_t memo_states_ = 0;
};

}  // namespace

void CompiledGrammar::ComputeMask(const TokenVocabulary& vocabulary, const State& state, TokenMask& mask,
                                  size_t memo_states) const {
  mask.Reset(vocabulary.size());
  const std::vector<TokenVocabulary::Node>& nodes = vocabulary.nodes();
  thread_local WalkStates walk;
  thread_local std::vector<int32_t> levels;  // levels[d]: the state id after the first d bytes of the current node
  thread_local State next;
  walk.Reset(memo_states);
  levels.resize(static_cast<size_t>(vocabulary.max_depth()) + 1);
  State start = state;
  levels[0] = walk.Intern(std::move(start));
  for (size_t i = 1; i < nodes.size();) {
    const TokenVocabulary::Node& node = nodes[i];
    const int32_t from = levels[node.depth - 1];
    int32_t* slot = walk.Slot(from, node.byte);
    int32_t to = slot != nullptr ? *slot : WalkStates::kUnknown;
    if (to == WalkStates::kUnknown) {
      to = AdvanceByte(walk.state(from), node.byte, next) ? walk.Intern(std::move(next)) : WalkStates::kDead;
      next.clear();
      if (slot != nullptr) *walk.Slot(from, node.byte) = to;  // Intern may have moved the table: look it up again
    }
    if (to == WalkStates::kDead) {
      i = static_cast<size_t>(node.subtree_end);  // no token with this prefix is allowed
      continue;
    }
    levels[node.depth] = to;
    for (int32_t id : vocabulary.NodeTokens(node)) mask.Set(id);
    ++i;
  }
  AddNonTrieTokens(vocabulary, state, mask);
}

bool CompiledGrammar::AllowsReference(const TokenVocabulary& vocabulary, const State& state, int32_t id) const {
  if (vocabulary.is_end(id)) return IsAccepting(state);
  const std::string_view bytes = vocabulary.bytes(id);
  if (bytes.empty()) return false;
  const bool special =
      std::find(vocabulary.special_ids().begin(), vocabulary.special_ids().end(), id) != vocabulary.special_ids().end();
  if (special && !allow_special_tokens_) return false;
  State copy = state;
  return AdvanceBytes(copy, bytes);
}

void CompiledGrammar::FillMaskReference(const TokenVocabulary& vocabulary, const State& state, TokenMask& mask) const {
  mask.Reset(vocabulary.size());
  for (int32_t id = 0; id < vocabulary.size(); ++id) {
    if (AllowsReference(vocabulary, state, id)) mask.Set(id);
  }
}

size_t CompiledGrammar::StateHash::operator()(const State& state) const { return HashState(state); }

void CompiledGrammar::FillMask(const TokenVocabulary& vocabulary, const State& state, TokenMask& mask) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    Cache& cache = caches_[&vocabulary];
    const auto found = cache.masks.find(state);
    if (found != cache.masks.end()) {
      ++stats_.hits;
      const CachedMask& cached = found->second;
      mask.Reset(vocabulary.size());
      if (cached.inverted) {
        std::fill(mask.words.begin(), mask.words.end(), ~uint64_t{0});
        const int64_t tail = vocabulary.size() % 64;
        if (tail != 0) mask.words.back() = (uint64_t{1} << tail) - 1;
        for (int32_t id : cached.ids) mask.words[static_cast<size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63));
      } else {
        for (int32_t id : cached.ids) mask.Set(id);
      }
      return;
    }
  }
  ComputeMask(vocabulary, state, mask);
  CachedMask cached;
  const int64_t allowed = mask.Count();
  cached.inverted = allowed > vocabulary.size() / 2;
  cached.ids.reserve(static_cast<size_t>(cached.inverted ? vocabulary.size() - allowed : allowed));
  // The listed ids, a word at a time (set bits, or clear bits below the vocabulary's end when inverted).
  for (size_t w = 0; w < mask.words.size(); ++w) {
    uint64_t bits = cached.inverted ? ~mask.words[w] : mask.words[w];
    const int64_t valid = std::min<int64_t>(64, vocabulary.size() - static_cast<int64_t>(w) * 64);
    if (valid < 64) bits &= (uint64_t{1} << valid) - 1;
    for (; bits != 0; bits &= bits - 1) {
      cached.ids.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits))));
    }
  }
  const int64_t entry_bytes =
      static_cast<int64_t>(cached.ids.size() * sizeof(int32_t) + state.size() * sizeof(int32_t)) + 64;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  ++stats_.misses;
  Cache& cache = caches_[&vocabulary];
  if (cache.bytes + entry_bytes > kMaxCacheBytes) {
    cache.masks.clear();  // a bound, not a policy: schemas that need more states than this recompute some masks
    cache.bytes = 0;
  }
  if (cache.masks.emplace(state, std::move(cached)).second) cache.bytes += entry_bytes;
}

CompiledGrammar::CacheStats CompiledGrammar::cache_stats() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  CacheStats stats = stats_;
  for (const auto& [vocabulary, cache] : caches_) {
    stats.entries += static_cast<int64_t>(cache.masks.size());
    stats.bytes += cache.bytes;
  }
  return stats;
}

void Matcher::FillMask(TokenMask& mask) const {
  if (!ended_) return grammar_->FillMask(*vocabulary_, state_, mask);
  mask.Reset(vocabulary_->size());
  for (int32_t id : vocabulary_->end_ids()) mask.Set(id);
}

bool Matcher::Advance(int32_t token) {
  if (token < 0 || token >= vocabulary_->size()) return false;
  if (vocabulary_->is_end(token)) {
    if (!ended_ && !IsAccepting()) return false;
    ended_ = true;
    return true;
  }
  if (ended_) return false;
  const std::string_view bytes = vocabulary_->bytes(token);
  if (bytes.empty()) return false;
  const auto& special = vocabulary_->special_ids();
  if (!grammar_->allow_special_tokens() && std::find(special.begin(), special.end(), token) != special.end()) {
    return false;
  }
  State next = state_;
  if (!grammar_->AdvanceBytes(next, bytes)) return false;
  state_.swap(next);
  return true;
}

}  // namespace glint::grammar
