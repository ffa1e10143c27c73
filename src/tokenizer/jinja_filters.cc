// Filters of the Jinja-subset interpreter ({{ x | name(args) }}), with jinja2's semantics.
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

namespace {

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

constexpr std::string_view kUnsupportedFilters[] = {"batch",     "center", "filesizeformat", "format",    "groupby",
                                                    "pprint",    "random", "slice",          "striptags", "truncate",
                                                    "urlencode", "urlize", "wordwrap",       "xmlattr"};

constexpr std::string_view kFilters[] = {
    "abs",        "attr",    "capitalize", "count",       "d",      "default", "dictsort",   "e",
    "escape",     "first",   "float",      "forceescape", "indent", "int",     "items",      "join",
    "last",       "length",  "list",       "lower",       "map",    "max",     "min",        "reject",
    "rejectattr", "replace", "reverse",    "round",       "safe",   "select",  "selectattr", "sort",
    "string",     "sum",     "title",      "tojson",      "trim",   "unique",  "upper",      "wordcount"};

// trim([chars]): str.strip.
Result<Value> FilterTrim(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("trim", args, {"chars"}));
  GLINT_ASSIGN_OR_RETURN(std::string text, Strip(ToText(value), a[0], true, true));
  return Value(std::move(text));
}

// default(value, boolean=false): the value unless undefined (or falsy, with boolean).
Result<Value> FilterDefault(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("default", args, {"default_value", "boolean"}));
  const bool use_default = value.is_undefined() || (a[1].Truthy() && !value.Truthy());
  if (!use_default) return value;
  return a[0].is_undefined() ? Value("") : a[0];
}

// abs: numbers only; the int64 minimum has no absolute value.
Result<Value> FilterAbs(const Value& value) {
  if (value.is_float()) return Value(std::fabs(value.as_float()));
  if (value.is_int() || value.is_bool()) {
    if (value.as_int() == std::numeric_limits<int64_t>::min()) return OutOfRange("integer overflow in abs");
    return Value(value.as_int() < 0 ? -value.as_int() : value.as_int());
  }
  return TypeError("abs: the value must be a number", value);
}

// replace(old, new[, count]) on the value's text.
Result<Value> FilterReplace(const Value& value, const CallArgs& args, const ValueLimits& limits) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("replace", args, {"old", "new", "count"}));
  GLINT_ASSIGN_OR_RETURN(std::string old_text, StringArg("replace", "old", a[0]));
  GLINT_ASSIGN_OR_RETURN(std::string new_text, StringArg("replace", "new", a[1]));
  GLINT_ASSIGN_OR_RETURN(int64_t count, IntArg("replace", "count", a[2], -1));
  GLINT_ASSIGN_OR_RETURN(std::string out, Replace(ToText(value), old_text, new_text, count, limits));
  return Value(std::move(out));
}

// attr(name): Python's getattr only: a dict's keys are not attributes, a namespace's are.
Result<Value> FilterAttr(const Value& value, const CallArgs& args) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Value> a, Bind("attr", args, {"name"}));
  GLINT_ASSIGN_OR_RETURN(std::string attribute, StringArg("attr", "name", a[0]));
  if (value.is_object() && !value.as_object().is_namespace) return Value::Undefined(attribute);
  return GetAttribute(value, attribute);
}

// wordcount: runs of letters, digits, _ and non-ASCII bytes.
Result<Value> FilterWordCount(const Value& value) {
  int64_t words = 0;
  bool in_word = false;
  for (char c : ToText(value)) {
    const bool word_char = IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_' || (static_cast<uint8_t>(c) & 0x80);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value(words);
}

}  // namespace

bool HasFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

Result<Value> ApplyFilter(std::string_view name, const Value& value, const CallArgs& args, const ValueLimits& limits) {
  if (name == "length" || name == "count") return FilterLength(value);
  if (name == "tojson") return FilterToJson(value, args, limits);
  if (name == "trim") return FilterTrim(value, args);
  if (name == "default" || name == "d") return FilterDefault(value, args);
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
  if (name == "abs") return FilterAbs(value);
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
  if (name == "replace") return FilterReplace(value, args, limits);
  if (name == "attr") return FilterAttr(value, args);
  if (name == "wordcount") return FilterWordCount(value);
  if (std::find(std::begin(kUnsupportedFilters), std::end(kUnsupportedFilters), name) !=
      std::end(kUnsupportedFilters)) {
    return Unimplemented("the filter '", name, "' is not supported by glint's chat-template interpreter");
  }
  return InvalidArgument("unknown filter '", name, "'");
}

}  // namespace glint::jinja
