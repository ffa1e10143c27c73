// Operators, indexing, slicing and iteration of the Jinja-subset interpreter, with Python's semantics.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <initializer_list>
#include <limits>
#include <optional>

#include "tokenizer/jinja_builtin_helpers.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/utf8.h"

namespace glint::jinja {
using namespace detail;  // NOLINT(google-build-using-namespace): the builtins' own helpers

std::vector<std::string> SplitCharacters(std::string_view text) {
  std::vector<std::string> pieces;
  pieces.reserve(text.size());
  while (!text.empty()) {
    const Utf8Scan scan = ScanUtf8(text);
    const size_t length = std::max<size_t>(scan.length, 1);
    pieces.emplace_back(text.substr(0, length));
    text.remove_prefix(length);
  }
  return pieces;
}

Result<Value> GetAttribute(const Value& object, std::string_view name) {
  if (object.is_undefined()) {
    if (object.undefined_name().empty()) return InvalidArgument("an undefined value has no attribute '", name, "'");
    return InvalidArgument("'", object.undefined_name(), "' is undefined");
  }
  if (object.is_object()) {
    const Value* found = object.as_object().Find(name);
    if (found != nullptr) return *found;
  }
  return Value::Undefined(std::string(name));
}

Result<Value> GetItem(const Value& object, const Value& key) {
  if (object.is_undefined()) {
    if (object.undefined_name().empty()) return InvalidArgument("an undefined value cannot be subscripted");
    return InvalidArgument("'", object.undefined_name(), "' is undefined");
  }
  if (object.is_object()) {
    if (!key.is_string()) return Value::Undefined("");
    const Value* found = object.as_object().Find(key.as_string());
    return found != nullptr ? *found : Value::Undefined(key.as_string());
  }
  if ((object.is_array() || object.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t index = key.as_int();
    if (object.is_array()) {
      const int64_t size = static_cast<int64_t>(object.as_array().size());
      if (index < 0) index += size;
      if (index < 0 || index >= size) return Value::Undefined("");
      return object.as_array()[static_cast<size_t>(index)];
    }
    std::vector<std::string> pieces = SplitCharacters(object.as_string());
    const int64_t size = static_cast<int64_t>(pieces.size());
    if (index < 0) index += size;
    if (index < 0 || index >= size) return Value::Undefined("");
    return Value(std::move(pieces[static_cast<size_t>(index)]));
  }
  if (key.is_string()) return GetAttribute(object, key.as_string());
  return Value::Undefined("");
}

Result<Value> GetSlice(const Value& object, const Value& start, const Value& stop, const Value& step,
                       const ValueLimits& limits) {
  auto bound = [](const Value& v, std::string_view what) -> Result<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (!v.is_int() && !v.is_bool()) return TypeError(StrCat("slice ", what, " must be an integer"), v);
    return std::optional<int64_t>(v.as_int());
  };
  GLINT_ASSIGN_OR_RETURN(std::optional<int64_t> first, bound(start, "start"));
  GLINT_ASSIGN_OR_RETURN(std::optional<int64_t> last, bound(stop, "stop"));
  GLINT_ASSIGN_OR_RETURN(std::optional<int64_t> stride_opt, bound(step, "step"));
  const int64_t stride = stride_opt.value_or(1);
  if (stride == 0) return InvalidArgument("slice step cannot be zero");
  std::vector<Value> items;
  std::vector<std::string> pieces;
  int64_t size = 0;
  if (object.is_array()) {
    size = static_cast<int64_t>(object.as_array().size());
  } else if (object.is_string()) {
    pieces = SplitCharacters(object.as_string());
    size = static_cast<int64_t>(pieces.size());
  } else {
    return TypeError("only lists and strings can be sliced", object);
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) x += size;
    if (stride > 0) return std::clamp<int64_t>(x, 0, size);
    return std::clamp<int64_t>(x, -1, size - 1);
  };
  const int64_t begin = clamp(first, stride > 0 ? 0 : size - 1);
  const int64_t end = clamp(last, stride > 0 ? size : -1);
  Array out_items;
  std::string out_text;
  for (int64_t i = begin; stride > 0 ? i < end : i > end; i += stride) {
    if (object.is_array()) {
      out_items.push_back(object.as_array()[static_cast<size_t>(i)]);
    } else {
      out_text += pieces[static_cast<size_t>(i)];
    }
  }
  GLINT_RETURN_IF_ERROR(CheckList(limits, out_items.size()));
  if (object.is_array()) return Value(std::move(out_items));
  return Value(std::move(out_text));
}

