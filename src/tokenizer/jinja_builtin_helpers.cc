#include "tokenizer/jinja_builtin_helpers.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <initializer_list>
#include <limits>

#include "tokenizer/utf8.h"

namespace glint::jinja::detail {

// ---- Argument binding ----

// Binds positional arguments to `names` in order and keywords by name. Missing arguments are undefined values.
Result<std::vector<Value>> Bind(std::string_view function, const CallArgs& args,
                                std::initializer_list<std::string_view> names) {
  std::vector<Value> bound(names.size());
  if (args.positional.size() > names.size()) {
    return InvalidArgument(function, "() takes at most ", names.size(), " argument", names.size() == 1 ? "" : "s",
                           ", got ", args.positional.size());
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) return InvalidArgument(function, "() got an unexpected keyword argument '", key, "'");
    const size_t index = static_cast<size_t>(it - names.begin());
    if (index < args.positional.size()) return InvalidArgument(function, "() got '", key, "' twice");
    bound[index] = value;
  }
  return bound;
}

Status TypeError(std::string_view what, const Value& value) {
  return InvalidArgument(what, " (got ", value.TypeName(), ")");
}

Result<std::string> StringArg(std::string_view function, std::string_view name, const Value& value) {
  if (!value.is_string()) return TypeError(StrCat(function, "(): '", name, "' must be a string"), value);
  return value.as_string();
}

Result<int64_t> IntArg(std::string_view function, std::string_view name, const Value& value, int64_t fallback) {
  if (value.is_undefined() || value.is_none()) return fallback;
  if (!value.is_int() && !value.is_bool()) {
    return TypeError(StrCat(function, "(): '", name, "' must be an integer"), value);
  }
  return value.as_int();
}

Status CheckString(const ValueLimits& limits, size_t bytes) {
  if (bytes > limits.max_string_bytes) {
    return ResourceExhausted("a string of ", bytes, " bytes exceeds the template limit of ", limits.max_string_bytes);
  }
  return Status::Ok();
}

Status CheckList(const ValueLimits& limits, size_t items) {
  if (items > limits.max_list_items) {
    return ResourceExhausted("a list of ", items, " items exceeds the template limit of ", limits.max_list_items);
  }
  return Status::Ok();
}

// ---- Characters ----

char32_t DecodeCharacter(std::string_view piece) {
  const Utf8Scan scan = ScanUtf8(piece);
  if (scan.kind != Utf8Scan::kComplete) return 0xFFFD;
  const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(piece[i])); };
  switch (scan.length) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

// Python's str.isspace() for one character.
bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }
char AsciiUpper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

// Case mapping is ASCII-only (documented): chat templates lower/upper role names and keywords.
std::string Upper(std::string text) {
  for (char& c : text) c = AsciiUpper(c);
  return text;
}
std::string Lower(std::string text) {
  for (char& c : text) c = AsciiLower(c);
  return text;
}

