#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <initializer_list>
#include <limits>

#include "tokenizer/utf8.h"

namespace glint::jinja {
namespace {

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

// ---- Filters ----

Result<Value> FilterLength(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return Value(int64_t{0});
    case Value::Kind::kString:
      return Value(static_cast<int64_t>(SplitCharacters(value.as_string()).size()));
    case Value::Kind::kArray:
      return Value(static_cast<int64_t>(value.as_array().size()));
    case Value::Kind::kObject:
      return Value(static_cast<int64_t>(value.as_object().entries.size()));
    default:
      return TypeError("length: the value has no length", value);
  }
}

Result<Value> FilterToJson(const Value& value, const CallArgs& args, const ValueLimits& limits) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a,
                         Bind("tojson", args, {"indent", "ensure_ascii", "separators", "sort_keys"}));
  JsonOptions options;
  if (a[0].is_int()) {
    options.indent = static_cast<int>(std::clamp<int64_t>(a[0].as_int(), 0, 64));
  } else if (a[0].is_string()) {
    options.indent_text = a[0].as_string();
    if (options.indent_text.empty()) options.indent = 0;
  } else if (!a[0].is_undefined() && !a[0].is_none()) {
    return TypeError("tojson(): indent must be an integer or a string", a[0]);
  }
  if (!a[1].is_undefined()) options.ensure_ascii = a[1].Truthy();
  if (a[2].is_array()) {
    const Array& separators = a[2].as_array();
    if (separators.size() != 2 || !separators[0].is_string() || !separators[1].is_string()) {
      return InvalidArgument("tojson(): separators must be a pair of strings");
    }
    options.item_separator = separators[0].as_string();
    options.key_separator = separators[1].as_string();
  } else if (!a[2].is_undefined() && !a[2].is_none()) {
    return TypeError("tojson(): separators must be a pair of strings", a[2]);
  }
  if (!a[3].is_undefined()) options.sort_keys = a[3].Truthy();
  GLINT_ASSIGN_OR_RETURN(std::string json, ToJson(value, options));
  GLINT_RETURN_IF_ERROR(CheckString(limits, json.size()));
  return Value(std::move(json));
}

Result<Value> FilterIndent(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("indent", args, {"width", "first", "blank"}));
  std::string pad = "    ";
  if (a[0].is_string()) {
    pad = a[0].as_string();
  } else if (!a[0].is_undefined()) {
    GLINT_ASSIGN_OR_RETURN(int64_t width, IntArg("indent", "width", a[0], 4));
    pad = std::string(static_cast<size_t>(std::clamp<int64_t>(width, 0, 256)), ' ');
  }
  const bool first = a[1].Truthy();
  const bool blank = a[2].Truthy();
  const std::string text = ToText(value);
  std::string out;
  size_t start = 0;
  bool first_line = true;
  while (start <= text.size()) {
    const size_t newline = text.find('\n', start);
    const std::string line = text.substr(start, newline == std::string::npos ? std::string::npos : newline - start);
    if ((!first_line || first) && (blank || !line.empty())) out += pad;
    out += line;
    if (newline == std::string::npos) break;
    out += '\n';
    start = newline + 1;
    first_line = false;
  }
  return Value(std::move(out));
}

Result<Value> FilterInt(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("int", args, {"default", "base"}));
  const Value fallback = a[0].is_undefined() ? Value(int64_t{0}) : a[0];
  if (value.is_int() || value.is_bool()) return Value(value.as_int());
  if (value.is_float()) {
    const double f = value.as_float();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return Value(static_cast<int64_t>(f));
  }
  if (value.is_string()) {
    GLINT_ASSIGN_OR_RETURN(std::string text, Strip(value.as_string(), Value(), true, true));
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    try {
      size_t used = 0;
      const long long parsed = std::stoll(text, &used, 10);
      if (used == text.size()) return Value(static_cast<int64_t>(parsed));
      const double f = std::stod(text, &used);
      if (used == text.size() && std::isfinite(f) && std::fabs(f) < 9.2e18) return Value(static_cast<int64_t>(f));
    } catch (...) {  // std::stoll/stod signal bad text with exceptions; jinja2 returns the default then
    }
  }
  return fallback;
}

