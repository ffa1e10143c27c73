// Bounded JSON numbers as digit-level grammar rules (docs/server.md "Structured output": `minimum`, `maximum`,
// `exclusiveMinimum`, `exclusiveMaximum` on `number`, integral or not).
//
// A bound is compared exactly in decimal, as JSON Schema defines it (a number's value is the mathematical value of
// its text): v = I.F is above L = Li.Lf when I > Li, or I = Li and F > Lf digit by digit (the shorter one padded
// with zeros). The grammar follows that comparison one digit at a time, so every text it allows is in range and
// every in-range text of the output form is allowed. A bound is read as the shortest decimal that round-trips to
// its double, which is the text the schema wrote whenever it has at most 15 significant digits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "grammar/grammar.h"

namespace glint::server {

// A decimal value: sign, integer digits (no leading zeros, "0" for zero) and fraction digits (no trailing zeros).
struct Decimal {
  bool negative = false;
  std::string integer = "0";
  std::string fraction;
};
// The exact decimal of `value`'s shortest round-trip text; refuses |value| ≥ 1e18 and non-finite values.
Result<Decimal> DecimalOf(double value);

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

// Output form of numbers, as llama.cpp's JSON-schema grammars bound them: at most this many integer and fraction
// digits, and an exponent of at most kMaxExponentDigits digits (unbounded numbers only; bounded ones have none).
// A weak or looping model must close its number within these instead of writing digits until max_tokens.
inline constexpr int kMaxIntegerDigits = 16;
inline constexpr int kMaxFractionDigits = 16;
inline constexpr int kMaxExponentDigits = 3;
inline constexpr int64_t kMaxIntegerPart = 9999999999999999;  // kMaxIntegerDigits nines
static_assert(kMaxIntegerPart / 1000000000000000 == 9 && kMaxIntegerPart % 10 == 9, "16 nines");

// A rule for the JSON numbers v with lo (<)≤ v (<)≤ hi (either may be absent), as `-`? integer (`.` digits)?;
// an error when no number of that form is in range.
Result<int32_t> AddBoundedNumber(grammar::Grammar& grammar, const std::optional<NumberBound>& lo,
                                 const std::optional<NumberBound>& hi);

}  // namespace glint::server
