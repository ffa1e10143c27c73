#include "tokenizer/bpe.h"

#include <functional>
#include <queue>

namespace glint {

bool BpeMerger::AddMerge(int32_t left, int32_t right, Merge merge) {
  return merges_.emplace(PairKey(left, right), merge).second;
}

const BpeMerger::Merge* BpeMerger::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeMerger::Encode(std::string_view word, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(word.size());
  if (n == 1) {
    out.push_back(byte_tokens_[static_cast<uint8_t>(word[0])]);
    return;
  }
  // Symbols form a doubly linked list over positions [0, n); a merged pair keeps the left position.
  struct Symbol {
    int32_t id;
    int32_t prev;  // -1 at the start
    int32_t next;  // n at the end
    bool alive;
  };
  std::vector<Symbol> symbols(n);  // [n]
  for (int32_t i = 0; i < n; ++i) symbols[i] = {byte_tokens_[static_cast<uint8_t>(word[i])], i - 1, i + 1, true};

  // Candidate (rank, left position) pairs; an entry is stale when its pair has changed since it was pushed, and is
  // then skipped. Ordering by (rank, position) gives HF's leftmost-first tie break.
  using Candidate = uint64_t;  // rank << 32 | position
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t left_pos) {
    if (left_pos < 0) return;
    const int32_t right_pos = symbols[left_pos].next;
    if (right_pos >= n) return;
    if (const Merge* merge = FindMerge(symbols[left_pos].id, symbols[right_pos].id)) {
      heap.push((static_cast<uint64_t>(merge->rank) << 32) | static_cast<uint32_t>(left_pos));
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const int32_t rank = static_cast<int32_t>(top >> 32);
    const int32_t left_pos = static_cast<int32_t>(top & 0xffffffffu);
    Symbol& left = symbols[left_pos];
    if (!left.alive || left.next >= n) continue;
    Symbol& right = symbols[left.next];
    const Merge* merge = FindMerge(left.id, right.id);
    if (merge == nullptr || merge->rank != rank) continue;  // stale: one side was merged with something else
    left.id = merge->merged;
    right.alive = false;
    left.next = right.next;
    if (left.next < n) symbols[left.next].prev = left_pos;
    push_pair(left.prev);
    push_pair(left_pos);
  }
  for (int32_t i = 0; i < n; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace glint