Result<Value> FilterFloat(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("float", args, {"default"}));
  const Value fallback = a[0].is_undefined() ? Value(0.0) : a[0];
  if (value.is_number()) return Value(value.as_float());
  if (value.is_string()) {
    GLINT_ASSIGN_OR_RETURN(std::string text, Strip(value.as_string(), Value(), true, true));
    try {
      size_t used = 0;
      const double f = std::stod(text, &used);
      if (used == text.size()) return Value(f);
    } catch (...) {  // not a number: the default, as in jinja2
    }
  }
  return fallback;
}

Result<Value> FilterRound(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("round", args, {"precision", "method"}));
  if (!value.is_number()) return TypeError("round: the value must be a number", value);
  GLINT_ASSIGN_OR_RETURN(int64_t precision, IntArg("round", "precision", a[0], 0));
  const std::string method = a[1].is_string() ? a[1].as_string() : "common";
  const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
  const double x = value.as_float() * scale;
  double rounded;
  if (method == "common") {
    rounded = std::nearbyint(x);  // round half to even, as Python's round()
  } else if (method == "ceil") {
    rounded = std::ceil(x);
  } else if (method == "floor") {
    rounded = std::floor(x);
  } else {
    return InvalidArgument("round(): method must be common, ceil or floor");
  }
  return Value(rounded / scale);
}

Result<Value> FilterSum(const Value& value, const CallArgs& args, const ValueLimits& limits) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("sum", args, {"attribute", "start"}));
  Value total = a[1].is_undefined() ? Value(int64_t{0}) : a[1];
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  for (const Value& item : items) {
    Value term = item;
    if (!a[0].is_undefined()) {
      GLINT_ASSIGN_OR_RETURN(term, LookupPath(item, a[0]));
    }
    GLINT_ASSIGN_OR_RETURN(total, BinaryOperation("+", total, term, limits));
  }
  return total;
}

Result<Value> FilterMinMax(const Value& value, const CallArgs& args, bool want_max) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.empty()) return Value::Undefined("");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (!a[1].is_undefined()) {
      GLINT_ASSIGN_OR_RETURN(key, LookupPath(items[i], a[1]));
    }
    key = SortKey(key, a[0].Truthy());
    if (i == 0) {
      best_key = key;
      continue;
    }
    GLINT_ASSIGN_OR_RETURN(bool better, want_max ? Less(best_key, key) : Less(key, best_key));
    if (better) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

Result<Value> FilterSort(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("sort", args, {"reverse", "case_sensitive", "attribute"}));
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value key = item;
    if (!a[2].is_undefined()) {
      GLINT_ASSIGN_OR_RETURN(key, LookupPath(item, a[2]));
    }
    keys.push_back(SortKey(key, a[1].Truthy()));
  }
  GLINT_ASSIGN_OR_RETURN(Array sorted, SortedCopy(std::move(items), keys, a[0].Truthy()));
  return Value(std::move(sorted));
}

Result<Value> FilterDictSort(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (!value.is_object()) return TypeError("dictsort: the value must be a dict", value);
  const std::string by = a[1].is_string() ? a[1].as_string() : "key";
  if (by != "key" && by != "value") return InvalidArgument("dictsort(): 'by' must be 'key' or 'value'");
  Array pairs;
  std::vector<Value> keys;
  for (const auto& [key, item] : value.as_object().entries) {
    pairs.push_back(Value::Tuple(Array{Value(key), item}));
    keys.push_back(SortKey(by == "key" ? Value(key) : item, a[0].Truthy()));
  }
  GLINT_ASSIGN_OR_RETURN(Array sorted, SortedCopy(std::move(pairs), keys, a[2].Truthy()));
  return Value(std::move(sorted));
}

Result<Value> FilterUnique(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("unique", args, {"case_sensitive", "attribute"}));
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  Array out;
  std::vector<Value> seen;
  for (const Value& item : items) {
    Value key = item;
    if (!a[1].is_undefined()) {
      GLINT_ASSIGN_OR_RETURN(key, LookupPath(item, a[1]));
    }
    key = SortKey(key, a[0].Truthy());
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value(std::move(out));
}

