// Tables of figures rendered as aligned text or Markdown, and the number formats the reports share.
//
// A cell keeps its display text and, when it is a figure, the number behind it, so a JSON renderer (plan/report.h)
// can emit exact values from the same table the text renderer prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace glint {

struct Cell {
  std::string text;
  std::optional<double> number;  // set for figures; JSON emits it instead of the text

  Cell() = default;
  Cell(std::string display) : text(std::move(display)) {}  // NOLINT(google-explicit-constructor)
  Cell(const char* display) : text(display) {}             // NOLINT(google-explicit-constructor)
  Cell(std::string display, double value) : text(std::move(display)), number(value) {}
};

struct Column {
  std::string id;       // JSON key: lower_snake_case
  std::string header;   // shown in text and Markdown
  bool numeric = true;  // right-aligned
};

struct Table {
  std::string id;  // JSON key of the table
  std::string title;
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;  // each row has columns.size() cells
  std::vector<std::string> notes;       // printed under the table

  void AddRow(std::vector<Cell> row) { rows.push_back(std::move(row)); }
};

std::string RenderText(const Table& table);
std::string RenderMarkdown(const Table& table);

// 1234567 → "1,234,567".
std::string FormatInteger(int64_t value);
// Parameters: 1.27e9 → "1.27 B", 5.3e6 → "5.30 M", 812 → "812".
std::string FormatCount(double value);
// Decimal units (GB = 10^9 bytes, as checkpoint sizes and HBM capacities are quoted): "325.1 GB", "849.5 KB".
std::string FormatBytes(double bytes);
// Binary units (KiB = 2^10 bytes, as memory pools are sized): "1.50 MiB", "812 B".
std::string FormatBinaryBytes(double bytes);
// Fixed decimals: FormatFixed(0.1234, 2) → "0.12".
std::string FormatFixed(double value, int decimals);
// Seconds with a unit that keeps 3 significant digits: "12.3 ms", "4.56 µs", "1.20 s".
std::string FormatSeconds(double seconds);
// Percent with one decimal: 0.823 → "82.3%".
std::string FormatPercent(double fraction);

// Cells built from a value and its formatted text.
inline Cell CountCell(double value) { return Cell(FormatCount(value), value); }
inline Cell IntegerCell(int64_t value) { return Cell(FormatInteger(value), static_cast<double>(value)); }
inline Cell BytesCell(double bytes) { return Cell(FormatBytes(bytes), bytes); }
inline Cell SecondsCell(double seconds) { return Cell(FormatSeconds(seconds), seconds); }
inline Cell PercentCell(double fraction) { return Cell(FormatPercent(fraction), fraction); }
inline Cell FixedCell(double value, int decimals) { return Cell(FormatFixed(value, decimals), value); }

}  // namespace glint
