#include "grammar/grammar.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>

namespace glint::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int Utf8Length(uint32_t code_point) {
  if (code_point < 0x80) return 1;
  if (code_point < 0x800) return 2;
  if (code_point < 0x10000) return 3;
  return 4;
}

// [lo, hi] with every code point encoded in n bytes, as sequences of byte ranges. Splits until, for each suffix of
// continuation bytes, the range covers all 64 values or its endpoints share the prefix (the method of RE2's and
// Rust regex-syntax's UTF-8 range compilers).
void SplitSameLength(uint32_t lo, uint32_t hi, int n, std::vector<Sequence>& out) {
  if (n == 1) {
    out.push_back({Element::Bytes(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi))});
    return;
  }
  for (int i = 1; i < n; ++i) {
    const uint32_t mask = (1u << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        SplitSameLength(lo, lo | mask, n, out);
        SplitSameLength((lo | mask) + 1, hi, n, out);
        return;
      }
      if ((hi & mask) != mask) {
        SplitSameLength(lo, (hi & ~mask) - 1, n, out);
        SplitSameLength(hi & ~mask, hi, n, out);
        return;
      }
    }
  }
  const std::string a = EncodeUtf8(lo), b = EncodeUtf8(hi);
  Sequence sequence;
  for (int i = 0; i < n; ++i) {
    sequence.push_back(Element::Bytes(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])));
  }
  out.push_back(std::move(sequence));
}

void AddCodePointRange(uint32_t lo, uint32_t hi, std::vector<Sequence>& out) {
  static constexpr std::array<uint32_t, 4> kLengthEnds = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  uint32_t start = lo;
  for (uint32_t end_of_length : kLengthEnds) {
    if (start > hi) break;
    if (start > end_of_length) continue;
    const uint32_t end = std::min(hi, end_of_length);
    SplitSameLength(start, end, Utf8Length(start), out);
    start = end + 1;
  }
}

// Every rule reference is defined and every byte range is non-empty.
Status CheckElements(const std::vector<Rule>& rules) {
  const int64_t n = static_cast<int64_t>(rules.size());
  for (const Rule& rule : rules) {
    if (rule.alternatives.empty()) return InvalidArgument("rule '", rule.name, "' matches nothing");
    for (const Sequence& sequence : rule.alternatives) {
      for (const Element& e : sequence) {
        if (e.kind == Element::Kind::kRule && (e.rule < 0 || e.rule >= n)) {
          return InvalidArgument("rule '", rule.name, "' refers to an undefined rule");
        }
        if (e.kind == Element::Kind::kBytes && e.lo > e.hi) {
          return InvalidArgument("rule '", rule.name, "' has an empty byte range");
        }
      }
    }
  }
  return Status::Ok();
}

// The least fixpoint of "a rule is marked when one of its alternatives has every element `holds`", where
// holds(e, marked) may read the marks so far: nullable rules (every element a nullable rule), productive rules
// (every element bytes or a productive rule).
template <typename ElementHolds>
std::vector<bool> MarkRules(const std::vector<Rule>& rules, ElementHolds holds) {
  std::vector<bool> marked(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (marked[r]) continue;
      for (const Sequence& sequence : rules[r].alternatives) {
        const bool all =
            std::all_of(sequence.begin(), sequence.end(), [&](const Element& e) { return holds(e, marked); });
        if (all) {
          marked[r] = changed = true;
          break;
        }
      }
    }
  }
  return marked;
}

// A cycle in the "can start with" graph over nullable prefixes is left recursion. Iterative DFS (grammars can be
// deep): 0 unvisited, 1 on the path, 2 done.
Status CheckNoLeftRecursion(const std::vector<Rule>& rules, const std::vector<bool>& nullable) {
  const size_t n = rules.size();
  std::vector<std::vector<int32_t>> starts(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& sequence : rules[r].alternatives) {
      for (const Element& e : sequence) {
        if (e.kind == Element::Kind::kBytes) break;
        starts[r].push_back(e.rule);
        if (!nullable[static_cast<size_t>(e.rule)]) break;
      }
    }
  }
  std::vector<uint8_t> mark(n, 0);
  for (size_t start = 0; start < n; ++start) {
    if (mark[start] != 0) continue;
    std::vector<std::pair<int32_t, size_t>> path = {{static_cast<int32_t>(start), 0}};
    mark[start] = 1;
    while (!path.empty()) {
      auto& [rule, edge] = path.back();
      if (edge == starts[rule].size()) {
        mark[rule] = 2;
        path.pop_back();
        continue;
      }
      const int32_t to = starts[rule][edge++];
      if (mark[to] == 1) {
        return InvalidArgument("rule '", rules[to].name,
                               "' is left-recursive (it can reach itself without consuming a byte); rewrite it "
                               "with right recursion or repetition");
      }
      if (mark[to] == 0) {
        mark[to] = 1;
        path.push_back({to, 0});
      }
    }
  }
  return Status::Ok();
}

}  // namespace