// map('filter', args...) or map(attribute='x', default=...).
Result<Value> FilterMap(const Value& value, const CallArgs& args, const ValueLimits& limits) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  Array out;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [key, v] : args.keyword) {
    if (key == "attribute") attribute = &v;
    if (key == "default") fallback = &v;
  }
  if (attribute != nullptr) {
    for (const Value& item : items) {
      GLINT_ASSIGN_OR_RETURN(Value mapped, LookupPath(item, *attribute));
      if (mapped.is_undefined() && fallback != nullptr) mapped = *fallback;
      out.push_back(std::move(mapped));
    }
    return Value(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return InvalidArgument("map(): give a filter name or attribute=");
  }
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    GLINT_ASSIGN_OR_RETURN(Value mapped, ApplyFilter(args.positional[0].as_string(), item, rest, limits));
    out.push_back(std::move(mapped));
  }
  return Value(std::move(out));
}

// select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...).
Result<Value> FilterSelect(const Value& value, const CallArgs& args, bool with_attribute, bool keep_matching) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  size_t next = 0;
  Value attribute;
  if (with_attribute) {
    if (args.positional.empty()) return InvalidArgument("selectattr()/rejectattr() need an attribute name");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string())
      return TypeError("select(): the test name must be a string", args.positional[next]);
    test = args.positional[next++].as_string();
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  test_args.keyword = args.keyword;
  Array out;
  for (const Value& item : items) {
    Value subject = item;
    if (with_attribute) {
      GLINT_ASSIGN_OR_RETURN(subject, LookupPath(item, attribute));
    }
    bool match = subject.Truthy();
    if (!test.empty()) {
      GLINT_ASSIGN_OR_RETURN(match, ApplyTest(test, subject, test_args));
    }
    if (match == keep_matching) out.push_back(item);
  }
  return Value(std::move(out));
}

Result<Value> FilterJoin(const Value& value, const CallArgs& args, const ValueLimits& limits) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("join", args, {"d", "attribute"}));
  const std::string separator = a[0].is_undefined() ? "" : ToText(a[0]);
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    if (!a[1].is_undefined()) {
      GLINT_ASSIGN_OR_RETURN(Value part, LookupPath(items[i], a[1]));
      out += ToText(part);
    } else {
      out += ToText(items[i]);
    }
    GLINT_RETURN_IF_ERROR(CheckString(limits, out.size()));
  }
  return Value(std::move(out));
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

constexpr std::string_view kUnsupportedFilters[] = {"batch",     "center", "filesizeformat", "format",    "groupby",
                                                    "pprint",    "random", "slice",          "striptags", "truncate",
                                                    "urlencode", "urlize", "wordwrap",       "xmlattr"};

constexpr std::string_view kFilters[] = {
    "abs",        "attr",    "capitalize", "count",       "d",      "default", "dictsort",   "e",
    "escape",     "first",   "float",      "forceescape", "indent", "int",     "items",      "join",
    "last",       "length",  "list",       "lower",       "map",    "max",     "min",        "reject",
    "rejectattr", "replace", "reverse",    "round",       "safe",   "select",  "selectattr", "sort",
    "string",     "sum",     "title",      "tojson",      "trim",   "unique",  "upper",      "wordcount"};

}  // namespace

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

Result<Value> BinaryOperation(std::string_view op, const Value& left, const Value& right, const ValueLimits& limits) {
  const auto type_error = [&]() {
    return InvalidArgument("unsupported operand types for ", op, ": ", left.TypeName(), " and ", right.TypeName());
  };
  if (left.is_number() && right.is_number()) {
    const bool floats = left.is_float() || right.is_float();
    if (op == "/") {
      if (right.as_float() == 0.0) return InvalidArgument("division by zero");
      return Value(left.as_float() / right.as_float());
    }
    if (floats) {
      const double a = left.as_float();
      const double b = right.as_float();
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
      return type_error();
    }
    const int64_t a = left.as_int();
    const int64_t b = right.as_int();
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
    return type_error();
  }
  if (op == "+") {
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
      if (!undefined.undefined_name().empty())
        return InvalidArgument("'", undefined.undefined_name(), "' is undefined");
    }
    return type_error();
  }
  if (op == "*") {
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
  }
  if (op == "%" && left.is_string()) {
    return Unimplemented("the % string formatting operator is not supported; use ~ or str.format()");
  }
  return type_error();
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

