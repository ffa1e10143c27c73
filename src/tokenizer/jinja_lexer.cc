#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "tokenizer/utf8.h"

namespace glint::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& options) : source_(source), options_(options) {}

  Result<std::vector<Token>> Run() {
    while (true) {
      const size_t tag = FindTagStart(pos_);
      std::string text(source_.substr(pos_, tag == std::string_view::npos ? std::string_view::npos : tag - pos_));
      const int text_line = line_;
      line_ += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      if (tag == std::string_view::npos) {
        EmitText(std::move(text), text_line);
        break;
      }
      const char kind = source_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        // lstrip_blocks: drop spaces/tabs between the start of the line and the tag.
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        const bool only_blanks = std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_start), text.end(),
                                             [](char c) { return IsSpace(c) && c != '\n'; });
        if ((line_start > 0 || line_starting_) && line_start < text.size() && only_blanks) text.resize(line_start);
      }
      EmitText(std::move(text), text_line);
      pos_ = tag + 2 + ((sign == '-' || (sign == '+' && kind != '{')) ? 1 : 0);
      if (kind == '#') {
        GLINT_RETURN_IF_ERROR(SkipComment());
        continue;
      }
      const bool block = kind == '%';
      const size_t begin_index = tokens_.size();
      tokens_.push_back({block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", 0, 0.0, line_});
      if (block && IsRawBlock()) {
        tokens_.resize(begin_index);
        GLINT_RETURN_IF_ERROR(LexRaw());
        continue;
      }
      GLINT_RETURN_IF_ERROR(LexTag(block));
    }
    tokens_.push_back({TokenKind::kEnd, "", 0, 0.0, line_});
    return std::move(tokens_);
  }

 private:
  Status Error(std::string_view what) const { return InvalidArgument("template line ", line_, ": ", what); }

  size_t FindTagStart(size_t from) const {
    for (size_t i = source_.find('{', from); i != std::string_view::npos; i = source_.find('{', i + 1)) {
      if (i + 1 < source_.size() && (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string_view::npos;
  }

  void EmitText(std::string text, int line) {
    if (!text.empty()) tokens_.push_back({TokenKind::kText, std::move(text), 0, 0.0, line});
  }

  // After a tag end: `-` eats all following whitespace; a block or comment end eats one newline (trim_blocks)
  // unless it was `+`. Records whether the next text starts a line (for lstrip_blocks).
  void AfterTagEnd(char sign, bool block_or_comment) {
    line_starting_ = false;
    if (sign == '-') {
      while (pos_ < source_.size() && IsSpace(source_[pos_])) {
        line_starting_ = source_[pos_] == '\n';
        if (source_[pos_] == '\n') ++line_;
        ++pos_;
      }
    } else if (block_or_comment && sign != '+' && options_.trim_blocks && pos_ < source_.size() &&
               source_[pos_] == '\n') {
      ++pos_;
      ++line_;
      line_starting_ = true;
    }
  }

  Status SkipComment() {
    const size_t end = source_.find("#}", pos_);
    if (end == std::string_view::npos) return Error("comment {# is never closed with #}");
    const char sign = end > pos_ && (source_[end - 1] == '-' || source_[end - 1] == '+') ? source_[end - 1] : '\0';
    line_ += static_cast<int>(std::count(source_.begin() + static_cast<std::ptrdiff_t>(pos_),
                                         source_.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
    pos_ = end + 2;
    AfterTagEnd(sign, true);
    return Status::Ok();
  }

  // At the position after `{%`: is this `raw %}`?
  bool IsRawBlock() const {
    size_t i = pos_;
    while (i < source_.size() && IsSpace(source_[i])) ++i;
    if (source_.substr(i, 3) != "raw" || (i + 3 < source_.size() && IsNameChar(source_[i + 3]))) return false;
    i += 3;
    while (i < source_.size() && IsSpace(source_[i])) ++i;
    if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) ++i;
    return source_.substr(i, 2) == "%}";
  }

  // Matches `{%[-+]? endraw [-+]?%}` at `at`; returns its length (0 if no match) and the signs.
  size_t MatchEndRaw(size_t at, char& open_sign, char& close_sign) const {
    size_t i = at + 2;
    open_sign = i < source_.size() && (source_[i] == '-' || source_[i] == '+') ? source_[i++] : '\0';
    while (i < source_.size() && IsSpace(source_[i])) ++i;
    if (source_.substr(i, 6) != "endraw") return 0;
    i += 6;
    while (i < source_.size() && IsSpace(source_[i])) ++i;
    close_sign = i < source_.size() && (source_[i] == '-' || source_[i] == '+') ? source_[i++] : '\0';
    if (source_.substr(i, 2) != "%}") return 0;
    return i + 2 - at;
  }

  Status LexRaw() {
    // Skip to after the `raw %}` (its sign controls the whitespace after it).
    const size_t close = source_.find("%}", pos_);
    const char raw_sign = source_[close - 1] == '-' || source_[close - 1] == '+' ? source_[close - 1] : '\0';
    pos_ = close + 2;
    AfterTagEnd(raw_sign, true);
    for (size_t at = source_.find("{%", pos_); at != std::string_view::npos; at = source_.find("{%", at + 1)) {
      char open_sign = '\0';
      char close_sign = '\0';
      const size_t length = MatchEndRaw(at, open_sign, close_sign);
      if (length == 0) continue;
      std::string text(source_.substr(pos_, at - pos_));
      const int text_line = line_;
      line_ += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      if (open_sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      }
      EmitText(std::move(text), text_line);
      pos_ = at + length;
      AfterTagEnd(close_sign, true);
      return Status::Ok();
    }
    return Error("{% raw %} is never closed with {% endraw %}");
  }

  // Tokens inside {{ }} or {% %} up to the matching end.
  Status LexTag(bool block) {
    std::string brackets;  // open ( [ { not yet closed
    while (true) {
      while (pos_ < source_.size() && IsSpace(source_[pos_])) {
        if (source_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= source_.size())
        return Error(block ? "tag {% is never closed with %}" : "tag {{ is never closed with }}");
      const std::string_view rest = source_.substr(pos_);
      if (brackets.empty()) {
        const std::string_view end = block ? "%}" : "}}";
        char sign = '\0';
        if (rest.substr(0, 2) == end) {
        } else if (rest.size() >= 3 && rest.substr(1, 2) == end && (rest[0] == '-' || (block && rest[0] == '+'))) {
          sign = rest[0];
        } else {
          sign = 'x';
        }
        if (sign != 'x') {
          tokens_.push_back({block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", 0, 0.0, line_});
          pos_ += sign == '\0' ? 2 : 3;
          AfterTagEnd(sign, block);
          return Status::Ok();
        }
      }
      const char c = rest[0];
      if (IsNameStart(c)) {
        size_t length = 1;
        while (length < rest.size() && IsNameChar(rest[length])) ++length;
        tokens_.push_back({TokenKind::kName, std::string(rest.substr(0, length)), 0, 0.0, line_});
        pos_ += length;
      } else if (IsDigit(c)) {
        GLINT_RETURN_IF_ERROR(LexNumber());
      } else if (c == '\'' || c == '"') {
        GLINT_RETURN_IF_ERROR(LexString());
      } else {
        static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (std::string_view candidate : kTwoChar) {
          if (rest.substr(0, 2) == candidate) op = candidate;
        }
        if (op.empty()) {
          static constexpr std::string_view kOneChar = "+-*/%~<>=()[]{},.:|";
          if (kOneChar.find(c) == std::string_view::npos) {
            return Error(StrCat("unexpected character '", SanitizeUtf8(rest.substr(0, 1)), "' in a tag"));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          brackets.push_back(op[0]);
        } else if (op == ")" || op == "]" || op == "}") {
          const char expected = op == ")" ? '(' : op == "]" ? '[' : '{';
          if (brackets.empty() || brackets.back() != expected) return Error(StrCat("unbalanced '", op, "'"));
          brackets.pop_back();
        }
        tokens_.push_back({TokenKind::kOperator, op, 0, 0.0, line_});
        pos_ += op.size();
      }
    }
  }

  Status LexNumber() {
    const std::string_view rest = source_.substr(pos_);
    size_t length = 0;
    bool is_float = false;
    auto digits = [&]() {
      while (length < rest.size() && (IsDigit(rest[length]) ||
                                      (rest[length] == '_' && length + 1 < rest.size() && IsDigit(rest[length + 1])))) {
        ++length;
      }
    };
    digits();
    if (length + 1 < rest.size() && rest[length] == '.' && IsDigit(rest[length + 1])) {
      is_float = true;
      ++length;
      digits();
    }
    if (length < rest.size() && (rest[length] == 'e' || rest[length] == 'E')) {
      size_t probe = length + 1;
      if (probe < rest.size() && (rest[probe] == '+' || rest[probe] == '-')) ++probe;
      if (probe < rest.size() && IsDigit(rest[probe])) {
        is_float = true;
        length = probe;
        digits();
      }
    }
    std::string text;
    for (char c : rest.substr(0, length)) {
      if (c != '_') text.push_back(c);
    }
    Token token{is_float ? TokenKind::kFloat : TokenKind::kInteger, text, 0, 0.0, line_};
    if (is_float) {
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), token.number);
      if (error != std::errc() || !std::isfinite(token.number)) return Error(StrCat("bad number ", text));
    } else {
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), token.integer);
      if (error != std::errc()) return Error(StrCat("integer ", text, " does not fit in 64 bits"));
    }
    tokens_.push_back(std::move(token));
    pos_ += length;
    return Status::Ok();
  }

  // A quoted string with Python's escapes (\n \t \\ \' \" \xHH \uHHHH \UHHHHHHHH, octal); an unknown escape
  // keeps its backslash, as in Python.
  Status LexString() {
    const char quote = source_[pos_];
    const int start_line = line_;
    std::string value;
    size_t i = pos_ + 1;
    while (true) {
      if (i >= source_.size()) {
        line_ = start_line;
        return Error("string literal is never closed");
      }
      const char c = source_[i];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        value.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= source_.size()) return Error("string literal ends with a backslash");
      const char e = source_[i + 1];
      i += 2;
      GLINT_RETURN_IF_ERROR(LexEscape(e, i, value));
    }
    tokens_.push_back({TokenKind::kString, std::move(value), 0, 0.0, start_line});
    pos_ = i + 1;
    return Status::Ok();
  }

  // The escape `\e` of a string literal; `i` is just after `e` and moves past the escape's digits.
  Status LexEscape(char e, size_t& i, std::string& value) {
    switch (e) {
      case '\n':
        ++line_;
        return Status::Ok();  // line continuation
      case '\\':
      case '\'':
      case '"':
        value.push_back(e);
        return Status::Ok();
      case 'n':
        value.push_back('\n');
        return Status::Ok();
      case 't':
        value.push_back('\t');
        return Status::Ok();
      case 'r':
        value.push_back('\r');
        return Status::Ok();
      case 'a':
        value.push_back('\a');
        return Status::Ok();
      case 'b':
        value.push_back('\b');
        return Status::Ok();
      case 'f':
        value.push_back('\f');
        return Status::Ok();
      case 'v':
        value.push_back('\v');
        return Status::Ok();
      case 'x':
      case 'u':
      case 'U':
        return LexHexEscape(e, i, value);
      default:
        if (e >= '0' && e <= '7') {  // up to three octal digits
          char32_t code = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i < source_.size() && source_[i] >= '0' && source_[i] <= '7'; ++k, ++i) {
            code = code * 8 + static_cast<char32_t>(source_[i] - '0');
          }
          AppendUtf8(code, value);
        } else {
          value.push_back('\\');
          value.push_back(e);
        }
        return Status::Ok();
    }
  }

  // \xHH, \uHHHH, \UHHHHHHHH: exactly that many hex digits, a Unicode scalar value, appended as UTF-8.
  Status LexHexEscape(char e, size_t& i, std::string& value) {
    const int count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
    char32_t code = 0;
    for (int k = 0; k < count; ++k) {
      const int h = i < source_.size() ? HexValue(source_[i]) : -1;
      if (h < 0) return Error(StrCat("bad \\", e, " escape in a string literal"));
      code = code * 16 + static_cast<char32_t>(h);
      ++i;
    }
    if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return Error("string escape is not a Unicode scalar value");
    }
    AppendUtf8(code, value);
    return Status::Ok();
  }

  std::string_view source_;
  LexOptions options_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the next text starts at the beginning of a line
};

}  // namespace

Result<std::vector<Token>> Lex(std::string_view source, const LexOptions& options) {
  // As jinja2 does before lexing: \r\n and \r become \n, and one newline at the very end is dropped
  // (keep_trailing_newline is off in HF's environment).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized.push_back(source[i]);
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(normalized, options).Run();
}

}  // namespace glint::jinja