bool DecodeUtf8(std::string_view text, size_t& at, uint32_t& code_point) {
  if (at >= text.size()) return false;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(at);
  int length = 0;
  uint32_t value = 0, minimum = 0;
  if (lead < 0x80) {
    code_point = lead;
    ++at;
    return true;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, minimum = 0x10000;
  } else {
    return false;
  }
  if (at + length > text.size()) return false;
  for (int i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return false;
    value = (value << 6) | (byte(at + i) & 0x3F);
  }
  if (value < minimum || value > kMaxCodePoint || (value >= kSurrogateLo && value <= kSurrogateHi)) return false;
  code_point = value;
  at += length;
  return true;
}

std::string EncodeUtf8(uint32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

int32_t Grammar::AddRule(std::string name) {
  rules_.push_back({std::move(name), {}});
  return static_cast<int32_t>(rules_.size() - 1);
}

void Grammar::AddAlternative(int32_t rule, Sequence sequence) {
  num_elements_ += static_cast<int64_t>(sequence.size()) + 1;
  rules_.at(static_cast<size_t>(rule)).alternatives.push_back(std::move(sequence));
}

int32_t Grammar::AddRuleWith(std::string name, std::vector<Sequence> alternatives) {
  const int32_t id = AddRule(std::move(name));
  for (Sequence& alternative : alternatives) AddAlternative(id, std::move(alternative));
  return id;
}

Sequence Grammar::Literal(std::string_view bytes) {
  Sequence sequence;
  for (char c : bytes) sequence.push_back(Element::Byte(static_cast<uint8_t>(c)));
  return sequence;
}

Element Grammar::Star(const Sequence& item, const std::string& name) {
  const int32_t rule = AddRule(name + "*");
  Sequence again = item;
  again.push_back(Element::Rule(rule));
  AddAlternative(rule, std::move(again));
  AddAlternative(rule, {});
  return Element::Rule(rule);
}

Element Grammar::Plus(const Sequence& item, const std::string& name) {
  Sequence sequence = item;
  sequence.push_back(Star(item, name));
  return Element::Rule(AddRuleWith(name + "+", {std::move(sequence)}));
}

Element Grammar::Optional(const Sequence& item, const std::string& name) {
  return Element::Rule(AddRuleWith(name + "?", {item, {}}));
}

Result<Element> Grammar::Repeat(const Sequence& item, int64_t min, int64_t max, const std::string& name) {
  if (min < 0 || (max >= 0 && max < min)) {
    return InvalidArgument("repetition {", min, ",", max, "} of ", name, " is empty; expected 0 <= min <= max");
  }
  if (min > kMaxRepeat || max > kMaxRepeat) {
    return InvalidArgument("repetition {", min, ",", max, "} of ", name, " is too large; at most ", kMaxRepeat,
                           " repetitions are supported");
  }
  // x{min,max} = x ... x (min times) then nested optionals: (x (x (x)?)?)? for the max − min optional ones.
  Sequence sequence;
  for (int64_t i = 0; i < min; ++i) sequence.insert(sequence.end(), item.begin(), item.end());
  if (max < 0) {
    sequence.push_back(Star(item, name));
  } else if (max > min) {
    int32_t tail = AddRuleWith(name + "?", {item, {}});
    for (int64_t i = min + 1; i < max; ++i) {
      Sequence more = item;
      more.push_back(Element::Rule(tail));
      tail = AddRuleWith(name + "?", {std::move(more), {}});
    }
    sequence.push_back(Element::Rule(tail));
  }
  return Element::Rule(AddRuleWith(name, {std::move(sequence)}));
}

CodePointRanges NormaliseCodePoints(const CodePointRanges& ranges, bool negate) {
  // Normalise: clamp, drop surrogates, sort and merge; then complement when negated.
  std::vector<std::pair<uint32_t, uint32_t>> clean;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (lo < kSurrogateLo && hi >= kSurrogateLo) {
      clean.emplace_back(lo, kSurrogateLo - 1);
      if (hi > kSurrogateHi) clean.emplace_back(kSurrogateHi + 1, hi);
    } else if (lo >= kSurrogateLo && lo <= kSurrogateHi) {
      if (hi > kSurrogateHi) clean.emplace_back(kSurrogateHi + 1, hi);
    } else {
      clean.emplace_back(lo, hi);
    }
  }
  std::sort(clean.begin(), clean.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& range : clean) {
    if (!merged.empty() && range.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, range.second);
    } else {
      merged.push_back(range);
    }
  }
  if (negate) {
    std::vector<std::pair<uint32_t, uint32_t>> complement;
    uint32_t next = 0;
    for (const auto& [lo, hi] : merged) {
      if (lo > next) complement.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
    merged.clear();
    for (const auto& range : complement) {  // the complement may contain the surrogate block: cut it out again
      if (range.first <= kSurrogateLo && range.second >= kSurrogateHi) {
        if (range.first < kSurrogateLo) merged.emplace_back(range.first, kSurrogateLo - 1);
        if (range.second > kSurrogateHi) merged.emplace_back(kSurrogateHi + 1, range.second);
      } else {
        merged.push_back(range);
      }
    }
  }
  return merged;
}

