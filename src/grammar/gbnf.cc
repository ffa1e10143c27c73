#include "grammar/gbnf.h"

#include <map>

#include "grammar/regex.h"

namespace glint::grammar {
namespace {

constexpr int kMaxGroupDepth = 64;

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  Result<Grammar> Parse() {
    SkipSpace();
    while (at_ < text_.size()) {
      const std::string name = ReadName();
      if (name.empty()) return Error("expected a rule name");
      SkipSpace();
      if (text_.substr(at_, 3) != "::=") return Error("expected '::=' after the rule name '" + name + "'");
      at_ += 3;
      const int32_t rule = RuleId(name);
      if (defined_.count(rule) != 0) return Error("rule '" + name + "' is defined twice");
      defined_.insert({rule, true});
      GLINT_ASSIGN_OR_RETURN(std::vector<Sequence> alternatives, ParseAlternatives(0));
      for (Sequence& sequence : alternatives) grammar_.AddAlternative(rule, std::move(sequence));
      SkipSpace();
    }
    for (const auto& [name, id] : ids_) {
      if (defined_.count(id) == 0) return InvalidArgument("grammar: rule '", name, "' is used but never defined");
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) return InvalidArgument("grammar: there is no 'root' rule (the start of the grammar)");
    grammar_.set_root(root->second);
    GLINT_RETURN_IF_ERROR(grammar_.Validate().WithContext("grammar"));
    return std::move(grammar_);
  }

 private:
  Status Error(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at_ && i < text_.size(); ++i) text_[i] == '\n' ? (++line, column = 1) : ++column;
    return InvalidArgument("grammar line ", line, " column ", column, ": ", what);
  }

  void SkipSpace() {
    while (at_ < text_.size()) {
      if (text_[at_] == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') ++at_;
      } else if (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r') {
        ++at_;
      } else {
        break;
      }
    }
  }

  std::string ReadName() {
    const size_t start = at_;
    while (at_ < text_.size() && NameChar(text_[at_])) ++at_;
    return std::string(text_.substr(start, at_ - start));
  }

  // Is a rule definition (`name ::=`) next? Then the current rule has ended.
  bool AtDefinition() {
    const size_t saved = at_;
    const std::string name = ReadName();
    SkipSpace();
    const bool definition = !name.empty() && text_.substr(at_, 3) == "::=";
    at_ = saved;
    return definition;
  }

  int32_t RuleId(const std::string& name) {
    const auto found = ids_.find(name);
    if (found != ids_.end()) return found->second;
    const int32_t id = grammar_.AddRule(name);
    ids_[name] = id;
    return id;
  }

  Result<std::vector<Sequence>> ParseAlternatives(int depth) {
    if (depth > kMaxGroupDepth) return Error("groups nested too deeply");
    std::vector<Sequence> alternatives(1);
    while (true) {
      SkipSpace();
      if (at_ >= text_.size() || text_[at_] == ')' || AtDefinition()) break;
      if (text_[at_] == '|') {
        ++at_;
        alternatives.emplace_back();
        continue;
      }
      GLINT_ASSIGN_OR_RETURN(Sequence item, ParseItem(depth));
      GLINT_ASSIGN_OR_RETURN(Sequence repeated, ParsePostfix(std::move(item)));
      alternatives.back().insert(alternatives.back().end(), repeated.begin(), repeated.end());
    }
    return alternatives;
  }

  Result<Sequence> ParseItem(int depth) {
    const char c = text_[at_];
    if (c == '"') {
      ++at_;
      std::string bytes;
      while (true) {
        if (at_ >= text_.size() || text_[at_] == '\n') return Error("unterminated string literal");
        if (text_[at_] == '"') break;
        if (text_[at_] == '\\') {
          ++at_;
          Result<uint32_t> escaped = ParseEscapedCodePoint(text_, at_);
          if (!escaped.ok()) return Error(escaped.status().message());
          bytes += EncodeUtf8(escaped.value());
        } else {
          bytes += text_[at_++];
        }
      }
      ++at_;
      if (bytes.empty()) return Sequence{};
      return Grammar::Literal(bytes);
    }
    if (c == '[') {
      bool negated = false;
      Result<CodePointRanges> ranges = ParseBracketClass(text_, at_, negated);
      if (!ranges.ok()) return Error(ranges.status().message());
      return Sequence{Element::Rule(grammar_.AddCodePointClass(ranges.value(), negated, "class"))};
    }
    if (c == '.') {
      ++at_;
      return Sequence{Element::Rule(grammar_.AddCodePointClass({}, true, "any"))};
    }
    if (c == '(') {
      ++at_;
      GLINT_ASSIGN_OR_RETURN(std::vector<Sequence> inner, ParseAlternatives(depth + 1));
      if (at_ >= text_.size() || text_[at_] != ')') return Error("missing ')'");
      ++at_;
      return Sequence{Element::Rule(grammar_.AddRuleWith("group", std::move(inner)))};
    }
    if (NameChar(c)) return Sequence{Element::Rule(RuleId(ReadName()))};
    return Error(std::string("unexpected character '") + c + "'");
  }

  Result<Sequence> ParsePostfix(Sequence item) {
    if (at_ >= text_.size()) return item;
    const char c = text_[at_];
    if (c == '*') return ++at_, Sequence{grammar_.Star(item, "repeat")};
    if (c == '+') return ++at_, Sequence{grammar_.Plus(item, "repeat")};
    if (c == '?') return ++at_, Sequence{grammar_.Optional(item, "repeat")};
    if (c != '{') return item;
    ++at_;
    const auto number = [&]() -> int64_t {
      int64_t value = -1;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
        value = std::max<int64_t>(value, 0) * 10 + (text_[at_++] - '0');
        if (value > Grammar::kMaxRepeat) return Grammar::kMaxRepeat + 1;
      }
      return value;
    };
    const int64_t min = number();
    if (min < 0) return Error("expected a number after '{'");
    int64_t max = min;
    if (at_ < text_.size() && text_[at_] == ',') {
      ++at_;
      max = number();  // −1: unbounded
    }
    if (at_ >= text_.size() || text_[at_] != '}') return Error("expected '}'");
    ++at_;
    Result<Element> repeated = grammar_.Repeat(item, min, max, "repeat");
    if (!repeated.ok()) return Error(repeated.status().message());
    return Sequence{repeated.value()};
  }

  std::string_view text_;
  size_t at_ = 0;
  Grammar grammar_;
  std::map<std::string, int32_t> ids_;
  std::map<int32_t, bool> defined_;
};

}  // namespace

Result<Grammar> ParseGbnf(std::string_view text) {
  if (text.size() > kMaxGrammarTextBytes) {
    return InvalidArgument("the grammar is ", text.size(), " bytes; at most ", kMaxGrammarTextBytes);
  }
  return GbnfParser(text).Parse();
}

}  // namespace glint::grammar
