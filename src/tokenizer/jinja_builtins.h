// Operators, filters, tests and methods of the Jinja-subset interpreter, with Python's semantics (see jinja.h).
// Internal to jinja_interpreter.cc; errors here carry no line (the interpreter adds it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/jinja_value.h"

namespace glint::jinja {

// Sizes past which a value is an error rather than an allocation (set from RenderLimits).
struct ValueLimits {
  size_t max_string_bytes = size_t{16} << 20;
  size_t max_list_items = size_t{1} << 17;
};

// The characters (code points) of a UTF-8 string, each as its own byte string; an ill-formed byte is one piece.
std::vector<std::string> SplitCharacters(std::string_view text);

// Python's getattr-then-getitem as jinja2 does it: a dict's key, else undefined. An attribute of an undefined
// value is an error ("'x' is undefined").
Result<Value> GetAttribute(const Value& object, std::string_view name);
// object[key]: dict key, list/str index (negative from the end); missing → undefined.
Result<Value> GetItem(const Value& object, const Value& key);
// object[start:stop:step] for lists and strings; absent parts are undefined values.
Result<Value> GetSlice(const Value& object, const Value& start, const Value& stop, const Value& step,
                       const ValueLimits& limits);
// The items a for loop visits: list items, dict keys, string characters; undefined → none.
Result<std::vector<Value>> Iterate(const Value& value);

// op ∈ + - * / // % **
Result<Value> BinaryOperation(std::string_view op, const Value& left, const Value& right, const ValueLimits& limits);
Result<Value> Negate(const Value& value);
// op ∈ == != < > <= >= in "not in"
Result<bool> Compare(std::string_view op, const Value& left, const Value& right);

bool HasFilter(std::string_view name);
Result<Value> ApplyFilter(std::string_view name, const Value& value, const CallArgs& args, const ValueLimits& limits);
Result<bool> ApplyTest(std::string_view name, const Value& value, const CallArgs& args);

// str and dict methods: "a,b".split(","), d.items(), d.get("k", 0)...; false when `object` has no such method.
bool HasMethod(const Value& object, std::string_view name);
Result<Value> CallMethod(const Value& object, std::string_view name, const CallArgs& args, const ValueLimits& limits);

// range, namespace, dict, raise_exception, strftime_now.
Object MakeGlobals(const ValueLimits& limits);

}  // namespace glint::jinja
