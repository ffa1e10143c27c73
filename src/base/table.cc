#include "base/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace glint {
namespace {

// Display width in characters: UTF-8 continuation bytes take no column (µ, ×, ≥ in cells).
size_t DisplayWidth(const std::string& text) {
  size_t width = 0;
  for (unsigned char c : text) width += (c & 0xC0) != 0x80;
  return width;
}

std::string Pad(const std::string& text, size_t width, bool right_align) {
  const size_t shown = DisplayWidth(text);
  if (shown >= width) return text;
  const std::string fill(width - shown, ' ');
  return right_align ? fill + text : text + fill;
}

std::string WithUnit(double value, const char* unit, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f %s", decimals, value, unit);
  return buffer;
}

// About three significant digits for a value in [1, 1000): "4.56", "12.3", "325.1".
int DecimalsFor(double value) { return value >= 10 ? 1 : 2; }

}  // namespace

std::string RenderText(const Table& table) {
  std::vector<size_t> widths(table.columns.size(), 0);
  for (size_t c = 0; c < table.columns.size(); ++c) widths[c] = DisplayWidth(table.columns[c].header);
  for (const auto& row : table.rows) {
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c)
      widths[c] = std::max(widths[c], DisplayWidth(row[c].text));
  }
  std::string out;
  if (!table.title.empty()) out += table.title + "\n";
  auto line = [&](auto cell_text) {
    std::string text;
    for (size_t c = 0; c < table.columns.size(); ++c) {
      if (c) text += "  ";
      text += Pad(cell_text(c), widths[c], table.columns[c].numeric && c > 0);
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += "  " + text + "\n";
  };
  line([&](size_t c) { return table.columns[c].header; });
  size_t total = 0;
  for (size_t w : widths) total += w;
  out += "  " + std::string(total + 2 * (widths.empty() ? 0 : widths.size() - 1), '-') + "\n";
  for (const auto& row : table.rows) line([&](size_t c) { return c < row.size() ? row[c].text : std::string(); });
  for (const auto& note : table.notes) out += "  " + note + "\n";
  return out;
}

std::string RenderMarkdown(const Table& table) {
  std::string out;
  if (!table.title.empty()) out += "**" + table.title + "**\n\n";
  out += "|";
  for (const auto& column : table.columns) out += " " + column.header + " |";
  out += "\n|";
  for (size_t c = 0; c < table.columns.size(); ++c) out += (table.columns[c].numeric && c > 0) ? "---:|" : "---|";
  out += "\n";
  for (const auto& row : table.rows) {
    out += "|";
    for (size_t c = 0; c < table.columns.size(); ++c) {
      std::string text = c < row.size() ? row[c].text : "";
      // A pipe inside a cell would end it.
      for (size_t at = text.find('|'); at != std::string::npos; at = text.find('|', at + 2)) text.replace(at, 1, "\\|");
      out += " " + text + " |";
    }
    out += "\n";
  }
  if (!table.notes.empty()) {
    out += "\n";
    for (const auto& note : table.notes) out += note + "  \n";
  }
  return out;
}

std::string FormatInteger(int64_t value) {
  const bool negative = value < 0;
  std::string digits = std::to_string(negative ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

std::string FormatCount(double value) {
  const double magnitude = std::fabs(value);
  if (magnitude >= 1e12) return WithUnit(value / 1e12, "T", 2);
  if (magnitude >= 1e9) return WithUnit(value / 1e9, "B", 2);
  if (magnitude >= 1e6) return WithUnit(value / 1e6, "M", 2);
  if (magnitude >= 1e4) return WithUnit(value / 1e3, "K", 1);
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.0f", value);
  return buffer;
}

std::string FormatBytes(double bytes) {
  const double magnitude = std::fabs(bytes);
  if (magnitude >= 1e12) return WithUnit(bytes / 1e12, "TB", 2);
  if (magnitude >= 1e9) return WithUnit(bytes / 1e9, "GB", DecimalsFor(magnitude / 1e9));
  if (magnitude >= 1e6) return WithUnit(bytes / 1e6, "MB", DecimalsFor(magnitude / 1e6));
  if (magnitude >= 1e3) return WithUnit(bytes / 1e3, "KB", DecimalsFor(magnitude / 1e3));
  return WithUnit(bytes, "B", 0);
}

std::string FormatBinaryBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.2f %s", bytes, kUnits[unit]);
  return text;
}

std::string FormatFixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string FormatSeconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude == 0) return "0 s";
  if (magnitude >= 1) return WithUnit(seconds, "s", DecimalsFor(magnitude));
  if (magnitude >= 1e-3) return WithUnit(seconds * 1e3, "ms", DecimalsFor(magnitude * 1e3));
  if (magnitude >= 1e-6) return WithUnit(seconds * 1e6, "µs", DecimalsFor(magnitude * 1e6));
  return WithUnit(seconds * 1e9, "ns", DecimalsFor(magnitude * 1e9));
}

std::string FormatPercent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1f%%", fraction * 100);
  return buffer;
}

}  // namespace glint
