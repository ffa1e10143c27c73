#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tokenizer/utf8.h"

namespace glint::jinja {

Value::Value(Object o) : storage_(std::make_shared<Object>(std::move(o))) {}

double Value::as_float() const {
  if (is_float()) return std::get<double>(storage_);
  return static_cast<double>(as_int());
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kArray:
      return !as_array().empty();
    case Kind::kObject:
      return as_object().is_namespace || !as_object().entries.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kArray:
      return "list";
    case Kind::kObject:
      return as_object().is_namespace ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

const Value* Object::Find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::Set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

bool Equal(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.as_string() == b.as_string();
    case Kind::kArray: {
      const Array& x = a.as_array();
      const Array& y = b.as_array();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kObject: {
      const Object& x = a.as_object();
      const Object& y = b.as_object();
      if (x.is_namespace || y.is_namespace) return &x == &y;  // identity, as for Python objects
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, value] : x.entries) {
        const Value* other = y.Find(key);
        if (other == nullptr || !Equal(value, *other)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

std::string FloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form "d.ddde±XX", then laid out the way Python's repr does
  // (format_float_short: exponent notation when the decimal point position is ≤ -4 or > 16).
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string_view text(buffer, static_cast<size_t>(end - buffer));
  std::string sign;
  if (!text.empty() && text[0] == '-') {
    sign = "-";
    text.remove_prefix(1);
  }
  const size_t e_pos = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::string_view exponent_text = text.substr(e_pos + 1);
  if (!exponent_text.empty() && exponent_text[0] == '+') exponent_text.remove_prefix(1);
  std::from_chars(exponent_text.data(), exponent_text.data() + exponent_text.size(), exponent);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decimal_point = exponent + 1;  // value = 0.digits × 10^decimal_point
  const int num_digits = static_cast<int>(digits.size());
  std::string out = sign;
  if (decimal_point <= -4 || decimal_point > 16) {
    out += digits[0];
    if (num_digits > 1) out += "." + digits.substr(1);
    const int shown = decimal_point - 1;
    out += shown < 0 ? "e-" : "e+";
    const int magnitude = std::abs(shown);
    if (magnitude < 10) out += '0';
    out += std::to_string(magnitude);
  } else if (decimal_point <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decimal_point), '0') + digits;
  } else if (decimal_point >= num_digits) {
    out += digits + std::string(static_cast<size_t>(decimal_point - num_digits), '0') + ".0";
  } else {
    out +=
        digits.substr(0, static_cast<size_t>(decimal_point)) + "." + digits.substr(static_cast<size_t>(decimal_point));
  }
  return out;
}

namespace {

// Decodes one character at the start of `text` (non-empty); ill-formed bytes decode as U+FFFD.
char32_t DecodeOne(std::string_view text, size_t& length) {
  const Utf8Scan scan = ScanUtf8(text);
  length = scan.length;
  if (scan.kind != Utf8Scan::kComplete) return 0xFFFD;
  const auto byte = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(text[i])); };
  switch (scan.length) {
    case 1:
      return byte(0);
    case 2:
      return ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
    case 3:
      return ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    default:
      return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) | (byte(3) & 0x3F);
  }
}

void AppendHex(std::string& out, const char* prefix, uint32_t value, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += prefix;
  for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out += kHex[(value >> shift) & 0xF];
}

// Characters Python's str.isprintable() rejects, so repr() escapes them: controls (Cc), separators other than
// the ASCII space (Zs, Zl, Zp), format characters (Cf). Covers the ones that occur in practice; the full Unicode
// table is not worth carrying for repr() of lists, which templates rarely print.
bool IsNonPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return true;
  if (c == 0x1680 || c == 0x180E || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return true;
  return (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF;
}

void AppendStringRepr(const std::string& text, std::string& out) {
  const bool has_single = text.find('\'') != std::string::npos;
  const bool has_double = text.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out += quote;
  for (size_t i = 0; i < text.size();) {
    size_t length = 1;
    const char32_t c = DecodeOne(std::string_view(text).substr(i), length);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (IsNonPrintable(c)) {
      if (c <= 0xFF) {
        AppendHex(out, "\\x", c, 2);
      } else {
        AppendHex(out, "\\u", c, 4);
      }
    } else {
      AppendUtf8(c, out);
    }
    i += length;
  }
  out += quote;
}

void AppendRepr(const Value& value, std::string& out, int depth);

void AppendText(const Value& value, std::string& out, int depth) {
  using Kind = Value::Kind;
  switch (value.kind()) {
    case Kind::kUndefined:
      return;
    case Kind::kNone:
      out += "None";
      return;
    case Kind::kBool:
      out += value.as_bool() ? "True" : "False";
      return;
    case Kind::kInt:
      out += std::to_string(value.as_int());
      return;
    case Kind::kFloat:
      out += FloatRepr(value.as_float());
      return;
    case Kind::kString:
      out += value.as_string();
      return;
    default:
      AppendRepr(value, out, depth);
  }
}

void AppendRepr(const Value& value, std::string& out, int depth) {
  using Kind = Value::Kind;
  if (depth > 64) {
    out += "...";
    return;
  }
  switch (value.kind()) {
    case Kind::kUndefined:
      out += "Undefined";
      return;
    case Kind::kString:
      AppendStringRepr(value.as_string(), out);
      return;
    case Kind::kArray: {
      out += value.is_tuple() ? '(' : '[';
      bool first = true;
      for (const Value& item : value.as_array()) {
        if (!first) out += ", ";
        first = false;
        AppendRepr(item, out, depth + 1);
      }
      if (value.is_tuple() && value.as_array().size() == 1) out += ',';
      out += value.is_tuple() ? ')' : ']';
      return;
    }
    case Kind::kObject: {
      const Object& object = value.as_object();
      out += object.is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, item] : object.entries) {
        if (!first) out += ", ";
        first = false;
        AppendStringRepr(key, out);
        out += ": ";
        AppendRepr(item, out, depth + 1);
      }
      out += object.is_namespace ? "}>" : "}";
      return;
    }
    case Kind::kCallable:
      out += "<function " + value.as_callable().name + ">";
      return;
    default:
      AppendText(value, out, depth);
  }
}

