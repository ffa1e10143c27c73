// A context-free grammar over bytes: the one form every constraint (JSON schema, regex, choice, GBNF) compiles to,
// and the input of the matcher (matcher.h). docs/structured-output.md explains the design.
//
// A rule is a list of alternatives; an alternative is a sequence of elements; an element is a byte range [lo, hi]
// or a reference to a rule. Text is UTF-8: a character class over code points becomes alternatives of byte
// sequences (AddCodePointClass), so a token that ends inside a character leaves the matcher inside it and partial
// UTF-8 needs no special case. Repetition is right recursion (x* = x x* | ε), which the matcher runs as a tail
// call, so a long string does not grow its stack.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace glint::grammar {

struct Element {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  uint8_t lo = 0, hi = 0;  // kBytes: the byte range, inclusive
  int32_t rule = -1;       // kRule
  static Element Bytes(uint8_t lo, uint8_t hi) { return {Kind::kBytes, lo, hi, -1}; }
  static Element Byte(uint8_t b) { return {Kind::kBytes, b, b, -1}; }
  static Element Rule(int32_t rule) { return {Kind::kRule, 0, 0, rule}; }
  bool operator==(const Element&) const = default;
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;
  std::vector<Sequence> alternatives;
};

// Bounds on what any compiler may produce (a request cannot make the server allocate without limit).
inline constexpr int64_t kMaxGrammarElements = 1 << 20;
inline constexpr int64_t kMaxGrammarRules = 1 << 17;

class Grammar {
 public:
  // A new rule with no alternatives yet; returns its id. Names are for messages only (they need not be unique).
  int32_t AddRule(std::string name);
  void AddAlternative(int32_t rule, Sequence sequence);
  // A rule whose alternatives are `alternatives`.
  int32_t AddRuleWith(std::string name, std::vector<Sequence> alternatives);

  // Helpers that make rules and return an element referring to them.
  static Sequence Literal(std::string_view bytes);
  // x* / x+ / x? as new rules (right recursion).
  Element Star(const Sequence& item, const std::string& name);
  Element Plus(const Sequence& item, const std::string& name);
  Element Optional(const Sequence& item, const std::string& name);
  // Between min and max repetitions of `item` (max −1: unbounded). Refuses counts above kMaxRepeat.
  Result<Element> Repeat(const Sequence& item, int64_t min, int64_t max, const std::string& name);
  static constexpr int64_t kMaxRepeat = 10000;
  // Code points in the union of `ranges` (inclusive, within 0 .. 0x10FFFF, surrogates excluded), as UTF-8; with
  // `negate`, every code point outside them.
  int32_t AddCodePointClass(const std::vector<std::pair<uint32_t, uint32_t>>& ranges, bool negate,
                            const std::string& name);
  // Any bytes that do not contain `stop`, followed by `stop` (a deterministic automaton: KMP's failure function).
  // With `open_ended`: any bytes that do not contain `stop`, ending anywhere (stop itself is never completed).
  int32_t AddTextUntil(std::string_view stop, const std::string& name, bool open_ended = false);

  void set_root(int32_t rule) { root_ = rule; }
  int32_t root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }
  int64_t num_elements() const { return num_elements_; }

  // Checks what the matcher relies on: a root, every reference defined, every rule with an alternative, no left
  // recursion (a rule that can reach itself without consuming a byte would expand forever), sizes in bounds.
  Status Validate() const;
  // A readable dump (GBNF-like), for tests and error messages.
  std::string ToString() const;

 private:
  std::vector<Rule> rules_;
  int32_t root_ = -1;
  int64_t num_elements_ = 0;
};

// Code point → its UTF-8 bytes.
std::string EncodeUtf8(uint32_t code_point);
// The first code point of `text` at `at` (advanced past it); false for invalid UTF-8.
bool DecodeUtf8(std::string_view text, size_t& at, uint32_t& code_point);

using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;
// Sorted, merged, without surrogates, complemented over 0 .. 0x10FFFF when `negate`.
CodePointRanges NormaliseCodePoints(const CodePointRanges& ranges, bool negate);

}  // namespace glint::grammar
