#include "grammar/regex.h"

#include <cstdio>

namespace glint::grammar {
namespace {

constexpr int kMaxRegexDepth = 64;  // nested groups

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// \d \w \s and their negations as ranges; false when `c` is not one of them.
bool ShorthandClass(char c, CodePointRanges& ranges, bool& negated) {
  switch (c) {
    case 'd':
    case 'D':
      ranges = {{'0', '9'}};
      break;
    case 'w':
    case 'W':
      ranges = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
      break;
    case 's':
    case 'S':
      ranges = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}};
      break;
    default:
      return false;
  }
  negated = c >= 'A' && c <= 'Z';
  return true;
}

std::string JsonEscape(uint32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      break;
  }
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "\\u%04X", c);
  return buffer;
}

class RegexCompiler {
 public:
  RegexCompiler(Grammar& grammar, std::string_view pattern, const RegexOptions& options, std::string name)
      : g_(grammar), p_(pattern), options_(options), name_(std::move(name)) {}

  Result<int32_t> Compile() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') anchored_start = true, ++at_;
    if (p_.size() > at_ && p_.back() == '$' && (p_.size() < 2 || p_[p_.size() - 2] != '\\')) {
      anchored_end = true;
      p_.remove_suffix(1);
    }
    GLINT_ASSIGN_OR_RETURN(Sequence body, ParseAlternation(0));
    if (at_ != p_.size()) return Error("unbalanced ')'");
    Sequence whole;
    if (!options_.full_match && !anchored_start) whole.push_back(AnyText());
    whole.insert(whole.end(), body.begin(), body.end());
    if (!options_.full_match && !anchored_end) whole.push_back(AnyText());
    return g_.AddRuleWith(name_, {std::move(whole)});
  }

 private:
  Status Error(std::string_view what) const {
    return InvalidArgument("regex '", std::string(p_), "' at offset ", at_, ": ", what);
  }

  Element AnyText() {
    if (options_.json_string) return g_.Star({Element::Rule(AddJsonStringCharacter(g_))}, name_ + ".any");
    return g_.Star({Element::Rule(AnyCharacter())}, name_ + ".any");
  }
  int32_t AnyCharacter() {
    if (any_ < 0) any_ = AddClass({{'\n', '\n'}}, true);
    return any_;
  }

  // A class as a rule; in JSON mode the characters JSON must escape become their escapes.
  int32_t AddClass(CodePointRanges ranges, bool negate) {
    CodePointRanges set = NormaliseCodePoints(std::move(ranges), negate);
    if (!options_.json_string) return g_.AddCodePointClass(set, false, name_ + ".class");
    std::vector<Sequence> alternatives;
    for (auto [lo, hi] : set) {
      for (uint32_t c = lo; c <= hi && c < 0x20; ++c) alternatives.push_back(Grammar::Literal(JsonEscape(c)));
      for (uint32_t special : {uint32_t{'"'}, uint32_t{'\\'}}) {
        if (lo <= special && special <= hi) alternatives.push_back(Grammar::Literal(JsonEscape(special)));
      }
    }
    // The rest raw: the set intersected with the complement of {controls, '"', '\\'}.
    CodePointRanges keep;
    const CodePointRanges raw = NormaliseCodePoints({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
    for (auto [lo, hi] : set) {
      for (auto [raw_lo, raw_hi] : raw) {
        const uint32_t a = std::max(lo, raw_lo), b = std::min(hi, raw_hi);
        if (a <= b) keep.emplace_back(a, b);
      }
    }
    if (!keep.empty()) alternatives.push_back({Element::Rule(g_.AddCodePointClass(keep, false, name_ + ".class"))});
    return g_.AddRuleWith(name_ + ".class", std::move(alternatives));
  }

  Sequence Literal(uint32_t c) {
    if (options_.json_string && (c < 0x20 || c == '"' || c == '\\')) return Grammar::Literal(JsonEscape(c));
    return Grammar::Literal(EncodeUtf8(c));
  }

  Result<Sequence> ParseAlternation(int depth) {
    if (depth > kMaxRegexDepth) return Error("groups nested too deeply");
    std::vector<Sequence> alternatives;
    GLINT_ASSIGN_OR_RETURN(Sequence first, ParseConcatenation(depth));
    alternatives.push_back(std::move(first));
    while (at_ < p_.size() && p_[at_] == '|') {
      ++at_;
      GLINT_ASSIGN_OR_RETURN(Sequence next, ParseConcatenation(depth));
      alternatives.push_back(std::move(next));
    }
    if (alternatives.size() == 1) return std::move(alternatives[0]);
    return Sequence{Element::Rule(g_.AddRuleWith(name_ + ".alt", std::move(alternatives)))};
  }

  Result<Sequence> ParseConcatenation(int depth) {
    Sequence sequence;
    while (at_ < p_.size() && p_[at_] != '|' && p_[at_] != ')') {
      GLINT_ASSIGN_OR_RETURN(Sequence atom, ParseAtom(depth));
      GLINT_ASSIGN_OR_RETURN(Sequence repeated, ParseQuantifier(std::move(atom)));
      sequence.insert(sequence.end(), repeated.begin(), repeated.end());
      if (static_cast<int64_t>(sequence.size()) > kMaxGrammarElements) return Error("the pattern is too large");
    }
    return sequence;
  }

  Result<int64_t> ParseNumber() {
    int64_t value = 0;
    const size_t start = at_;
    while (at_ < p_.size() && p_[at_] >= '0' && p_[at_] <= '9') {
      value = value * 10 + (p_[at_++] - '0');
      if (value > Grammar::kMaxRepeat) return Error("repetition count too large");
    }
    if (at_ == start) return Error("expected a number in {}");
    return value;
  }

  Result<Sequence> ParseQuantifier(Sequence atom) {
    if (at_ >= p_.size()) return atom;
    const char c = p_[at_];
    Result<Element> element = InvalidArgument("");
    if (c == '*') {
      ++at_, element = g_.Star(atom, name_);
    } else if (c == '+') {
      ++at_, element = g_.Plus(atom, name_);
    } else if (c == '?') {
      ++at_, element = g_.Optional(atom, name_);
    } else if (c == '{') {
      ++at_;
      GLINT_ASSIGN_OR_RETURN(int64_t min, ParseNumber());
      int64_t max = min;
      if (at_ < p_.size() && p_[at_] == ',') {
        ++at_;
        max = -1;
        if (at_ < p_.size() && p_[at_] != '}') {
          GLINT_ASSIGN_OR_RETURN(max, ParseNumber());
        }
      }
      if (at_ >= p_.size() || p_[at_] != '}') return Error("expected '}'");
      ++at_;
      element = g_.Repeat(atom, min, max, name_);
      if (!element.ok()) return Error(element.status().message());
    } else {
      return atom;
    }
    if (at_ < p_.size() && (p_[at_] == '*' || p_[at_] == '+' || p_[at_] == '{')) {
      return Error("a quantifier follows a quantifier (possessive or nested quantifiers are not supported)");
    }
    if (at_ < p_.size() && p_[at_] == '?') ++at_;  // lazy: the same language
    return Sequence{element.value()};
  }

  Result<Sequence> ParseAtom(int depth) {
    const char c = p_[at_];
    if (c == '(') {
      ++at_;
      if (p_.substr(at_, 2) == "?:") {
        at_ += 2;
      } else if (p_.substr(at_, 2) == "?<" && p_.substr(at_, 3) != "?<=" && p_.substr(at_, 3) != "?<!") {
        const size_t close = p_.find('>', at_);
        if (close == std::string_view::npos) return Error("unterminated group name");
        at_ = close + 1;
      } else if (at_ < p_.size() && p_[at_] == '?') {
        return Error("lookaround and inline flags '(?' are not supported");
      }
      GLINT_ASSIGN_OR_RETURN(Sequence inner, ParseAlternation(depth + 1));
      if (at_ >= p_.size() || p_[at_] != ')') return Error("missing ')'");
      ++at_;
      return Sequence{Element::Rule(g_.AddRuleWith(name_ + ".group", {std::move(inner)}))};
    }
    if (c == '[') {
      bool negated = false;
      GLINT_ASSIGN_OR_RETURN(CodePointRanges ranges, ParseBracketClass(p_, at_, negated));
      return Sequence{Element::Rule(AddClass(std::move(ranges), negated))};
    }
    if (c == '.') return ++at_, Sequence{Element::Rule(AnyCharacter())};
    if (c == '^' || c == '$') return Error("anchors are only supported at the start (^) and the end ($)");
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("a quantifier with nothing to repeat");
    if (c == '\\') {
      ++at_;
      if (at_ >= p_.size()) return Error("a trailing backslash");
      CodePointRanges ranges;
      bool negated = false;
      if (ShorthandClass(p_[at_], ranges, negated)) {
        ++at_;
        return Sequence{Element::Rule(AddClass(std::move(ranges), negated))};
      }
      if (p_[at_] >= '1' && p_[at_] <= '9') return Error("backreferences are not supported");
      if (p_[at_] == 'b' || p_[at_] == 'B') return Error("word boundaries (\\b, \\B) are not supported");
      GLINT_ASSIGN_OR_RETURN(uint32_t code_point, ParseEscapedCodePoint(p_, at_));
      return Literal(code_point);
    }
    uint32_t code_point = 0;
    if (!DecodeUtf8(p_, at_, code_point)) return Error("invalid UTF-8");
    return Literal(code_point);
  }

  Grammar& g_;
  std::string_view p_;
  const RegexOptions options_;
  std::string name_;
  size_t at_ = 0;
  int32_t any_ = -1;
};

}  // namespace

