// Lexer of the Jinja-subset interpreter: template text → text pieces and the tokens inside {{ }} and {% %}.
//
// Whitespace control follows jinja2 with the settings HF uses for chat templates (trim_blocks and lstrip_blocks
// on): `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}`/`-}}`/`-#}` all whitespace after it; a block
// or comment tag removes one newline right after it (trim_blocks, `+%}` keeps it); spaces and tabs between the
// start of a line and a block or comment tag are dropped (lstrip_blocks, `{%+` keeps them). Comments vanish;
// `{% raw %}…{% endraw %}` becomes text. Tag ends are recognised only outside brackets, so `{{ {'a': {}} }}` works.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint::jinja {

enum class TokenKind : uint8_t {
  kText,           // literal template text (whitespace control already applied)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifier or keyword
  kString,         // string literal, escapes decoded
  kInteger,
  kFloat,
  kOperator,  // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
  kEnd,       // end of the template
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;     // kText, kName, kString (decoded), kOperator
  int64_t integer = 0;  // kInteger
  double number = 0.0;  // kFloat
  int line = 1;         // 1-based line of the token's first character
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors name the line: an unclosed tag, comment or string, an unbalanced bracket, a character that starts no
// token, a bad escape or number.
Result<std::vector<Token>> Lex(std::string_view source, const LexOptions& options = {});

}  // namespace glint::jinja