// Python str.strip/lstrip/rstrip: `chars` undefined or None → whitespace; else the set of its characters.
Result<std::string> Strip(const std::string& text, const Value& chars, bool left, bool right) {
  std::vector<std::string> pieces = SplitCharacters(text);
  std::vector<std::string> set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) {
    if (!chars.is_string()) return TypeError("strip(): the characters to strip must be a string", chars);
    set = SplitCharacters(chars.as_string());
  }
  auto strippable = [&](const std::string& piece) {
    if (whitespace) return IsPythonSpace(DecodeCharacter(piece));
    return std::find(set.begin(), set.end(), piece) != set.end();
  };
  size_t begin = 0;
  size_t end = pieces.size();
  if (left) {
    while (begin < end && strippable(pieces[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(pieces[end - 1])) --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) out += pieces[i];
  return out;
}

// Python str.split(sep=None, maxsplit=-1); rsplit when `from_right`.
Result<Value> Split(const std::string& text, const Value& separator, int64_t max_split, bool from_right,
                    const ValueLimits& limits) {
  Array parts;
  if (separator.is_undefined() || separator.is_none()) {
    // Runs of whitespace separate; leading/trailing whitespace gives no empty parts.
    std::vector<std::string> pieces = SplitCharacters(text);
    std::vector<std::pair<size_t, size_t>> words;  // [begin, end) in pieces
    size_t i = 0;
    while (i < pieces.size()) {
      while (i < pieces.size() && IsPythonSpace(DecodeCharacter(pieces[i]))) ++i;
      if (i == pieces.size()) break;
      const size_t begin = i;
      while (i < pieces.size() && !IsPythonSpace(DecodeCharacter(pieces[i]))) ++i;
      words.emplace_back(begin, i);
    }
    auto join = [&](size_t from, size_t to) {
      std::string out;
      for (size_t k = from; k < to; ++k) out += pieces[k];
      return out;
    };
    const size_t n = words.size();
    if (max_split < 0 || static_cast<size_t>(max_split) >= n) {
      for (const auto& [b, e] : words) parts.push_back(Value(join(b, e)));
    } else if (!from_right) {
      for (size_t w = 0; w < static_cast<size_t>(max_split); ++w)
        parts.push_back(Value(join(words[w].first, words[w].second)));
      // The remainder keeps its trailing whitespace, as in Python.
      parts.push_back(Value(join(words[static_cast<size_t>(max_split)].first, pieces.size())));
    } else {
      const size_t kept = n - static_cast<size_t>(max_split);
      parts.push_back(Value(join(0, words[kept - 1].second)));  // keeps its leading whitespace
      for (size_t w = kept; w < n; ++w) parts.push_back(Value(join(words[w].first, words[w].second)));
    }
    return Value(std::move(parts));
  }
  if (!separator.is_string()) return TypeError("split(): the separator must be a string or None", separator);
  const std::string& sep = separator.as_string();
  if (sep.empty()) return InvalidArgument("split(): empty separator");
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t start = 0;
    while (true) {
      const size_t at = (max_split >= 0 && static_cast<int64_t>(pieces.size()) >= max_split) ? std::string::npos
                                                                                             : text.find(sep, start);
      if (at == std::string::npos) {
        pieces.push_back(text.substr(start));
        break;
      }
      pieces.push_back(text.substr(start, at - start));
      start = at + sep.size();
      GLINT_RETURN_IF_ERROR(CheckList(limits, pieces.size()));
    }
  } else {
    size_t end = text.size();
    while (true) {
      size_t at = std::string::npos;
      if ((max_split < 0 || static_cast<int64_t>(pieces.size()) < max_split) && end >= sep.size()) {
        at = text.rfind(sep, end - sep.size());
      }
      if (at == std::string::npos) {
        pieces.push_back(text.substr(0, end));
        break;
      }
      pieces.push_back(text.substr(at + sep.size(), end - at - sep.size()));
      end = at;
      GLINT_RETURN_IF_ERROR(CheckList(limits, pieces.size()));
    }
    std::reverse(pieces.begin(), pieces.end());
  }
  for (auto& piece : pieces) parts.push_back(Value(std::move(piece)));
  return Value(std::move(parts));
}

Result<std::string> Replace(const std::string& text, const std::string& old_text, const std::string& new_text,
                            int64_t count, const ValueLimits& limits) {
  std::string out;
  int64_t done = 0;
  if (old_text.empty()) {
    // Python inserts `new` before every character and at the end.
    std::vector<std::string> pieces = SplitCharacters(text);
    GLINT_RETURN_IF_ERROR(CheckString(limits, text.size() + (pieces.size() + 1) * new_text.size()));
    for (const auto& piece : pieces) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      out += piece;
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t start = 0;
  while (true) {
    const size_t at = (count >= 0 && done >= count) ? std::string::npos : text.find(old_text, start);
    if (at == std::string::npos) break;
    out.append(text, start, at - start);
    out += new_text;
    GLINT_RETURN_IF_ERROR(CheckString(limits, out.size()));
    start = at + old_text.size();
    ++done;
  }
  out.append(text, start, std::string::npos);
  GLINT_RETURN_IF_ERROR(CheckString(limits, out.size()));
  return out;
}

bool StartsWith(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }
bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// startswith/endswith take a string or a tuple of strings.
Result<bool> AffixTest(const std::string& text, const Value& affix, bool prefix) {
  auto one = [&](const Value& candidate) -> Result<bool> {
    if (!candidate.is_string())
      return TypeError("startswith()/endswith() take a string or a tuple of strings", candidate);
    return prefix ? StartsWith(text, candidate.as_string()) : EndsWith(text, candidate.as_string());
  };
  if (affix.is_array()) {
    for (const Value& candidate : affix.as_array()) {
      GLINT_ASSIGN_OR_RETURN(bool hit, one(candidate));
      if (hit) return true;
    }
    return false;
  }
  return one(affix);
}

// Code-point index of a byte offset (str.find returns character positions).
int64_t CharacterIndex(const std::string& text, size_t byte_offset) {
  return static_cast<int64_t>(SplitCharacters(std::string_view(text).substr(0, byte_offset)).size());
}

std::string HtmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// ---- Ordering ----

// Python's `<` for the types that order: numbers, strings (code point order = UTF-8 byte order), lists.
Result<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_array() && b.is_array()) {
    const Array& x = a.as_array();
    const Array& y = b.as_array();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return InvalidArgument("'<' is not supported between ", a.TypeName(), " and ", b.TypeName());
}

