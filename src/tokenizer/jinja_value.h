// Values of the Jinja-subset interpreter that renders chat templates (see jinja.h and docs/chat-template.md).
//
// Python semantics, because HF renders chat templates with Python's jinja2: ints are exact (int64 here, overflow is
// an error), `/` gives a float, bool behaves as an int in arithmetic and comparison, dicts keep insertion order,
// `{{ x }}` prints `str(x)` (lists and dicts as Python reprs: `['a', 1]`, `{'k': None}`), `tojson` prints what
// Python's json.dumps prints. Arrays and objects are shared, immutable after construction (HF's sandbox forbids
// mutation); the one mutable thing is a namespace() object, whose attributes `{% set ns.x = ... %}` assigns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/status.h"

namespace glint::jinja {

class Value;
struct Object;
struct Callable;
using Array = std::vector<Value>;

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kCallable };

  Value() = default;  // undefined
  static Value Undefined(std::string name) {
    Value v;
    v.storage_ = UndefinedName{std::move(name)};
    return v;
  }
  static Value None() {
    Value v;
    v.storage_ = nullptr;
    return v;
  }
  Value(bool b) : storage_(b) {}                                       // NOLINT(google-explicit-constructor)
  Value(int64_t i) : storage_(i) {}                                    // NOLINT(google-explicit-constructor)
  Value(int i) : storage_(static_cast<int64_t>(i)) {}                  // NOLINT(google-explicit-constructor)
  Value(double f) : storage_(f) {}                                     // NOLINT(google-explicit-constructor)
  Value(std::string s) : storage_(std::move(s)) {}                     // NOLINT(google-explicit-constructor)
  Value(std::string_view s) : storage_(std::string(s)) {}              // NOLINT(google-explicit-constructor)
  Value(const char* s) : storage_(std::string(s)) {}                   // NOLINT(google-explicit-constructor)
  Value(Array a) : storage_(std::make_shared<Array>(std::move(a))) {}  // NOLINT(google-explicit-constructor)
  // A tuple is a list that prints as (a, b): tuple literals, dict.items() pairs, dictsort.
  static Value Tuple(Array a) {
    Value v(std::move(a));
    v.tuple_ = true;
    return v;
  }
  Value(Object o);                                                      // NOLINT(google-explicit-constructor)
  Value(std::shared_ptr<Object> o) : storage_(std::move(o)) {}          // NOLINT(google-explicit-constructor)
  Value(std::shared_ptr<const Callable> c) : storage_(std::move(c)) {}  // NOLINT(google-explicit-constructor)

  Kind kind() const { return static_cast<Kind>(storage_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::kString; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_tuple() const { return is_array() && tuple_; }
  bool is_object() const { return kind() == Kind::kObject; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(storage_); }
  int64_t as_int() const { return is_bool() ? int64_t{as_bool()} : std::get<int64_t>(storage_); }
  double as_float() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(storage_); }
  const Array& as_array() const { return *std::get<std::shared_ptr<Array>>(storage_); }
  const Object& as_object() const { return *std::get<std::shared_ptr<Object>>(storage_); }
  const std::shared_ptr<Object>& object_ptr() const { return std::get<std::shared_ptr<Object>>(storage_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(storage_); }
  // The name an undefined value was looked up by ("" when unknown), for error messages.
  const std::string& undefined_name() const { return std::get<UndefinedName>(storage_).name; }

  // Python's bool(x): empty strings/containers, 0, None and undefined are false.
  bool Truthy() const;
  // The Python type name, for error messages ("str", "int", "list", "dict", "NoneType", "undefined").
  std::string_view TypeName() const;

 private:
  struct UndefinedName {
    std::string name;
  };
  std::variant<UndefinedName, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<Array>,
               std::shared_ptr<Object>, std::shared_ptr<const Callable>>
      storage_;
  bool tuple_ = false;
};

// A dict (string keys, insertion order) or a namespace() object.
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;

  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);  // replaces the value of an existing key in place
};

// Positional and keyword arguments of a call, filter or test (the filtered value is not included).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A function value: a macro, or a builtin such as range() or loop.cycle().
struct Callable {
  std::string name;
  std::function<Result<Value>(const CallArgs& args)> function;
};

// Python's `a == b` (1 == 1.0 == True; lists and dicts element-wise; undefined equals only undefined).
bool Equal(const Value& a, const Value& b);

// Python's str(x), what `{{ x }}` prints: strings as they are, None → "None", True → "True", floats as repr()
// (1.0, 1e-05), lists and dicts as their repr; undefined → "".
std::string ToText(const Value& value);
// Python's repr(x) (strings quoted and escaped).
std::string ToRepr(const Value& value);
// Python's repr of a float: the shortest string that reads back exactly, fixed notation for exponents in
// [-4, 16), else scientific with a two-digit exponent; "inf", "-inf", "nan".
std::string FloatRepr(double value);

struct JsonOptions {
  int indent = -1;            // < 0: one line; else newlines and `indent` spaces per level
  std::string indent_text;    // used instead of `indent` spaces when non-empty (Python accepts a string)
  bool ensure_ascii = false;  // escape non-ASCII as \uXXXX (HF's tojson default is false)
  bool sort_keys = false;
  std::optional<std::string> item_separator;  // default ", " on one line, "," with indent (as Python)
  std::string key_separator = ": ";
};
// Python's json.dumps(value, ...) as HF's `tojson` filter calls it. Undefined and callables are errors.
Result<std::string> ToJson(const Value& value, const JsonOptions& options = {});

// A JSON document as a Value: objects keep their key order, integers that fit int64 stay ints, other numbers
// become floats.
Value FromJson(const nlohmann::ordered_json& json);

}  // namespace glint::jinja
