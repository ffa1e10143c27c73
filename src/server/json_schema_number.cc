#include "server/json_schema_number.h"

#include <charconv>
#include <cmath>
#include <map>
#include <string_view>
#include <tuple>
#include <vector>

#include "server/json_schema_grammar.h"

namespace glint::server {
namespace {

using grammar::Element;
using grammar::Grammar;
using grammar::Sequence;

bool AllZeros(std::string_view digits) { return digits.find_first_not_of('0') == std::string_view::npos; }

// The digits after the integer part of a value whose integer part equals the bounds' integer parts. State: which
// bounds are still "equal so far" (an active lower bound forbids a smaller digit, an active upper bound a larger
// one; a digit that differs releases the bound) and how many fraction digits were written. Rules are memoised per
// state, so a fraction costs O(kMaxFractionDigits) rules.
class FractionRules {
 public:
  FractionRules(Grammar& g, const NumberBound* lo, const NumberBound* hi) : g_(g), lo_(lo), hi_(hi) {}

  // `(. digits)?` within the bounds; -1 when no fraction is in range.
  int32_t Tail() {
    std::vector<Sequence> alternatives;
    if (EndAllowed(lo_ != nullptr, hi_ != nullptr, 0)) alternatives.push_back({});
    const int32_t digits = Digits(lo_ != nullptr, hi_ != nullptr, 0);
    if (digits >= 0) alternatives.push_back({Element::Byte('.'), Element::Rule(digits)});
    if (alternatives.empty()) return -1;
    return g_.AddRuleWith("fraction", std::move(alternatives));
  }

 private:
  // Digit `used` of a bound's fraction (zeros past its end).
  static char DigitOf(const NumberBound* bound, int used) {
    const std::string& f = bound->value.fraction;
    return used < static_cast<int>(f.size()) ? f[static_cast<size_t>(used)] : '0';
  }
  static std::string_view Rest(const NumberBound* bound, int used) {
    const std::string& f = bound->value.fraction;
    return used < static_cast<int>(f.size()) ? std::string_view(f).substr(static_cast<size_t>(used)) : "";
  }
  // The fraction may stop after `used` digits: the digits left are zeros, compared with the bounds' rests.
  bool EndAllowed(bool lo_active, bool hi_active, int used) const {
    const bool lo_ok = !lo_active || (AllZeros(Rest(lo_, used)) && !lo_->exclusive);
    const bool hi_ok = !hi_active || !hi_->exclusive || !AllZeros(Rest(hi_, used));
    return lo_ok && hi_ok;
  }
  // One or more digits from position `used` on; -1 when none fits.
  int32_t Digits(bool lo_active, bool hi_active, int used) {
    const auto key = std::make_tuple(lo_active, hi_active, used);
    if (const auto found = digits_.find(key); found != digits_.end()) return found->second;
    std::vector<Sequence> alternatives;
    if (used < kMaxFractionDigits) {
      int c = '0';
      while (c <= '9') {
        const auto [alive, next_lo, next_hi] = Next(lo_active, hi_active, used, static_cast<char>(c));
        int end = c;
        while (end + 1 <= '9' && Next(lo_active, hi_active, used, static_cast<char>(end + 1)) ==
                                     std::make_tuple(alive, next_lo, next_hi)) {
          ++end;
        }
        const int32_t after = alive ? After(next_lo, next_hi, used + 1) : -1;
        if (after >= 0) {
          alternatives.push_back(
              {Element::Bytes(static_cast<uint8_t>(c), static_cast<uint8_t>(end)), Element::Rule(after)});
        }
        c = end + 1;
      }
    }
    const int32_t rule = alternatives.empty() ? -1 : g_.AddRuleWith("fraction.digits", std::move(alternatives));
    digits_[key] = rule;
    return rule;
  }
  // After `used` digits: stop here, or more digits.
  int32_t After(bool lo_active, bool hi_active, int used) {
    const auto key = std::make_tuple(lo_active, hi_active, used);
    if (const auto found = after_.find(key); found != after_.end()) return found->second;
    std::vector<Sequence> alternatives;
    if (EndAllowed(lo_active, hi_active, used)) alternatives.push_back({});
    const int32_t more = Digits(lo_active, hi_active, used);
    if (more >= 0) alternatives.push_back({Element::Rule(more)});
    const int32_t rule = alternatives.empty() ? -1 : g_.AddRuleWith("fraction.after", std::move(alternatives));
    after_[key] = rule;
    return rule;
  }
  // Digit c at position `used`: (allowed, lower bound still equal, upper bound still equal).
  std::tuple<bool, bool, bool> Next(bool lo_active, bool hi_active, int used, char c) const {
    bool next_lo = false, next_hi = false;
    if (lo_active) {
      const char bound = DigitOf(lo_, used);
      if (c < bound) return {false, false, false};
      next_lo = c == bound;
    }
    if (hi_active) {
      const char bound = DigitOf(hi_, used);
      if (c > bound) return {false, false, false};
      next_hi = c == bound;
    }
    return {true, next_lo, next_hi};
  }