void AppendJsonString(const std::string& text, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < text.size();) {
    size_t length = 1;
    const char32_t c = DecodeOne(std::string_view(text).substr(i), length);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
          AppendHex(out, "\\u", c, 4);
        } else if (ensure_ascii && c > 0x7F) {
          if (c > 0xFFFF) {  // a UTF-16 surrogate pair, as Python writes it
            const char32_t v = c - 0x10000;
            AppendHex(out, "\\u", 0xD800 + (v >> 10), 4);
            AppendHex(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
          } else {
            AppendHex(out, "\\u", c, 4);
          }
        } else {
          AppendUtf8(c, out);
        }
    }
    i += length;
  }
  out += '"';
}

// How tojson lays out arrays and objects: Python's json.dumps indent, separators.
struct JsonLayout {
  bool pretty = false;  // one item per line, indented by `unit` per level
  std::string unit;
  std::string item_separator;
};

JsonLayout LayoutOf(const JsonOptions& options) {
  JsonLayout layout;
  layout.pretty = options.indent >= 0 || !options.indent_text.empty();
  layout.unit = options.indent_text.empty() ? std::string(static_cast<size_t>(std::max(options.indent, 0)), ' ')
                                            : options.indent_text;
  layout.item_separator = options.item_separator.value_or(layout.pretty ? "," : ", ");
  return layout;
}

void AppendNewline(const JsonLayout& layout, int level, std::string& out) {
  out += '\n';
  for (int i = 0; i < level; ++i) out += layout.unit;
}

Status AppendJson(const Value& value, const JsonOptions& options, const JsonLayout& layout, int level,
                  std::string& out);

Status AppendJsonArray(const Array& items, const JsonOptions& options, const JsonLayout& layout, int level,
                       std::string& out) {
  if (items.empty()) {
    out += "[]";
    return Status::Ok();
  }
  out += '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += layout.item_separator;
    if (layout.pretty) AppendNewline(layout, level + 1, out);
    GLINT_RETURN_IF_ERROR(AppendJson(items[i], options, layout, level + 1, out));
  }
  if (layout.pretty) AppendNewline(layout, level, out);
  out += ']';
  return Status::Ok();
}

Status AppendJsonObject(const Object& object, const JsonOptions& options, const JsonLayout& layout, int level,
                        std::string& out) {
  if (object.entries.empty()) {
    out += "{}";
    return Status::Ok();
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& entry : object.entries) entries.push_back(&entry);
  if (options.sort_keys) {
    std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  }
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += layout.item_separator;
    if (layout.pretty) AppendNewline(layout, level + 1, out);
    AppendJsonString(entries[i]->first, options.ensure_ascii, out);
    out += options.key_separator;
    GLINT_RETURN_IF_ERROR(AppendJson(entries[i]->second, options, layout, level + 1, out));
  }
  if (layout.pretty) AppendNewline(layout, level, out);
  out += '}';
  return Status::Ok();
}

Status AppendJson(const Value& value, const JsonOptions& options, const JsonLayout& layout, int level,
                  std::string& out) {
  using Kind = Value::Kind;
  if (level > 256) return InvalidArgument("tojson: value nested deeper than 256 levels");
  switch (value.kind()) {
    case Kind::kUndefined:
      return InvalidArgument("tojson: cannot serialize an undefined value",
                             value.undefined_name().empty() ? "" : StrCat(" ('", value.undefined_name(), "')"));
    case Kind::kCallable:
      return InvalidArgument("tojson: cannot serialize a function");
    case Kind::kNone:
      out += "null";
      return Status::Ok();
    case Kind::kBool:
      out += value.as_bool() ? "true" : "false";
      return Status::Ok();
    case Kind::kInt:
      out += std::to_string(value.as_int());
      return Status::Ok();
    case Kind::kFloat: {
      const double f = value.as_float();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += FloatRepr(f);
      }
      return Status::Ok();
    }
    case Kind::kString:
      AppendJsonString(value.as_string(), options.ensure_ascii, out);
      return Status::Ok();
    case Kind::kArray:
      return AppendJsonArray(value.as_array(), options, layout, level, out);
    case Kind::kObject:
      return AppendJsonObject(value.as_object(), options, layout, level, out);
  }
  return Status::Ok();
}

}  // namespace

std::string ToText(const Value& value) {
  std::string out;
  AppendText(value, out, 0);
  return out;
}

std::string ToRepr(const Value& value) {
  std::string out;
  AppendRepr(value, out, 0);
  return out;
}

Result<std::string> ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  GLINT_RETURN_IF_ERROR(AppendJson(value, options, LayoutOf(options), 0, out));
  return out;
}

Value FromJson(const nlohmann::ordered_json& json) {
  using Type = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case Type::null:
    case Type::discarded:
    case Type::binary:
      return Value::None();
    case Type::boolean:
      return Value(json.get<bool>());
    case Type::number_integer:
      return Value(json.get<int64_t>());
    case Type::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case Type::number_float:
      return Value(json.get<double>());
    case Type::string:
      return Value(json.get<std::string>());
    case Type::array: {
      Array items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return Value(std::move(items));
    }
    case Type::object: {
      Object object;
      object.entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) object.entries.emplace_back(key, FromJson(item));
      return Value(std::move(object));
    }
  }
  return Value::None();
}

}  // namespace glint::jinja