// attribute="a.b.0" as jinja2's make_attrgetter: dotted parts, integer parts index lists.
Result<Value> LookupPath(const Value& value, const Value& path) {
  if (path.is_int()) return GetItem(value, path);
  if (!path.is_string()) return TypeError("attribute must be a string or an integer", path);
  Value current = value;
  std::string_view rest = path.as_string();
  while (true) {
    const size_t dot = rest.find('.');
    const std::string_view part = rest.substr(0, dot);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), IsAsciiDigit);
    if (numeric) {
      GLINT_ASSIGN_OR_RETURN(current, GetItem(current, Value(static_cast<int64_t>(std::stoll(std::string(part))))));
    } else {
      GLINT_ASSIGN_OR_RETURN(current, GetItem(current, Value(part)));
    }
    if (dot == std::string_view::npos) return current;
    rest.remove_prefix(dot + 1);
  }
}

// Sort key for sort/dictsort/unique/min/max: case-insensitive strings unless case_sensitive.
Value SortKey(const Value& value, bool case_sensitive) {
  if (!case_sensitive && value.is_string()) return Value(Lower(value.as_string()));
  return value;
}

Result<Array> SortedCopy(Array items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status failure;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    auto less = reverse ? Less(keys[y], keys[x]) : Less(keys[x], keys[y]);
    if (!less.ok()) {
      if (failure.ok()) failure = less.status();
      return false;
    }
    return *less;
  });
  GLINT_RETURN_IF_ERROR(failure);
  Array sorted;
  sorted.reserve(items.size());
  for (size_t index : order) sorted.push_back(std::move(items[index]));
  return sorted;
}

std::string TitleFilter(const std::string& text) {
  // jinja2's title: words start after whitespace or one of -({[< ; first letter upper, the rest lower.
  std::string out;
  bool word_start = true;
  for (char c : text) {
    const bool boundary =
        c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (boundary) {
      out += c;
      word_start = true;
    } else {
      out += word_start ? AsciiUpper(c) : AsciiLower(c);
      word_start = false;
    }
  }
  return out;
}

std::string Capitalize(const std::string& text) {
  std::string out = Lower(text);
  if (!out.empty()) out[0] = AsciiUpper(out[0]);
  return out;
}

Result<Value> Reverse(const Value& value) {
  if (value.is_string()) {
    std::vector<std::string> pieces = SplitCharacters(value.as_string());
    std::string out;
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) out += *it;
    return Value(std::move(out));
  }
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::reverse(items.begin(), items.end());
  return Value(Array(std::move(items)));
}

Result<Value> Items(const Value& value) {
  if (value.is_undefined()) return Value(Array{});
  if (!value.is_object()) return TypeError("items: the value must be a dict", value);
  Array pairs;
  for (const auto& [key, item] : value.as_object().entries) pairs.push_back(Value::Tuple(Array{Value(key), item}));
  return Value(std::move(pairs));
}

// Python's str.format with {} / {0} / {name} fields and no format specs.
Result<Value> StrFormat(const std::string& format, const CallArgs& args, const ValueLimits& limits) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '{' && i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < format.size() && format[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = format.find('}', i);
      if (close == std::string::npos) return InvalidArgument("format(): '{' without '}'");
      const std::string field = format.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        return InvalidArgument("format(): format specs and conversions are not supported ('{", field, "}')");
      }
      const Value* chosen = nullptr;
      if (field.empty()) {
        if (auto_index >= args.positional.size()) return InvalidArgument("format(): not enough arguments");
        chosen = &args.positional[auto_index++];
      } else if (std::all_of(field.begin(), field.end(), IsAsciiDigit)) {
        const size_t index = std::stoul(field);
        if (index >= args.positional.size()) return InvalidArgument("format(): no argument ", index);
        chosen = &args.positional[index];
      } else {
        for (const auto& [key, v] : args.keyword) {
          if (key == field) chosen = &v;
        }
        if (chosen == nullptr) return InvalidArgument("format(): no argument named '", field, "'");
      }
      out += ToText(*chosen);
      GLINT_RETURN_IF_ERROR(CheckString(limits, out.size()));
      i = close;
    } else if (c == '}') {
      return InvalidArgument("format(): single '}'");
    } else {
      out += c;
    }
  }
  return Value(std::move(out));
}

}  // namespace glint::jinja::detail
