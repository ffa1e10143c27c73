#include "plan/report.h"

#include <nlohmann/json.hpp>

namespace glint::plan {
namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson TableJson(const Table& table) {
  OrderedJson columns = OrderedJson::array();
  for (const Column& column : table.columns) columns.push_back({{"id", column.id}, {"header", column.header}});
  OrderedJson rows = OrderedJson::array();
  for (const auto& row : table.rows) {
    OrderedJson object = OrderedJson::object();
    for (size_t c = 0; c < table.columns.size() && c < row.size(); ++c) {
      const Cell& cell = row[c];
      if (cell.number) {
        object[table.columns[c].id] = *cell.number;
      } else {
        object[table.columns[c].id] = cell.text;
      }
    }
    rows.push_back(std::move(object));
  }
  return {{"title", table.title}, {"columns", columns}, {"rows", rows}, {"notes", table.notes}};
}

}  // namespace

Result<OutputFormat> ParseOutputFormat(std::string_view name) {
  if (name == "table") return OutputFormat::kTable;
  if (name == "markdown") return OutputFormat::kMarkdown;
  if (name == "json") return OutputFormat::kJson;
  return InvalidArgument("unknown format '", name, "'; expected table, markdown or json");
}

std::string Render(const Report& report, OutputFormat format) {
  std::string out;
  switch (format) {
    case OutputFormat::kTable:
      out += report.title + "\n";
      for (const auto& line : report.preamble) out += "  " + line + "\n";
      for (const Table& table : report.tables) out += "\n" + RenderText(table);
      return out;
    case OutputFormat::kMarkdown:
      out += "## " + report.title + "\n\n";
      for (const auto& line : report.preamble) out += "- " + line + "\n";
      for (const Table& table : report.tables) out += "\n" + RenderMarkdown(table);
      return out;
    case OutputFormat::kJson: {
      OrderedJson tables = OrderedJson::object();
      for (const Table& table : report.tables) tables[table.id] = TableJson(table);
      OrderedJson root = {{"title", report.title}, {"preamble", report.preamble}, {"tables", tables}};
      return root.dump(2) + "\n";
    }
  }
  return out;
}

}  // namespace glint::plan
