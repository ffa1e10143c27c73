// A report: titled tables with notes, rendered as aligned text, Markdown or JSON. `glint inspect` and
// `glint plan` build one and print it in the format the user asked for.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/table.h"

namespace glint::plan {

enum class OutputFormat { kTable, kMarkdown, kJson };

// "table", "markdown" or "json".
Result<OutputFormat> ParseOutputFormat(std::string_view name);

struct Report {
  std::string title;
  std::vector<std::string> preamble;  // what was read, from where; printed before the tables
  std::vector<Table> tables;
};

// JSON: {"title", "preamble": [...], "tables": {<table id>: {"title", "columns": [{"id","header"}],
// "rows": [{<column id>: number or string}], "notes": [...]}}}; figures are exact numbers, not display text.
std::string Render(const Report& report, OutputFormat format);

}  // namespace glint::plan
