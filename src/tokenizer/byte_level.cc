#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace glint {
namespace {

bool MapsToItself(int byte) { return (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174; }

struct ByteLevelTables {
  std::array<std::string, 256> spelling;  // byte → UTF-8 of its character
  std::array<int16_t, 324> byte_of_char;  // code point (< 256 + 68) → byte, or -1
  ByteLevelTables() {
    byte_of_char.fill(-1);
    char32_t next_shifted = 256;
    for (int byte = 0; byte < 256; ++byte) {
      char32_t code_point = MapsToItself(byte) ? static_cast<char32_t>(byte) : next_shifted++;
      AppendUtf8(code_point, spelling[byte]);
      byte_of_char[code_point] = static_cast<int16_t>(byte);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

std::string_view ByteLevelCharOf(uint8_t byte) { return Tables().spelling[byte]; }

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(ByteLevelCharOf(static_cast<uint8_t>(c)));
  return out;
}

std::optional<std::string> ByteLevelDecode(std::string_view spelling) {
  const ByteLevelTables& tables = Tables();
  std::string out;
  out.reserve(spelling.size());
  size_t i = 0;
  while (i < spelling.size()) {
    Utf8Scan scan = ScanUtf8(spelling.substr(i));
    if (scan.kind != Utf8Scan::kComplete || scan.length > 2) return std::nullopt;  // alphabet is < U+0800
    char32_t code_point;
    if (scan.length == 1) {
      code_point = static_cast<uint8_t>(spelling[i]);
    } else {
      code_point = ((static_cast<uint8_t>(spelling[i]) & 0x1Fu) << 6) | (static_cast<uint8_t>(spelling[i + 1]) & 0x3Fu);
    }
    if (code_point >= tables.byte_of_char.size() || tables.byte_of_char[code_point] < 0) return std::nullopt;
    out.push_back(static_cast<char>(tables.byte_of_char[code_point]));
    i += scan.length;
  }
  return out;
}

}  // namespace glint
