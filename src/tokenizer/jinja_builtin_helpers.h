// Helpers shared by the builtins of the Jinja-subset interpreter (operators, filters, tests, methods, globals):
// argument binding, value limits, Python's string operations and ordering. Internal to src/tokenizer/jinja_*.cc.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_builtins.h"

namespace glint::jinja::detail {

// Binds positional arguments to `names` in order and keywords by name. Missing arguments are undefined values.
Result<std::vector<Value>> Bind(std::string_view function, const CallArgs& args,
                                std::initializer_list<std::string_view> names);
Status TypeError(std::string_view what, const Value& value);
Result<std::string> StringArg(std::string_view function, std::string_view name, const Value& value);
Result<int64_t> IntArg(std::string_view function, std::string_view name, const Value& value, int64_t fallback);
Status CheckString(const ValueLimits& limits, size_t bytes);
Status CheckList(const ValueLimits& limits, size_t items);
char32_t DecodeCharacter(std::string_view piece);
// Python's str.isspace() for one character.
bool IsPythonSpace(char32_t c);
bool IsAsciiLetter(char c);
bool IsAsciiDigit(char c);
char AsciiUpper(char c);
char AsciiLower(char c);
// Case mapping is ASCII-only (documented): chat templates lower/upper role names and keywords.
std::string Upper(std::string text);
std::string Lower(std::string text);
// Python str.strip/lstrip/rstrip: `chars` undefined or None → whitespace; else the set of its characters.
Result<std::string> Strip(const std::string& text, const Value& chars, bool left, bool right);
// Python str.split(sep=None, maxsplit=-1); rsplit when `from_right`.
Result<Value> Split(const std::string& text, const Value& separator, int64_t max_split, bool from_right,
                    const ValueLimits& limits);
Result<std::string> Replace(const std::string& text, const std::string& old_text, const std::string& new_text,
                            int64_t count, const ValueLimits& limits);
bool StartsWith(std::string_view text, std::string_view prefix);
bool EndsWith(std::string_view text, std::string_view suffix);
// startswith/endswith take a string or a tuple of strings.
Result<bool> AffixTest(const std::string& text, const Value& affix, bool prefix);
// Code-point index of a byte offset (str.find returns character positions).
int64_t CharacterIndex(const std::string& text, size_t byte_offset);
std::string HtmlEscape(const std::string& text);
// Python's `<` for the types that order: numbers, strings (code point order = UTF-8 byte order), lists.
Result<bool> Less(const Value& a, const Value& b);
// attribute="a.b.0" as jinja2's make_attrgetter: dotted parts, integer parts index lists.
Result<Value> LookupPath(const Value& value, const Value& path);
// Sort key for sort/dictsort/unique/min/max: case-insensitive strings unless case_sensitive.
Value SortKey(const Value& value, bool case_sensitive);
Result<Array> SortedCopy(Array items, const std::vector<Value>& keys, bool reverse);
std::string TitleFilter(const std::string& text);
std::string Capitalize(const std::string& text);
Result<Value> Reverse(const Value& value);
Result<Value> Items(const Value& value);
// Python's str.format with {} / {0} / {name} fields and no format specs.
Result<Value> StrFormat(const std::string& format, const CallArgs& args, const ValueLimits& limits);

}  // namespace glint::jinja::detail
