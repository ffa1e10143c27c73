// base/table: number formats and the text / Markdown renderers the reports print.
#include "base/table.h"

#include <gtest/gtest.h>

namespace glint {
namespace {

TEST(Table, NumberFormats) {
  EXPECT_EQ(FormatInteger(0), "0");
  EXPECT_EQ(FormatInteger(999), "999");
  EXPECT_EQ(FormatInteger(1000), "1,000");
  EXPECT_EQ(FormatInteger(-1234567), "-1,234,567");
  EXPECT_EQ(FormatInteger(321323031390), "321,323,031,390");
  EXPECT_EQ(FormatCount(812), "812");
  EXPECT_EQ(FormatCount(12345), "12.3 K");
  EXPECT_EQ(FormatCount(5.3e6), "5.30 M");
  EXPECT_EQ(FormatCount(16.742e9), "16.74 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(849500), "849.5 KB");
  EXPECT_EQ(FormatBytes(4.56e9), "4.56 GB");
  EXPECT_EQ(FormatBytes(328.4e9), "328.4 GB");
  EXPECT_EQ(FormatBytes(2.3e12), "2.30 TB");
  EXPECT_EQ(FormatSeconds(0), "0 s");
  EXPECT_EQ(FormatSeconds(2.2169e-3), "2.22 ms");
  EXPECT_EQ(FormatSeconds(12.87e-6), "12.9 µs");
  EXPECT_EQ(FormatSeconds(1.5), "1.50 s");
  EXPECT_EQ(FormatPercent(0.8), "80.0%");
  EXPECT_EQ(FormatFixed(0.125, 2), "0.12");  // round-half-even of the binary value 0.125
}

Table Sample() {
  Table table;
  table.id = "t";
  table.title = "Title";
  table.columns = {{"name", "name", false}, {"value", "value"}};
  table.AddRow({"a|b", IntegerCell(1234)});
  table.AddRow({"µ-long-name", BytesCell(2e9)});
  table.notes.push_back("a note");
  return table;
}

TEST(Table, TextAlignsColumnsByDisplayWidth) {
  const std::string text = RenderText(Sample());
  EXPECT_EQ(text,
            "Title\n"
            "  name           value\n"  // name column 11 wide (µ is one column), value column 7 wide
            "  --------------------\n"
            "  a|b            1,234\n"
            "  µ-long-name  2.00 GB\n"
            "  a note\n");
}

TEST(Table, MarkdownEscapesPipesAndRightAlignsFigures) {
  const std::string markdown = RenderMarkdown(Sample());
  EXPECT_NE(markdown.find("| name | value |\n|---|---:|\n"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| a\\|b | 1,234 |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("a note"), std::string::npos);
}

}  // namespace
}  // namespace glint
