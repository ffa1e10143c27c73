// UTF-8 helpers for a byte-level tokenizer: tokens are byte strings, text shown to people must be valid UTF-8.
//
// Well-formed UTF-8 (Unicode 15, table 3-7): lead C2..DF takes 1 continuation, E0..EF 2, F0..F4 3; continuation
// bytes are 80..BF except right after E0 (A0..BF), ED (80..9F, no surrogates), F0 (90..BF), F4 (80..8F, ≤ U+10FFFF).
// Ill-formed input is replaced "per maximal subpart" (Unicode §3.9, U+FFFD substitution of maximal subparts, the
// practice of the WHATWG decoder): each longest prefix of a well-formed sequence that is cut short, and each byte
// that cannot start one, becomes one U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace glint {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// Classifies the sequence starting at `text[0]` (text non-empty).
struct Utf8Scan {
  enum Kind {
    kComplete,    // `length` bytes form one well-formed character
    kInvalid,     // the first `length` bytes (≥ 1) are a maximal ill-formed subpart: replace them by one U+FFFD
    kIncomplete,  // all `length` bytes are a well-formed prefix that runs into the end of `text`
  } kind;
  size_t length;
};
Utf8Scan ScanUtf8(std::string_view text);

bool IsValidUtf8(std::string_view text);

// Returns `text` with every maximal ill-formed subpart (including an incomplete sequence at the end) replaced by
// U+FFFD. Valid text is returned unchanged.
std::string SanitizeUtf8(std::string_view text);

// Appends the UTF-8 encoding of `code_point` (≤ U+10FFFF, not a surrogate) to `out`.
void AppendUtf8(char32_t code_point, std::string& out);

// Space, tab, carriage return or line feed: the whitespace JSON allows between tokens, which the output parsers
// (reasoning_parser, tool_call_parser) trim around the model's tagged sections.
inline bool IsAsciiBlank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace glint