bool HasFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

Result<Value> ApplyFilter(std::string_view name, const Value& value, const CallArgs& args, const ValueLimits& limits) {
  if (name == "length" || name == "count") return FilterLength(value);
  if (name == "tojson") return FilterToJson(value, args, limits);
  if (name == "trim") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("trim", args, {"chars"}));
    GLINT_ASSIGN_OR_RETURN(std::string text, Strip(ToText(value), a[0], true, true));
    return Value(std::move(text));
  }
  if (name == "default" || name == "d") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("default", args, {"default_value", "boolean"}));
    const bool use_default = value.is_undefined() || (a[1].Truthy() && !value.Truthy());
    if (!use_default) return value;
    return a[0].is_undefined() ? Value("") : a[0];
  }
  if (name == "items") return Items(value);
  if (name == "string") return Value(ToText(value));
  if (name == "safe") return value;
  if (name == "e" || name == "escape" || name == "forceescape") return Value(HtmlEscape(ToText(value)));
  if (name == "upper") return Value(Upper(ToText(value)));
  if (name == "lower") return Value(Lower(ToText(value)));
  if (name == "title") return Value(TitleFilter(ToText(value)));
  if (name == "capitalize") return Value(Capitalize(ToText(value)));
  if (name == "list") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    return Value(Array(std::move(items)));
  }
  if (name == "first" || name == "last") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.empty()) return Value::Undefined("");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") return FilterJoin(value, args, limits);
  if (name == "reverse") return Reverse(value);
  if (name == "abs") {
    if (value.is_float()) return Value(std::fabs(value.as_float()));
    if (value.is_int() || value.is_bool()) {
      if (value.as_int() == std::numeric_limits<int64_t>::min()) return OutOfRange("integer overflow in abs");
      return Value(value.as_int() < 0 ? -value.as_int() : value.as_int());
    }
    return TypeError("abs: the value must be a number", value);
  }
  if (name == "int") return FilterInt(value, args);
  if (name == "float") return FilterFloat(value, args);
  if (name == "round") return FilterRound(value, args);
  if (name == "sum") return FilterSum(value, args, limits);
  if (name == "max" || name == "min") return FilterMinMax(value, args, name == "max");
  if (name == "sort") return FilterSort(value, args);
  if (name == "dictsort") return FilterDictSort(value, args);
  if (name == "unique") return FilterUnique(value, args);
  if (name == "map") return FilterMap(value, args, limits);
  if (name == "select") return FilterSelect(value, args, false, true);
  if (name == "reject") return FilterSelect(value, args, false, false);
  if (name == "selectattr") return FilterSelect(value, args, true, true);
  if (name == "rejectattr") return FilterSelect(value, args, true, false);
  if (name == "indent") return FilterIndent(value, args);
  if (name == "replace") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("replace", args, {"old", "new", "count"}));
    GLINT_ASSIGN_OR_RETURN(std::string old_text, StringArg("replace", "old", a[0]));
    GLINT_ASSIGN_OR_RETURN(std::string new_text, StringArg("replace", "new", a[1]));
    GLINT_ASSIGN_OR_RETURN(int64_t count, IntArg("replace", "count", a[2], -1));
    GLINT_ASSIGN_OR_RETURN(std::string out, Replace(ToText(value), old_text, new_text, count, limits));
    return Value(std::move(out));
  }
  if (name == "attr") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("attr", args, {"name"}));
    GLINT_ASSIGN_OR_RETURN(std::string attribute, StringArg("attr", "name", a[0]));
    // Python's getattr only: a dict's keys are not attributes, a namespace's are.
    if (value.is_object() && !value.as_object().is_namespace) return Value::Undefined(attribute);
    return GetAttribute(value, attribute);
  }
  if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    for (char c : ToText(value)) {
      const bool word_char = IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_' || (static_cast<uint8_t>(c) & 0x80);
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return Value(words);
  }
  if (std::find(std::begin(kUnsupportedFilters), std::end(kUnsupportedFilters), name) !=
      std::end(kUnsupportedFilters)) {
    return Unimplemented("the filter '", name, "' is not supported by glint's chat-template interpreter");
  }
  return InvalidArgument("unknown filter '", name, "'");
}

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