Result<uint32_t> ParseEscapedCodePoint(std::string_view p, size_t& at) {
  if (at >= p.size()) return InvalidArgument("a trailing backslash");
  const char c = p[at++];
  const auto hex = [&](int digits) -> Result<uint32_t> {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      if (at >= p.size() || HexValue(p[at]) < 0) {
        return InvalidArgument("expected ", digits, " hex digits after \\", c, " at offset ", at);
      }
      value = value * 16 + static_cast<uint32_t>(HexValue(p[at++]));
    }
    return value;
  };
  switch (c) {
    case 'n':
      return uint32_t{'\n'};
    case 'r':
      return uint32_t{'\r'};
    case 't':
      return uint32_t{'\t'};
    case 'f':
      return uint32_t{'\f'};
    case 'v':
      return uint32_t{'\v'};
    case '0':
      return uint32_t{0};
    case 'x':
      return hex(2);
    case 'u':
      return hex(4);
    default:
      break;
  }
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    return InvalidArgument("the escape \\", c, " is not supported");
  }
  --at;
  uint32_t code_point = 0;
  if (!DecodeUtf8(p, at, code_point)) return InvalidArgument("invalid UTF-8 after a backslash");
  return code_point;
}

Result<CodePointRanges> ParseBracketClass(std::string_view p, size_t& at, bool& negated) {
  ++at;  // '['
  negated = at < p.size() && p[at] == '^';
  if (negated) ++at;
  CodePointRanges ranges;
  bool first = true;
  while (true) {
    if (at >= p.size()) return InvalidArgument("unterminated character class '['");
    if (p[at] == ']' && !first) break;
    first = false;
    uint32_t lo = 0;
    if (p[at] == '\\') {
      ++at;
      CodePointRanges shorthand;
      bool shorthand_negated = false;
      if (at < p.size() && ShorthandClass(p[at], shorthand, shorthand_negated)) {
        ++at;
        const CodePointRanges set = NormaliseCodePoints(shorthand, shorthand_negated);
        ranges.insert(ranges.end(), set.begin(), set.end());
        continue;
      }
      GLINT_ASSIGN_OR_RETURN(lo, ParseEscapedCodePoint(p, at));
    } else if (!DecodeUtf8(p, at, lo)) {
      return InvalidArgument("invalid UTF-8 in a character class");
    }
    uint32_t hi = lo;
    if (at + 1 < p.size() && p[at] == '-' && p[at + 1] != ']') {
      ++at;
      if (p[at] == '\\') {
        ++at;
        GLINT_ASSIGN_OR_RETURN(hi, ParseEscapedCodePoint(p, at));
      } else if (!DecodeUtf8(p, at, hi)) {
        return InvalidArgument("invalid UTF-8 in a character class");
      }
      if (hi < lo) return InvalidArgument("the class range is reversed (", lo, " > ", hi, ")");
    }
    ranges.emplace_back(lo, hi);
  }
  ++at;  // ']'
  return ranges;
}