int32_t Grammar::AddCodePointClass(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, bool negate,
                                   const std::string& name) {
  const CodePointRanges merged = NormaliseCodePoints(ranges, negate);
  std::vector<Sequence> alternatives;
  for (const auto& [lo, hi] : merged) AddCodePointRange(lo, hi, alternatives);
  return AddRuleWith(name, std::move(alternatives));  // an empty class has no alternative: Validate refuses it
}

int32_t Grammar::AddTextUntil(std::string_view stop, const std::string& name, bool open_ended) {
  const size_t length = stop.size();
  if (length == 0) return AddRuleWith(name, {{}});
  // KMP: failure[i] = length of the longest proper border of stop[0, i).
  std::vector<size_t> failure(length + 1, 0);
  for (size_t i = 1, k = 0; i < length; ++i) {
    while (k > 0 && stop[i] != stop[k]) k = failure[k];
    if (stop[i] == stop[k]) ++k;
    failure[i + 1] = k;
  }
  // next(state, byte) of the automaton that has matched `state` bytes of stop.
  const auto next = [&](size_t state, uint8_t byte) {
    while (state > 0 && static_cast<uint8_t>(stop[state]) != byte) state = failure[state];
    return static_cast<uint8_t>(stop[state]) == byte ? state + 1 : 0;
  };
  std::vector<int32_t> states(length);
  for (size_t s = 0; s < length; ++s) states[s] = AddRule(name + "#" + std::to_string(s));
  for (size_t s = 0; s < length; ++s) {
    int b = 0;
    while (b < 256) {
      const size_t target = next(s, static_cast<uint8_t>(b));
      int end = b;
      while (end + 1 < 256 && next(s, static_cast<uint8_t>(end + 1)) == target) ++end;
      Sequence sequence = {Element::Bytes(static_cast<uint8_t>(b), static_cast<uint8_t>(end))};
      if (target < length) sequence.push_back(Element::Rule(states[target]));
      if (target < length || !open_ended) AddAlternative(states[s], std::move(sequence));
      b = end + 1;
    }
    if (open_ended) AddAlternative(states[s], {});
  }
  return states[0];
}

Status Grammar::Validate() const {
  const int64_t n = static_cast<int64_t>(rules_.size());
  if (root_ < 0 || root_ >= n) return InvalidArgument("the grammar has no root rule");
  if (n > kMaxGrammarRules) return InvalidArgument("the grammar has ", n, " rules; at most ", kMaxGrammarRules);
  if (num_elements_ > kMaxGrammarElements) {
    return InvalidArgument("the grammar has ", num_elements_, " elements; at most ", kMaxGrammarElements);
  }
  GLINT_RETURN_IF_ERROR(CheckElements(rules_));
  const std::vector<bool> nullable = MarkRules(rules_, [](const Element& e, const std::vector<bool>& marked) {
    return e.kind == Element::Kind::kRule && marked[static_cast<size_t>(e.rule)];
  });
  // A rule that can never finish would let the matcher allow text that cannot end.
  const std::vector<bool> productive = MarkRules(rules_, [](const Element& e, const std::vector<bool>& marked) {
    return e.kind == Element::Kind::kBytes || marked[static_cast<size_t>(e.rule)];
  });
  for (int64_t r = 0; r < n; ++r) {
    if (!productive[r])
      return InvalidArgument("rule '", rules_[r].name, "' can never finish (every alternative recurses)");
  }
  return CheckNoLeftRecursion(rules_, nullable);
}

std::string Grammar::ToString() const {
  std::string out;
  const auto byte_text = [](uint8_t b) {
    char buffer[8];
    if (b >= 0x21 && b < 0x7F && b != '\\' && b != ']' && b != '-') {
      buffer[0] = static_cast<char>(b);
      buffer[1] = 0;
    } else {
      std::snprintf(buffer, sizeof buffer, "\\x%02X", b);
    }
    return std::string(buffer);
  };
  for (size_t r = 0; r < rules_.size(); ++r) {
    out += StrCat("r", r, "(", rules_[r].name, ") ::=");
    for (size_t a = 0; a < rules_[r].alternatives.size(); ++a) {
      if (a > 0) out += " |";
      for (const Element& e : rules_[r].alternatives[a]) {
        if (e.kind == Element::Kind::kRule) {
          out += StrCat(" r", e.rule);
        } else if (e.lo == e.hi) {
          out += " [" + byte_text(e.lo) + "]";
        } else {
          out += " [" + byte_text(e.lo) + "-" + byte_text(e.hi) + "]";
        }
      }
      if (rules_[r].alternatives[a].empty()) out += " ()";
    }
    out += "\n";
  }
  return out;
}

}  // namespace glint::grammar