Result<Value> CallMethod(const Value& object, std::string_view name, const CallArgs& args, const ValueLimits& limits) {
  if (object.is_object()) {
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
  if (name == "splitlines") {
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
  if (name == "replace") {
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind(name, args, {"old", "new", "count"}));
    GLINT_ASSIGN_OR_RETURN(std::string old_text, StringArg(name, "old", a[0]));
    GLINT_ASSIGN_OR_RETURN(std::string new_text, StringArg(name, "new", a[1]));
    GLINT_ASSIGN_OR_RETURN(int64_t count, IntArg(name, "count", a[2], -1));
    GLINT_ASSIGN_OR_RETURN(std::string out, Replace(text, old_text, new_text, count, limits));
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "count") {
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
  if (name == "join") {
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
  if (name == "format") return StrFormat(text, args, limits);
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

Object MakeGlobals(const ValueLimits& limits) {
  Object globals;
  auto add = [&](std::string name, std::function<Result<Value>(const CallArgs&)> function) {
    auto callable = std::make_shared<Callable>();
    callable->name = name;
    callable->function = std::move(function);
    globals.entries.emplace_back(std::move(name), Value(std::shared_ptr<const Callable>(std::move(callable))));
  };
  add("range", [limits](const CallArgs& args) -> Result<Value> {
    if (!args.keyword.empty()) return InvalidArgument("range() takes no keyword arguments");
    if (args.positional.empty() || args.positional.size() > 3) return InvalidArgument("range() takes 1 to 3 arguments");
    std::vector<int64_t> numbers;
    for (const Value& v : args.positional) {
      if (!v.is_int() && !v.is_bool()) return TypeError("range() needs integers", v);
      numbers.push_back(v.as_int());
    }
    const int64_t start = numbers.size() == 1 ? 0 : numbers[0];
    const int64_t stop = numbers.size() == 1 ? numbers[0] : numbers[1];
    const int64_t step = numbers.size() == 3 ? numbers[2] : 1;
    if (step == 0) return InvalidArgument("range() step cannot be zero");
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      out.push_back(Value(i));
      GLINT_RETURN_IF_ERROR(CheckList(limits, out.size()));
      if ((step > 0 && i > std::numeric_limits<int64_t>::max() - step) ||
          (step < 0 && i < std::numeric_limits<int64_t>::min() - step)) {
        break;
      }
    }
    return Value(std::move(out));
  });
  add("namespace", [](const CallArgs& args) -> Result<Value> {
    auto object = std::make_shared<Object>();
    object->is_namespace = true;
    for (const Value& v : args.positional) {
      if (!v.is_object()) return TypeError("namespace() takes dicts and keyword arguments", v);
      for (const auto& [key, item] : v.as_object().entries) object->Set(key, item);
    }
    for (const auto& [key, item] : args.keyword) object->Set(key, item);
    return Value(std::move(object));
  });
  add("dict", [](const CallArgs& args) -> Result<Value> {
    Object object;
    for (const Value& v : args.positional) {
      if (!v.is_object()) return TypeError("dict() takes dicts and keyword arguments", v);
      for (const auto& [key, item] : v.as_object().entries) object.Set(key, item);
    }
    for (const auto& [key, item] : args.keyword) object.Set(key, item);
    return Value(std::move(object));
  });
  add("raise_exception", [](const CallArgs& args) -> Result<Value> {
    const std::string message = args.positional.empty() ? std::string("(no message)") : ToText(args.positional[0]);
    return FailedPrecondition("raise_exception: ", message);
  });
  add("strftime_now", [](const CallArgs& args) -> Result<Value> {
    if (args.positional.size() != 1 || !args.positional[0].is_string()) {
      return InvalidArgument("strftime_now() takes one format string");
    }
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buffer[256];
    const size_t length = std::strftime(buffer, sizeof(buffer), args.positional[0].as_string().c_str(), &local);
    return Value(std::string(buffer, length));
  });
  return globals;
}

}  // namespace glint::jinja