  Grammar& g_;
  const NumberBound* lo_;
  const NumberBound* hi_;
  std::map<std::tuple<bool, bool, int>, int32_t> digits_, after_;
};

int64_t IntegerPart(const Decimal& d) { return std::stoll(d.integer); }

// Alternatives for u ≥ 0 with lo (<)≤ u (<)≤ hi (hi absent: unbounded), lo.value and hi.value non-negative.
void NonNegativeDecimals(Grammar& g, const NumberBound& lo, const std::optional<NumberBound>& hi,
                         std::vector<Sequence>& out) {
  const int64_t lo_integer = IntegerPart(lo.value);
  const int64_t hi_integer = hi ? IntegerPart(hi->value) : kMaxIntegerPart;
  if (hi_integer < lo_integer) return;
  const auto with_tail = [&](Sequence head, int32_t tail) {
    if (tail < 0) return;
    head.push_back(Element::Rule(tail));
    out.push_back(std::move(head));
  };
  // Integer parts strictly between the bounds' take any fraction.
  const int64_t first = lo_integer + 1, last = hi ? hi_integer - 1 : kMaxIntegerPart;
  if (first <= last) {
    with_tail({Element::Rule(AddIntegerRange(g, first, last))}, FractionRules(g, nullptr, nullptr).Tail());
  }
  if (hi && hi_integer == lo_integer) {
    with_tail(Grammar::Literal(lo.value.integer), FractionRules(g, &lo, &*hi).Tail());
    return;
  }
  with_tail(Grammar::Literal(lo.value.integer), FractionRules(g, &lo, nullptr).Tail());
  if (hi) with_tail(Grammar::Literal(hi->value.integer), FractionRules(g, nullptr, &*hi).Tail());
}

bool IsZero(const Decimal& d) { return d.integer == "0" && d.fraction.empty(); }

NumberBound Magnitude(const NumberBound& bound) {
  NumberBound out = bound;
  out.value.negative = false;
  return out;
}

}  // namespace

Result<Decimal> DecimalOf(double value) {
  if (!std::isfinite(value) || std::fabs(value) >= 1e18) {
    return InvalidArgument("a number bound must be finite and within ±1e18, not ", value);
  }
  char buffer[64];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed);
  if (error != std::errc()) return InternalError("cannot print the number bound ", value);
  std::string_view text(buffer, static_cast<size_t>(end - buffer));
  Decimal d;
  if (!text.empty() && text[0] == '-') {
    d.negative = true;
    text.remove_prefix(1);
  }
  const size_t point = text.find('.');
  std::string integer(text.substr(0, point));
  std::string fraction(point == std::string_view::npos ? "" : text.substr(point + 1));
  integer.erase(0, std::min(integer.find_first_not_of('0'), integer.size()));
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
  d.integer = integer.empty() ? "0" : integer;
  d.fraction = fraction;
  if (IsZero(d)) d.negative = false;  // -0 is 0
  return d;
}

Result<int32_t> AddBoundedNumber(Grammar& g, const std::optional<NumberBound>& lo,
                                 const std::optional<NumberBound>& hi) {
  std::vector<Sequence> alternatives;
  // v ≥ 0, when the upper bound allows one.
  const bool hi_non_negative = hi && !hi->value.negative;
  if (!hi || (hi_non_negative && (!IsZero(hi->value) || !hi->exclusive))) {
    const NumberBound floor = lo && !lo->value.negative ? *lo : NumberBound{};  // default: 0 inclusive
    NonNegativeDecimals(g, floor, hi, alternatives);
  }
  // v < 0 as "-" then u = −v > 0, with the bounds mirrored (-0 is never written).
  if (!lo || lo->value.negative) {
    const NumberBound u_lo = hi && hi->value.negative ? Magnitude(*hi) : NumberBound{Decimal{}, /*exclusive=*/true};
    std::optional<NumberBound> u_hi;
    if (lo) u_hi = Magnitude(*lo);
    std::vector<Sequence> negative;
    NonNegativeDecimals(g, u_lo, u_hi, negative);
    if (!negative.empty()) {
      alternatives.push_back({Element::Byte('-'), Element::Rule(g.AddRuleWith("negative", std::move(negative)))});
    }
  }
  if (alternatives.empty()) return InvalidArgument("the bounds exclude every number");
  return g.AddRuleWith("number", std::move(alternatives));
}

}  // namespace glint::server
