#include "tokenizer/utf8.h"

#include <cstdint>

namespace glint {

Utf8Scan ScanUtf8(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return {Utf8Scan::kComplete, 1};
  size_t continuations;
  uint8_t second_low = 0x80, second_high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuations = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    continuations = 2;
    if (lead == 0xE0) second_low = 0xA0;   // no overlong 3-byte forms
    if (lead == 0xED) second_high = 0x9F;  // no surrogates U+D800..DFFF
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    continuations = 3;
    if (lead == 0xF0) second_low = 0x90;   // no overlong 4-byte forms
    if (lead == 0xF4) second_high = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Scan::kInvalid, 1};  // 80..C1 (continuation or overlong lead) and F5..FF never start a character
  }
  for (size_t i = 1; i <= continuations; ++i) {
    if (i >= text.size()) return {Utf8Scan::kIncomplete, i};
    const uint8_t low = (i == 1) ? second_low : 0x80;
    const uint8_t high = (i == 1) ? second_high : 0xBF;
    if (byte(i) < low || byte(i) > high) return {Utf8Scan::kInvalid, i};
  }
  return {Utf8Scan::kComplete, continuations + 1};
}

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    Utf8Scan scan = ScanUtf8(text.substr(i));
    if (scan.kind != Utf8Scan::kComplete) return false;
    i += scan.length;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    Utf8Scan scan = ScanUtf8(text.substr(i));
    if (scan.kind == Utf8Scan::kComplete) {
      out.append(text.substr(i, scan.length));
    } else {
      out.append(kReplacementCharacter);
    }
    i += scan.length;
  }
  return out;
}

void AppendUtf8(char32_t code_point, std::string& out) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

}  // namespace glint
