#include "grammar/reference.h"

#include <set>
#include <tuple>
#include <vector>

namespace glint::grammar {
namespace {

struct Item {
  int32_t rule, alternative, dot, origin;
  auto operator<=>(const Item&) const = default;
};

}  // namespace

EarleyResult EarleyRecognize(const Grammar& grammar, std::string_view text) {
  const std::vector<Rule>& rules = grammar.rules();
  const auto next_element = [&](const Item& item) -> const Element* {
    const Sequence& sequence = rules[item.rule].alternatives[item.alternative];
    return item.dot < static_cast<int32_t>(sequence.size()) ? &sequence[item.dot] : nullptr;
  };
  std::vector<std::set<Item>> chart(text.size() + 1);
  for (size_t a = 0; a < rules[grammar.root()].alternatives.size(); ++a) {
    chart[0].insert({grammar.root(), static_cast<int32_t>(a), 0, 0});
  }
  for (size_t k = 0; k <= text.size(); ++k) {
    // Predict and complete to a fixpoint (the simple way to get nullable rules right).
    for (bool changed = true; changed;) {
      changed = false;
      const std::vector<Item> items(chart[k].begin(), chart[k].end());
      for (const Item& item : items) {
        const Element* e = next_element(item);
        if (e != nullptr && e->kind == Element::Kind::kRule) {
          for (size_t a = 0; a < rules[e->rule].alternatives.size(); ++a) {
            changed |= chart[k].insert({e->rule, static_cast<int32_t>(a), 0, static_cast<int32_t>(k)}).second;
          }
        } else if (e == nullptr) {
          const std::vector<Item> parents(chart[item.origin].begin(), chart[item.origin].end());
          for (const Item& parent : parents) {
            const Element* p = next_element(parent);
            if (p != nullptr && p->kind == Element::Kind::kRule && p->rule == item.rule) {
              changed |= chart[k].insert({parent.rule, parent.alternative, parent.dot + 1, parent.origin}).second;
            }
          }
        }
      }
    }
    if (k == text.size()) break;
    const uint8_t byte = static_cast<uint8_t>(text[k]);
    for (const Item& item : chart[k]) {
      const Element* e = next_element(item);
      if (e != nullptr && e->kind == Element::Kind::kBytes && byte >= e->lo && byte <= e->hi) {
        chart[k + 1].insert({item.rule, item.alternative, item.dot + 1, item.origin});
      }
    }
    if (chart[k + 1].empty()) return {};
  }
  EarleyResult result;
  result.viable = !chart[text.size()].empty();
  for (const Item& item : chart[text.size()]) {
    if (item.rule == grammar.root() && item.origin == 0 && next_element(item) == nullptr) result.complete = true;
  }
  return result;
}

}  // namespace glint::grammar
