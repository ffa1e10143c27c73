// str and dict methods of the Jinja-subset interpreter ("a,b".split(","), d.items(), ...).
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

bool HasMethod(const Value& object, std::string_view name) {
  static constexpr std::string_view kStringMethods[] = {
      "capitalize",   "count",        "endswith", "find",    "format", "isalnum", "isalpha",
      "isdigit",      "islower",      "isspace",  "isupper", "join",   "lower",   "lstrip",
      "removeprefix", "removesuffix", "replace",  "rfind",   "rsplit", "rstrip",  "split",
      "splitlines",   "startswith",   "strip",    "title",   "upper"};
  static constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};
  if (object.is_string()) {
    return std::find(std::begin(kStringMethods), std::end(kStringMethods), name) != std::end(kStringMethods);
  }
  if (object.is_object() && !object.as_object().is_namespace) {
    return std::find(std::begin(kDictMethods), std::end(kDictMethods), name) != std::end(kDictMethods);
  }
  return false;
}

namespace {

Result<Value> DictMethod(const Value& object, std::string_view name, const CallArgs& args) {
  const Object& dict = object.as_object();
  if (name == "get") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("get", args, {"key", "default"}));
    const Value* found = a[0].is_string() ? dict.Find(a[0].as_string()) : nullptr;
    if (found != nullptr) return *found;
    return a[1].is_undefined() ? Value::None() : a[1];
  }
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {}));
  if (name == "items") return Items(object);
  Array out;
  for (const auto& [key, value] : dict.entries) out.push_back(name == "keys" ? Value(key) : value);
  return Value(std::move(out));
}

// str.splitlines([keepends]): \n, \r and \r\n end lines.
Result<Value> SplitLines(const std::string& text, std::string_view name, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {"keepends"}));
  Array lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find_first_of("\r\n", start);
    if (end == std::string::npos) {
      lines.push_back(Value(text.substr(start)));
      break;
    }
    size_t next = end + 1;
    if (text[end] == '\r' && next < text.size() && text[next] == '\n') ++next;
    lines.push_back(Value(text.substr(start, (a[0].Truthy() ? next : end) - start)));
    start = next;
  }
  return Value(std::move(lines));
}

// upper, lower, title, capitalize (ASCII case mapping).
Result<Value> CaseMethod(const std::string& text, std::string_view name, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {}));
  if (name == "upper") return Value(Upper(text));
  if (name == "lower") return Value(Lower(text));
  if (name == "capitalize") return Value(Capitalize(text));
  std::string out;  // str.title(): a letter after a letter is lowered, any other letter raised
  bool previous_letter = false;
  for (char c : text) {
    const bool letter = IsAsciiLetter(c);
    out += letter ? (previous_letter ? AsciiLower(c) : AsciiUpper(c)) : c;
    previous_letter = letter;
  }
  return Value(std::move(out));
}

// find, rfind (character index, −1 when absent), count (non-overlapping).
Result<Value> SearchMethod(const std::string& text, std::string_view name, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {"sub"}));
  GLINT_ASSIGN_OR_RETURN(std::string sub, StringArg(name, "sub", a[0]));
  if (name == "count") {
    if (sub.empty()) return Value(static_cast<int64_t>(SplitCharacters(text).size() + 1));
    int64_t count = 0;
    for (size_t at = text.find(sub); at != std::string::npos; at = text.find(sub, at + sub.size())) ++count;
    return Value(count);
  }
  const size_t at = name == "find" ? text.find(sub) : text.rfind(sub);
  return Value(at == std::string::npos ? int64_t{-1} : CharacterIndex(text, at));
}

Result<Value> JoinMethod(const std::string& text, std::string_view name, const CallArgs& args,
                         const ValueLimits& limits) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {"iterable"}));
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) return TypeError("str.join() needs strings", items[i]);
    if (i > 0) out += text;
    out += items[i].as_string();
    GLINT_RETURN_IF_ERROR(CheckString(limits, out.size()));
  }
  return Value(std::move(out));
}

// isalnum, isalpha, isdigit, islower, isspace, isupper.
Result<Value> ClassMethod(const Value& object, std::string_view name, const CallArgs& args) {
  const std::string& text = object.as_string();
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {}));
  // isalnum, isalpha, isdigit, islower, isspace, isupper (ASCII classes; isspace is Unicode-aware).
  if (text.empty()) return Value(false);
  if (name == "isspace") {
    for (const auto& piece : SplitCharacters(text)) {
      if (!IsPythonSpace(DecodeCharacter(piece))) return Value(false);
    }
    return Value(true);
  }
  if (name == "islower" || name == "isupper") {
    GLINT_ASSIGN_OR_RETURN(bool result, ApplyTest(name.substr(2), object, CallArgs{}));
    return Value(result);
  }
  for (char c : text) {
    const bool ok = name == "isdigit"   ? IsAsciiDigit(c)
                    : name == "isalpha" ? IsAsciiLetter(c)
                                        : (IsAsciiLetter(c) || IsAsciiDigit(c));
    if (!ok) return Value(false);
  }
  return Value(true);
}

}  // namespace

Result<Value> CallMethod(const Value& object, std::string_view name, const CallArgs& args, const ValueLimits& limits) {
  if (object.is_object()) return DictMethod(object, name, args);
  const std::string& text = object.as_string();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {"chars"}));
    GLINT_ASSIGN_OR_RETURN(std::string out, Strip(text, a[0], name != "rstrip", name != "lstrip"));
    return Value(std::move(out));
  }
  if (name == "split" || name == "rsplit") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {"sep", "maxsplit"}));
    GLINT_ASSIGN_OR_RETURN(int64_t max_split, IntArg(name, "maxsplit", a[1], -1));
    return Split(text, a[0], max_split, name == "rsplit", limits);
  }
  if (name == "splitlines") return SplitLines(text, name, args);
  if (name == "startswith" || name == "endswith") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {"affix"}));
    GLINT_ASSIGN_OR_RETURN(bool hit, AffixTest(text, a[0], name == "startswith"));
    return Value(hit);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {"affix"}));
    GLINT_ASSIGN_OR_RETURN(std::string affix, StringArg(name, "affix", a[0]));
    if (name == "removeprefix" && StartsWith(text, affix)) return Value(text.substr(affix.size()));
    if (name == "removesuffix" && EndsWith(text, affix)) return Value(text.substr(0, text.size() - affix.size()));
    return object;
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return CaseMethod(text, name, args);
  }
  if (name == "replace") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {"old", "new", "count"}));
    GLINT_ASSIGN_OR_RETURN(std::string old_text, StringArg(name, "old", a[0]));
    GLINT_ASSIGN_OR_RETURN(std::string new_text, StringArg(name, "new", a[1]));
    GLINT_ASSIGN_OR_RETURN(int64_t count, IntArg(name, "count", a[2], -1));
    GLINT_ASSIGN_OR_RETURN(std::string out, Replace(text, old_text, new_text, count, limits));
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "count") return SearchMethod(text, name, args);
  if (name == "join") return JoinMethod(text, name, args, limits);
  if (name == "format") return StrFormat(text, args, limits);
  return ClassMethod(object, name, args);
}

}  // namespace glint::jinja
