// Tests of the Jinja-subset interpreter ({% if x is name %}), with jinja2's semantics.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <initializer_list>
#include <limits>

#include "tokenizer/jinja_builtin_helpers.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/utf8.h"

namespace glint::jinja {
using namespace detail;  // NOLINT(google-build-using-namespace): the builtins' own helpers

Result<bool> ApplyTest(std::string_view name, const Value& value, const CallArgs& args) {
  auto argument = [&](size_t i) -> Result<Value> {
    if (i < args.positional.size()) return args.positional[i];
    if (i == 0 && !args.keyword.empty()) return args.keyword[0].second;
    return InvalidArgument("the test '", name, "' needs an argument");
  };
  if (name == "defined") return !value.is_undefined();
  if (name == "undefined") return value.is_undefined();
  if (name == "none") return value.is_none();
  if (name == "boolean") return value.is_bool();
  if (name == "true") return value.is_bool() && value.as_bool();
  if (name == "false") return value.is_bool() && !value.as_bool();
  if (name == "string") return value.is_string();
  if (name == "number") return value.is_number();
  if (name == "integer") return value.is_int();
  if (name == "float") return value.is_float();
  if (name == "mapping") return value.is_object() && !value.as_object().is_namespace;
  if (name == "iterable") {
    return value.is_undefined() || value.is_string() || value.is_array() ||
           (value.is_object() && !value.as_object().is_namespace);
  }
  if (name == "sequence") {
    return value.is_string() || value.is_array() || (value.is_object() && !value.as_object().is_namespace);
  }
  if (name == "callable") return value.is_callable();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    if (!value.is_string()) return false;
    bool cased = false;
    for (char c : value.as_string()) {
      if (!IsAsciiLetter(c)) continue;
      cased = true;
      if (name == "lower" ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) return false;
    }
    return cased;
  }
  if (name == "odd" || name == "even") {
    if (!value.is_int() && !value.is_bool()) return TypeError(StrCat("the test '", name, "' needs an integer"), value);
    const bool odd = (value.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "divisibleby") {
    GLINT_ASSIGN_OR_RETURN(Value divisor, argument(0));
    if (!value.is_number() || !divisor.is_number()) return InvalidArgument("divisibleby needs numbers");
    GLINT_ASSIGN_OR_RETURN(Value remainder, BinaryOperation("%", value, divisor, ValueLimits{}));
    return remainder.as_float() == 0.0;
  }
  if (name == "in") {
    GLINT_ASSIGN_OR_RETURN(Value container, argument(0));
    return Compare("in", value, container);
  }
  if (name == "sameas") {
    GLINT_ASSIGN_OR_RETURN(Value other, argument(0));
    if (value.kind() != other.kind()) return false;
    if (value.is_array()) return &value.as_array() == &other.as_array();
    if (value.is_object()) return &value.as_object() == &other.as_object();
    return Equal(value, other);
  }
  if (name == "filter") {
    GLINT_ASSIGN_OR_RETURN(Value filter, argument(0));
    return filter.is_string() && HasFilter(filter.as_string());
  }
  static constexpr std::pair<std::string_view, std::string_view> kComparisons[] = {
      {"eq", "=="}, {"equalto", "=="},    {"==", "=="}, {"ne", "!="}, {"!=", "!="},
      {"lt", "<"},  {"lessthan", "<"},    {"<", "<"},   {"le", "<="}, {"<=", "<="},
      {"gt", ">"},  {"greaterthan", ">"}, {">", ">"},   {"ge", ">="}, {">=", ">="}};
  for (const auto& [test, op] : kComparisons) {
    if (name == test) {
      GLINT_ASSIGN_OR_RETURN(Value other, argument(0));
      return Compare(op, value, other);
    }
  }
  return InvalidArgument("unknown test '", name, "'");
}

}  // namespace glint::jinja
