// Small text helpers for HTTP header values (http_parse.cc, multipart.cc): header names and tokens compare
// case-insensitively in ASCII, and values carry optional whitespace (spaces and tabs) around them (RFC 9110 §5.5).
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace glint::server {

inline std::string AsciiLowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// `text` without the spaces and tabs around it.
inline std::string_view TrimSpaceTab(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace glint::server