Result<std::vector<Value>> Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kArray:
      return value.as_array();
    case Value::Kind::kObject: {
      if (value.as_object().is_namespace) return TypeError("a namespace is not iterable", value);
      std::vector<Value> keys;
      for (const auto& [key, item] : value.as_object().entries) keys.push_back(Value(key));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> characters;
      for (auto& piece : SplitCharacters(value.as_string())) characters.push_back(Value(std::move(piece)));
      return characters;
    }
    default:
      return TypeError("the value is not iterable", value);
  }
}

Result<Value> Negate(const Value& value) {
  if (value.is_float()) return Value(-value.as_float());
  if (value.is_int() || value.is_bool()) {
    if (value.as_int() == std::numeric_limits<int64_t>::min()) return OutOfRange("integer overflow in negation");
    return Value(-value.as_int());
  }
  return TypeError("bad operand for unary -", value);
}

namespace {

Status UnsupportedOperands(std::string_view op, const Value& left, const Value& right) {
  return InvalidArgument("unsupported operand types for ", op, ": ", left.TypeName(), " and ", right.TypeName());
}

// + - * ** // % on two floats (Python: % and // floor, the remainder takes the divisor's sign).
Result<Value> FloatArithmetic(std::string_view op, double a, double b) {
  if (op == "+") return Value(a + b);
  if (op == "-") return Value(a - b);
  if (op == "*") return Value(a * b);
  if (op == "**") return Value(std::pow(a, b));
  if (b == 0.0) return InvalidArgument(op == "//" ? "integer division by zero" : "modulo by zero");
  if (op == "//") return Value(std::floor(a / b));
  if (op == "%") {
    double r = std::fmod(a, b);
    if (r != 0.0 && ((r < 0) != (b < 0))) r += b;  // Python: the result takes the divisor's sign
    return Value(r);
  }
  return InvalidArgument("unsupported operator ", op, " on numbers");
}

// + - * ** // % on two integers, overflow refused (Python's integers are unbounded; glint's are 64-bit).
Result<Value> IntegerArithmetic(std::string_view op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(a, b, &r)) return OutOfRange("integer overflow in +");
    return Value(r);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(a, b, &r)) return OutOfRange("integer overflow in -");
    return Value(r);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(a, b, &r)) return OutOfRange("integer overflow in *");
    return Value(r);
  }
  if (op == "**") {
    if (b < 0) return Value(std::pow(static_cast<double>(a), static_cast<double>(b)));
    int64_t result = 1;
    int64_t base = a;
    for (int64_t e = b; e > 0; e >>= 1) {
      if (e & 1) {
        if (__builtin_mul_overflow(result, base, &result)) return OutOfRange("integer overflow in **");
      }
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) return OutOfRange("integer overflow in **");
    }
    return Value(result);
  }
  if (b == 0) return InvalidArgument(op == "//" ? "integer division by zero" : "modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) return OutOfRange("integer overflow in ", op);
  int64_t quotient = a / b;
  int64_t remainder = a % b;
  if (remainder != 0 && ((remainder < 0) != (b < 0))) {  // floor, as Python
    --quotient;
    remainder += b;
  }
  if (op == "//") return Value(quotient);
  if (op == "%") return Value(remainder);
  return InvalidArgument("unsupported operator ", op, " on numbers");
}

// string + string, list + list (within the limits).
Result<Value> Concatenate(const Value& left, const Value& right, const ValueLimits& limits) {
  if (left.is_string() && right.is_string()) {
    GLINT_RETURN_IF_ERROR(CheckString(limits, left.as_string().size() + right.as_string().size()));
    return Value(left.as_string() + right.as_string());
  }
  if (left.is_array() && right.is_array()) {
    GLINT_RETURN_IF_ERROR(CheckList(limits, left.as_array().size() + right.as_array().size()));
    Array joined = left.as_array();
    joined.insert(joined.end(), right.as_array().begin(), right.as_array().end());
    return Value(std::move(joined));
  }
  if (left.is_undefined() || right.is_undefined()) {
    const Value& undefined = left.is_undefined() ? left : right;
    if (!undefined.undefined_name().empty()) return InvalidArgument("'", undefined.undefined_name(), "' is undefined");
  }
  return UnsupportedOperands("+", left, right);
}