int32_t AddJsonStringCharacter(Grammar& g) {
  // Unescaped: any code point but '"', '\' and controls; escaped: \" \\ \/ \b \f \n \r \t \uXXXX.
  const int32_t plain = g.AddCodePointClass({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true, "json.char");
  const int32_t hex =
      g.AddRuleWith("json.hex", {{Element::Bytes('0', '9')}, {Element::Bytes('a', 'f')}, {Element::Bytes('A', 'F')}});
  const Element h = Element::Rule(hex);
  const int32_t escape = g.AddRuleWith("json.escape", {{Element::Byte('"')},
                                                       {Element::Byte('\\')},
                                                       {Element::Byte('/')},
                                                       {Element::Byte('b')},
                                                       {Element::Byte('f')},
                                                       {Element::Byte('n')},
                                                       {Element::Byte('r')},
                                                       {Element::Byte('t')},
                                                       {Element::Byte('u'), h, h, h, h}});
  return g.AddRuleWith("json.string_char", {{Element::Rule(plain)}, {Element::Byte('\\'), Element::Rule(escape)}});
}

Result<int32_t> AddRegex(Grammar& grammar, std::string_view pattern, const RegexOptions& options,
                         const std::string& name) {
  return RegexCompiler(grammar, pattern, options, name).Compile();
}

}  // namespace glint::grammar
