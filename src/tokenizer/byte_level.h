// The byte-level alphabet of GPT-2-style BPE (Radford et al. 2019, used by HF `ByteLevel` and GLM's tokenizer).
//
// tokenizer.json stores each token as a printable string: every byte b maps to one Unicode character. Printable
// Latin-1 bytes map to themselves ('!'..'~' = 33..126, '¡'..'¬' = 161..172, '®'..'ÿ' = 174..255); the other 68
// bytes (0..32, 127..160, 173) map, in increasing byte order, to U+0100, U+0101, ... (so space 0x20 is U+0120 'Ġ'
// and newline 0x0A is U+010A 'Ċ'). The map is a bijection, so every byte string has exactly one spelling.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace glint {

// The UTF-8 spelling of one byte's character.
std::string_view ByteLevelCharOf(uint8_t byte);

// Raw bytes → the tokenizer.json spelling (one character per byte).
std::string ByteLevelEncode(std::string_view bytes);

// The tokenizer.json spelling → raw bytes, or nullopt when `spelling` has a character outside the alphabet (or is
// not valid UTF-8).
std::optional<std::string> ByteLevelDecode(std::string_view spelling);

}  // namespace glint