// string * int, list * int (either order), within the limits; nothing when the operands are not a repetition.
std::optional<Result<Value>> Repeat(const Value& left, const Value& right, const ValueLimits& limits) {
  const bool left_repeats = (left.is_string() || left.is_array()) && (right.is_int() || right.is_bool());
  const bool right_repeats = (right.is_string() || right.is_array()) && (left.is_int() || left.is_bool());
  if (left_repeats || right_repeats) {
    const Value& sequence = left_repeats ? left : right;
    const int64_t times = std::max<int64_t>(0, (left_repeats ? right : left).as_int());
    if (sequence.is_string()) {
      const size_t unit = sequence.as_string().size();
      if (unit > 0 && static_cast<uint64_t>(times) > limits.max_string_bytes / unit + 1) {
        return CheckString(limits, limits.max_string_bytes + 1);
      }
      GLINT_RETURN_IF_ERROR(CheckString(limits, unit * static_cast<size_t>(times)));
      std::string out;
      for (int64_t i = 0; i < times; ++i) out += sequence.as_string();
      return Value(std::move(out));
    }
    const size_t unit = sequence.as_array().size();
    if (unit > 0 && static_cast<uint64_t>(times) > limits.max_list_items / unit + 1) {
      return CheckList(limits, limits.max_list_items + 1);
    }
    GLINT_RETURN_IF_ERROR(CheckList(limits, unit * static_cast<size_t>(times)));
    Array out;
    for (int64_t i = 0; i < times; ++i) out.insert(out.end(), sequence.as_array().begin(), sequence.as_array().end());
    return Value(std::move(out));
  }
  return std::nullopt;
}

}  // namespace

Result<Value> BinaryOperation(std::string_view op, const Value& left, const Value& right, const ValueLimits& limits) {
  if (left.is_number() && right.is_number()) {
    if (op == "/") {
      if (right.as_float() == 0.0) return InvalidArgument("division by zero");
      return Value(left.as_float() / right.as_float());
    }
    if (left.is_float() || right.is_float()) return FloatArithmetic(op, left.as_float(), right.as_float());
    return IntegerArithmetic(op, left.as_int(), right.as_int());
  }
  if (op == "+") return Concatenate(left, right, limits);
  if (op == "*") {
    if (auto repeated = Repeat(left, right, limits)) return *std::move(repeated);
  }
  if (op == "%" && left.is_string()) {
    return Unimplemented("the % string formatting operator is not supported; use ~ or str.format()");
  }
  return UnsupportedOperands(op, left, right);
}

Result<bool> Compare(std::string_view op, const Value& left, const Value& right) {
  if (op == "==") return Equal(left, right);
  if (op == "!=") return !Equal(left, right);
  if (op == "<") return Less(left, right);
  if (op == ">") return Less(right, left);
  if (op == "<=") {
    GLINT_ASSIGN_OR_RETURN(bool greater, Less(right, left));
    return !greater;
  }
  if (op == ">=") {
    GLINT_ASSIGN_OR_RETURN(bool less, Less(left, right));
    return !less;
  }
  if (op == "in" || op == "not in") {
    bool found = false;
    if (right.is_string()) {
      if (!left.is_string()) return TypeError("'in <string>' requires a string on the left", left);
      found = right.as_string().find(left.as_string()) != std::string::npos;
    } else if (right.is_array()) {
      for (const Value& item : right.as_array()) {
        if (Equal(item, left)) {
          found = true;
          break;
        }
      }
    } else if (right.is_object()) {
      found = left.is_string() && right.as_object().Find(left.as_string()) != nullptr;
    } else if (!right.is_undefined()) {
      return TypeError("the right side of 'in' is not a container", right);
    }
    return op == "in" ? found : !found;
  }
  return InvalidArgument("unknown comparison ", op);
}

}  // namespace glint::jinja
